"""Identifiers: frame ids, event references, relation labels, client ids.

* A **frame id** is a path-like name: one or more segments separated by ``/``;
  a segment is Unicode letters, digits, ``-``, ``_`` and ``.``, and the first
  character of the id is a letter (``release``, ``deployment/target-v2``,
  ``发布/流程``). At most 128 characters.
* An **event reference** is ``@e`` followed by a positive decimal number
  (``@e42``). It is unique within a context and never reused.
* An **event id** is the stable identity of an event: ``ev:`` and 20 hex digits.
  Frame ids cannot contain ``:``, so a source is unambiguous.
* A **label** names a relation: an atom of at most 128 characters.
"""

from __future__ import annotations

import re

from protocol.forms import is_atom_text

MAX_FRAME_ID = 128
MAX_LABEL = 128
MAX_CLIENT_ID = 200

_FRAME_RE = re.compile(r"[^\W\d_][\w.\-]*(?:/[\w.\-]+)*\Z")
_REF_RE = re.compile(r"@e([1-9][0-9]{0,17})\Z")
_EVENT_ID_RE = re.compile(r"ev:[0-9a-f]{20}\Z")

SUPERSEDES = "supersedes"
"""The one relation label the runtime interprets (R17)."""


def is_frame_id(text: str) -> bool:
    """True if *text* is a valid frame id."""
    return len(text) <= MAX_FRAME_ID and bool(_FRAME_RE.match(text))


def is_event_ref(text: str) -> bool:
    """True if *text* is an event reference such as ``@e42``."""
    return bool(_REF_RE.match(text))


def is_event_id(text: str) -> bool:
    """True if *text* is a stable event id (``ev:`` + 20 hex digits)."""
    return bool(_EVENT_ID_RE.match(text))


def ref_seq(ref: str) -> int:
    """The sequence number inside an event reference: ``@e42`` → 42."""
    m = _REF_RE.match(ref)
    if not m:
        raise ValueError(f"not an event reference: {ref!r}")
    return int(m.group(1))


def event_ref(seq: int) -> str:
    """The event reference of sequence number *seq*: 42 → ``@e42``."""
    return f"@e{seq}"


def is_label(text: str) -> bool:
    """True if *text* can name a relation."""
    return len(text) <= MAX_LABEL and is_atom_text(text)


def is_ref(text: str) -> bool:
    """True if *text* is a frame id or an event reference."""
    return is_event_ref(text) or is_frame_id(text)
