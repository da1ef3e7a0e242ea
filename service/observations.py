"""Recording observations: many in one durable write, idempotent under caller-chosen ids.

An observation is immutable once recorded and waits in the inbox until claimed
(see :func:`protocol.engine.observe`). :func:`record` is what every port's
``observe`` and ``observe_many`` run: a retry that names the same event id gets
the event already recorded (``duplicate``), never a second one.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, NamedTuple

from protocol.engine import observe
from protocol.errors import OutOfRange, RequestError
from protocol.ids import is_event_id
from protocol.replies import ObserveReply
from protocol.state import Event
from protocol.view import WriteView

MAX_OBSERVE_BATCH = 1024
"""Most observations one checked batch (:func:`check_items`) holds."""


class Observation(NamedTuple):
    """One observation to record: its kind, text, session, time and stable event id."""

    kind: str
    text: str
    session: str
    time: float | None
    event_id: str


def new_event_id() -> str:
    """A fresh stable event id: ``ev:`` and 20 random hex digits."""
    return "ev:" + os.urandom(10).hex()


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise RequestError(
            f"{what} must be a string, not {type(value).__name__}", code="bad_argument"
        )
    return value


def check_items(items: Any) -> list[tuple[str, str, str, str]]:
    """``[kind, text, session, event_id | None]`` items checked, each with an event id.

    A missing id is drawn fresh. RequestError ``bad_argument`` for a malformed
    item, ``bad_event_id`` for an id that is not ``ev:`` and 20 hex digits;
    OutOfRange for an empty batch or one over :data:`MAX_OBSERVE_BATCH`.
    """
    if not isinstance(items, (list, tuple)):
        raise RequestError("observations must be a list", code="bad_argument")
    if not 1 <= len(items) <= MAX_OBSERVE_BATCH:
        raise OutOfRange(
            f"number of observations must be between 1 and {MAX_OBSERVE_BATCH}, not {len(items)}"
        )
    out = []
    for item in items:
        if not isinstance(item, (list, tuple)) or len(item) not in (3, 4):
            raise RequestError(
                "an observation is [kind, text, session, event_id]", code="bad_argument"
            )
        kind = _text(item[0], "kind")
        text = _text(item[1], "text")
        session = _text(item[2], "session")
        eid = item[3] if len(item) == 4 else None
        if eid is None:
            eid = new_event_id()
        elif not isinstance(eid, str) or not is_event_id(eid):
            raise RequestError(
                f"an event id is 'ev:' and 20 hex digits, not {eid!r}", code="bad_event_id"
            )
        out.append((kind, text, session, eid))
    return out


def observed(e: Event, duplicate: bool) -> ObserveReply:
    """What ``observe`` answers for the recorded event *e* on every port."""
    return ObserveReply(ref=e.ref, id=e.id, duplicate=duplicate)


def record(w: WriteView, batch: Sequence[Observation], now: float) -> list[tuple[Event, bool]]:
    """Record *batch* in order on *w*; each event with whether it was there already.

    An event id recorded before answers its event (``True``) when kind, size and
    session match, else RequestError ``event_id_reused`` (nothing of the batch
    is kept: the caller's write is discarded).
    """
    out: list[tuple[Event, bool]] = []
    for kind, text, session, at, eid in batch:
        seq = w.event_seq(eid)
        if seq is not None:
            known = w.event(seq)
            assert known is not None
            if known.kind != kind or known.size != len(text) or known.session != session:
                raise RequestError(
                    f"event id {eid} names a different observation", code="event_id_reused"
                )
            out.append((known, True))
            continue
        when = now if at is None else at
        e, cs = observe(w, kind=kind, text=text, session=session, now=when, event_id=eid)
        w.apply(cs)
        out.append((e, False))
    return out
