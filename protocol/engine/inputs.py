"""The inputs of a context: observations recorded, claimed in batches, requests delivered.

* :func:`observe` — record an observation; it waits in the inbox, the
  version unchanged;
* :func:`claim` — claim the waiting inputs as one batch, advance the tick once
  if the batch holds an external fact (R20), and finalize due retirements as
  a recorded runtime transaction (R12, R16);
* :func:`deliver` — mark a user request delivered, which lifts its causal
  protection (R19);
* :func:`resolve_event` and :func:`source_ref` — the two spellings of an
  event: its ``@eN`` reference and its stable id.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from protocol.engine.lifecycle import finalize_due
from protocol.errors import NotFound, OutOfRange, RequestError
from protocol.ids import event_ref, is_event_id, is_event_ref, ref_seq
from protocol.state import EVENT_KINDS, TICK_KINDS, Event, estimate_tokens, preview_of
from protocol.view import Changeset, ReadView

MAX_EVENT_CHARS = 64 << 20
"""Largest observation accepted, in characters."""
MAX_SESSION = 128
"""Longest session name, in characters."""


@dataclass(slots=True)
class ClaimResult:
    """One claimed input batch: the tick after it, the refs claimed, frames finalized."""

    tick: int
    advanced: bool
    claimed: tuple[str, ...]
    finalized: tuple[str, ...]
    version: int

    def to_dict(self) -> dict[str, Any]:
        """The JSON form printed by ``morphz claim``."""
        return {
            "tick": self.tick,
            "advanced": self.advanced,
            "claimed": list(self.claimed),
            "finalized": list(self.finalized),
            "version": self.version,
        }


def claim(view: ReadView, *, now: float) -> tuple[ClaimResult, Changeset]:
    """Claim every waiting input as one batch (R20).

    The tick advances once if the batch holds a user message, tool result or
    external fact, however many it holds; recall results alone do not advance
    it. Retirements due by the new tick are then finalized (see
    :func:`finalize_due`).
    """
    meta = view.meta()
    seqs = view.inbox()
    events = [e for e in (view.event(s) for s in seqs) if e is not None]
    advanced = any(e.kind in TICK_KINDS for e in events)
    tick = meta.tick + 1 if advanced else meta.tick
    finalized: list[str] = []
    if advanced:
        finalized, cs = finalize_due(view, tick=tick, now=now)
    else:
        cs = Changeset(meta=meta.copy())
    cs.inbox_del = list(seqs)
    for e in events:
        w = e.copy()
        w.claimed_tick = tick
        cs.events.append(w)
    assert cs.meta is not None
    result = ClaimResult(
        tick=tick,
        advanced=advanced,
        claimed=tuple(e.ref for e in events),
        finalized=tuple(finalized),
        version=cs.meta.version,
    )
    return result, cs


def observe(
    view: ReadView,
    *,
    kind: str,
    text: str,
    session: str,
    now: float,
    event_id: str,
    extra: dict[str, Any] | None = None,
) -> tuple[Event, Changeset]:
    """Record an observation; it waits in the inbox until claimed. Version is unchanged."""
    if kind not in EVENT_KINDS:
        raise RequestError(
            f"unknown observation kind {kind!r}; use one of {', '.join(EVENT_KINDS)}",
            code="bad_kind",
        )
    if not isinstance(text, str):
        raise RequestError("observation text must be a string", code="bad_text")
    if len(text) > MAX_EVENT_CHARS:
        raise OutOfRange(f"observation longer than {MAX_EVENT_CHARS} characters")
    if not isinstance(now, (int, float)) or isinstance(now, bool) or not 0 <= now < 1e11:
        raise OutOfRange(f"an observation time is seconds since the epoch, not {now!r}")
    if not session or len(session) > MAX_SESSION or not session.isprintable():
        raise RequestError("a session name is 1 to 128 printable characters", code="bad_session")
    meta = view.meta()
    seq = meta.next_seq
    e = Event(
        seq=seq,
        id=event_id,
        kind=kind,
        session=session,
        time=now,
        size=len(text),
        tokens=estimate_tokens(text),
        preview=preview_of(text),
        delivered=False if kind == "user_message" else None,
        extra=dict(extra or {}),
    )
    new_meta = meta.copy()
    new_meta.next_seq = seq + 1
    cs = Changeset(
        meta=new_meta,
        events=[e],
        contents=[(seq, text)],
        inbox_add=[seq],
        outbox={"version": meta.version, "frames": [], "events": [seq]},
    )
    return e, cs


def deliver(view: ReadView, ref: str) -> tuple[Event, Changeset | None]:
    """Mark the user request *ref* delivered, lifting its causal protection (R19)."""
    e = resolve_event(view, ref)
    if e.kind != "user_message":
        raise RequestError(f"{ref} is a {e.kind}, not a user request", code="not_a_request")
    if e.delivered:
        return e, None
    w = e.copy()
    w.delivered = True
    return w, Changeset(events=[w])


def resolve_event(view: ReadView, ref: str) -> Event:
    """The event named by ``@eN`` or by its stable id; raises NotFound otherwise."""
    seq: int | None
    if is_event_ref(ref):
        seq = ref_seq(ref)
    elif is_event_id(ref):
        seq = view.event_seq(ref)
    else:
        raise NotFound(f"not an event reference: {ref!r} (expected @e<number>)", code="bad_ref")
    e = view.event(seq) if seq is not None else None
    if e is None:
        raise NotFound(f"no event {ref}")
    return e


def source_ref(view: ReadView, source: str) -> str:
    """A stored source as the model reads it: event ids become ``@eN``, frame ids stay."""
    if source.startswith("ev:"):
        seq = view.event_seq(source)
        return event_ref(seq) if seq is not None else source
    return source
