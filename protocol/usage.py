"""Usage traces (R42): which memories a model call retrieved, saw and used.

One trace is written per model call (``Context.record_trace``); the agent loop
fills these fields (all JSON-ready):

``frames_present`` / ``events_present``
    what the compiled input held (frame ids, ``@eN`` refs);
``retrieved``
    frames that reached this input through retrieval: the frames named by the
    ``recall_result`` observations present in it;
``recalls``
    retrievals the call asked for: ``[{"ref": "@eN", "frames": [...]}]``; their
    results reach the next call's input;
``decisions``
    one per committed transaction: ``{"version", "writes", "cited"}``, where
    ``cited`` is the transaction's ``from`` sources (frames and events);
``action_cited``
    frames and events named in the action's arguments (or a reply's text);
``cited``
    the union of the two above, frames only: what :func:`find_low_quality
    <protocol.governance.find_low_quality>` counts as a use;
``outcome``
    ``ok`` or ``failed`` for a tool action, None without one.

:func:`influence` reads one trace back as an answer to "which memories
influenced this decision": cited, present but not cited, and retrieved but not
adopted. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from protocol.ids import is_event_ref, is_frame_id
from protocol.tx import ContextTx, Derive, Revise, key_display

_TOKEN_RE = re.compile(r"[^\s()\[\]{}<>\"',;`]+")


def tx_citations(tx: ContextTx) -> list[str]:
    """The ``from`` sources of *tx*'s derives and revises, in order, each once."""
    out: dict[str, None] = {}
    for op in tx.ops:
        if isinstance(op, (Derive, Revise)):
            for ref in op.sources:
                out.setdefault(ref, None)
    return list(out)


def tx_writes(tx: ContextTx) -> list[str]:
    """The frames, events and edges *tx* changes, as people read them, sorted."""
    return sorted(key_display(k) for k in tx.footprint()[1])


def mentions(value: Any, known: Iterable[str]) -> list[str]:
    """Frame ids of *known* and ``@eN`` refs named in *value* (text, or nested lists/dicts).

    A name counts when it is a whole token: ``release`` in ``"ship release now"``,
    not in ``"prerelease"``. Sorted, each once.
    """
    frames = set(known)
    found: set[str] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            for token in _TOKEN_RE.findall(item):
                token = token.rstrip(".:!?")
                if token in frames or is_event_ref(token):
                    found.add(token)
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return sorted(found)


def roles(trace: Mapping[str, Any], frame_id: str) -> list[str]:
    """How *frame_id* took part in the traced call: ``present``, ``retrieved``, ``cited``."""
    out = []
    if frame_id in (trace.get("frames_present") or ()):
        out.append("present")
    if frame_id in (trace.get("retrieved") or ()) or any(
        frame_id in (r.get("frames") or ()) for r in trace.get("recalls") or ()
    ):
        out.append("retrieved")
    if frame_id in _cited(trace):
        out.append("cited")
    return out


def _cited(trace: Mapping[str, Any]) -> list[str]:
    out: dict[str, None] = {}
    for d in trace.get("decisions") or ():
        for ref in d.get("cited") or ():
            out.setdefault(str(ref), None)
    for ref in trace.get("action_cited") or ():
        out.setdefault(str(ref), None)
    return list(out)


def influence(trace: Mapping[str, Any], version: int | None = None) -> dict[str, Any]:
    """Which memories influenced the call's decision (R42), from its trace.

    With *version*, the decision is the transaction committed at that version
    (its ``from`` sources are what it cited); without, the whole call: every
    committed transaction and the action. Returns ``{"call", "session",
    "version", "decision", "action", "cited_frames", "cited_events",
    "present_not_cited", "retrieved_adopted", "retrieved_not_adopted",
    "outcome"}``; frame and event lists are sorted. A frame the decision
    itself writes is not counted as "present, not cited".
    """
    decisions = list(trace.get("decisions") or ())
    if version is not None:
        decisions = [d for d in decisions if d.get("version") == version]
        cited = {str(r) for d in decisions for r in d.get("cited") or ()}
    else:
        cited = set(_cited(trace))
    written = {str(w) for d in decisions for w in d.get("writes") or ()}
    present = set(trace.get("frames_present") or ()) - written
    retrieved = set(trace.get("retrieved") or ())
    return {
        "call": trace.get("call"),
        "session": trace.get("session"),
        "thread": trace.get("thread"),
        "version": trace.get("version"),
        "decisions": decisions,
        "action": trace.get("action") if version is None else None,
        "cited_frames": sorted(r for r in cited if is_frame_id(r)),
        "cited_events": sorted((r for r in cited if is_event_ref(r)), key=_ref_order),
        "present_not_cited": sorted(present - cited),
        "retrieved_adopted": sorted(retrieved & cited),
        "retrieved_not_adopted": sorted(retrieved - cited),
        "outcome": trace.get("outcome") if version is None else None,
    }


def _ref_order(ref: str) -> int:
    return int(ref[2:])


__all__ = ["influence", "mentions", "roles", "tx_citations", "tx_writes"]
