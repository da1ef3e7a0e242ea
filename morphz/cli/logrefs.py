"""``morphz log … | morphz tx`` across contexts: event references that keep their meaning.

An ``@eN`` reference names an observation by its number in one context; after a
fork, the same number can name another observation in each context (the stable
``ev:`` id does not change). So ``morphz log`` prints, before the logged text, one
comment line naming the context, the version and the stable id of every event
reference the transaction uses::

    ; logged in context copy at version 3; @e2 is ev:9f0c…, @e5 is ev:41aa…

and ``morphz tx`` (with or without ``--check``) reads that line back and refuses a
transaction whose references name other observations in the target context
(``ref_mismatch``, exit 1, nothing written), saying which reference names the same
observation there, if any. A transaction with no such line (written by hand) is
taken as it is. The parse is bounded: only the leading comment lines are read.
"""

from __future__ import annotations

import re
from typing import Any

from protocol.errors import NotFound, RequestError
from protocol.ids import is_event_ref
from protocol.tx import ContextTx

__all__ = ["check_refs", "event_refs", "header", "parse_header"]

HEADER = re.compile(r"; logged in context (\S{1,128}) at version (\d{1,19}); (.{0,65536})")
PAIR = re.compile(r"(@e[1-9][0-9]{0,17}) is (ev:[0-9a-zA-Z_-]{1,64})")
MAX_HEADER_LINES = 8
"""Leading comment lines looked at for the header."""


def event_refs(tx: ContextTx) -> list[str]:
    """Every event reference the operations of *tx* use (sources, retirements …), once each."""
    found: dict[str, None] = {}

    def walk(value: Any) -> None:
        if isinstance(value, str):
            if is_event_ref(value):
                found.setdefault(value, None)
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v)

    for op in tx.ops:
        walk(op.model_dump())
    return list(found)


def header(context: str, version: int, ids: dict[str, str]) -> str:
    """The comment line ``morphz log`` prints before a logged transaction ('' if no refs)."""
    if not ids:
        return ""
    pairs = ", ".join(f"{ref} is {evid}" for ref, evid in ids.items())
    return f"; logged in context {context} at version {version}; {pairs}"


def parse_header(text: str) -> tuple[str, dict[str, str]] | None:
    """The context and ``{ref: ev id}`` of a :func:`header` line leading *text*, or None."""
    for line in text.lstrip().split("\n", MAX_HEADER_LINES)[:MAX_HEADER_LINES]:
        if not line.startswith(";"):
            return None
        m = HEADER.fullmatch(line.rstrip("\r"))
        if m is not None:
            return m.group(1), dict(PAIR.findall(m.group(3)))
    return None


def check_refs(text: str, target: str, ctx: Any) -> None:
    """Refuse *text* (``ref_mismatch``) if its header's references name other observations
    in context *target* (read through *ctx*, which answers ``event(ref)``)."""
    parsed = parse_header(text)
    if parsed is None:
        return
    source, ids = parsed
    for ref, evid in ids.items():
        try:
            here = str(ctx.event(ref)["id"])
        except NotFound:
            here = None
        if here == evid:
            continue
        try:
            mapped: str | None = str(ctx.event(evid)["ref"])
        except NotFound:
            mapped = None
        means = f"is {here}" if here is not None else "names no observation"
        fix = (
            f"; that observation is {mapped} here: write {mapped} instead"
            if mapped is not None
            else "; that observation is not in this context (record it here first)"
        )
        raise RequestError(
            f"{ref} meant {evid} in context {source}, but in context {target} {ref} {means}{fix}",
            code="ref_mismatch",
        )
