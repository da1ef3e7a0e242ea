"""Recording observations: many in one durable write, idempotent under caller-chosen ids.

An observation is immutable once recorded and waits in the inbox until claimed
(see :func:`protocol.engine.observe`). :func:`record` is what every port's
``observe`` and ``observe_many`` run: a retry that names the same event id gets
the event already recorded (``duplicate``), never a second one.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from protocol.engine import claim as claim_inputs
from protocol.engine import deliver as deliver_request
from protocol.engine import observe as observe_event
from protocol.errors import RequestError
from protocol.ids import is_event_id
from protocol.recall import RecallPage, RecallRequest, as_recall_observation, for_model, recall
from protocol.replies import (
    ClaimReply,
    DeliverReply,
    ObserveClaimReply,
    ObserveReply,
    RecallReply,
)
from protocol.state import Event
from protocol.view import WriteView
from service.registry import Count, Cursor, EventRef, Session, Text

if TYPE_CHECKING:
    from service.context import Context

MAX_OBSERVE_BATCH = 1024
"""Most observations one batch holds."""


class Observation(NamedTuple):
    """One observation to record: its kind, text, session, time, stable event id and
    the extra fields it is recorded with (``risky``)."""

    kind: str
    text: str
    session: str
    time: float | None
    event_id: str
    extra: dict[str, Any] | None = None


def new_event_id() -> str:
    """A fresh stable event id: ``ev:`` and 20 random hex digits."""
    return "ev:" + os.urandom(10).hex()


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
    for kind, text, session, at, eid, extra in batch:
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
        e, cs = observe_event(
            w, kind=kind, text=text, session=session, now=when, event_id=eid, extra=extra
        )
        w.apply(cs)
        out.append((e, False))
    return out


# -- the operations (declared in service.operations) ---------------------------------


def _event_id(value: Any) -> Any:
    if value is not None and (not isinstance(value, str) or not is_event_id(value)):
        raise PydanticCustomError(
            "bad_event_id", "an event id is 'ev:' and 20 hex digits, not {value}", {"value": value}
        )
    return value


EventId = Annotated[str, BeforeValidator(_event_id)]
"""A caller-chosen event id (``ev:`` and 20 hex digits): a retry under it is idempotent."""


class ObservationItem(BaseModel):
    """One observation of a batch: ``(kind, text, session[, event_id])`` or this map,
    which may add ``time`` (seconds since the epoch: when the input happened)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Text
    text: Text
    session: Session = "main"
    event_id: EventId | None = None
    time: Annotated[float, Field(ge=0)] | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_tuple(cls, value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            if len(value) not in (3, 4):
                raise PydanticCustomError(
                    "bad_argument", "an observation is (kind, text, session[, event_id])"
                )
            return dict(zip(("kind", "text", "session", "event_id"), value, strict=False))
        return value

    def with_event_id(self) -> ObservationItem:
        """This item with an event id: its own, else a fresh one."""
        if self.event_id is not None:
            return self
        return self.model_copy(update={"event_id": new_event_id()})


Batch = Annotated[Sequence[ObservationItem], Field(max_length=MAX_OBSERVE_BATCH)]
"""The observations of one durable write: at most :data:`MAX_OBSERVE_BATCH` (none: no write)."""


def observe(
    ctx: Context,
    kind: Text,
    text: Text,
    *,
    session: Session = "main",
    event_id: EventId | None = None,
    risky: bool = False,
) -> ObserveReply:
    """Record an observation; it is immutable and waits until claimed: ``{ref, id, duplicate}``.

    Under *event_id* (chosen by the caller; a remote handle draws one) a retry
    answers the event already recorded (``duplicate``). *risky* flags unreviewed
    content: a frame derived from it enters as a candidate (R42).
    """
    return ctx.backend.transact(
        lambda w: observe_in(w, kind, text, session=session, event_id=event_id, risky=risky)
    )


def observe_in(
    w: WriteView,
    kind: str,
    text: str,
    *,
    session: str = "main",
    event_id: str | None = None,
    risky: bool = False,
) -> ObserveReply:
    """``observe``'s write inside *w* (a write it may share with other calls)."""
    eid = event_id or new_event_id()
    extra = {"risky": True} if risky else None
    e, duplicate = record(w, [Observation(kind, text, session, None, eid, extra)], time.time())[0]
    return observed(e, duplicate)


def observe_many(ctx: Context, items: Batch) -> list[ObserveReply]:
    """Record many observations, in order, in one durable write; one reply per item.

    Each item is ``(kind, text, session)``, ``(kind, text, session, event_id)``
    or a map that may add ``time``. An event id recorded before answers its
    event (``duplicate``); one naming a different observation is refused
    (``event_id_reused``) and nothing of the batch is recorded.
    """
    if not items:
        return []
    return ctx.backend.transact(lambda w: observe_many_in(w, items))


def observe_many_in(w: WriteView, items: Sequence[ObservationItem]) -> list[ObserveReply]:
    """``observe_many``'s write inside *w* (a write it may share with other calls)."""
    batch = [
        Observation(i.kind, i.text, i.session, i.time, i.event_id or new_event_id()) for i in items
    ]
    return [observed(e, duplicate) for e, duplicate in record(w, batch, time.time())]


def claim(ctx: Context) -> ClaimReply:
    """Claim every waiting input as one batch (R20): tick, advanced, claimed, finalized, version."""
    return ctx.backend.transact(claim_in)


def claim_in(w: WriteView) -> ClaimReply:
    """``claim``'s write inside *w* (a write it may share with other calls)."""
    result, cs = claim_inputs(w, now=time.time())
    w.apply(cs)
    return ClaimReply.of(result.to_dict())


def observe_and_claim(
    ctx: Context,
    kind: Text,
    text: Text,
    *,
    session: Session = "main",
    event_id: EventId | None = None,
    risky: bool = False,
) -> ObserveClaimReply:
    """Record an observation and claim every waiting input with it, in one durable write:
    ``observe``'s reply and ``claim``'s in one map.

    What ``observe`` then ``claim`` would write and answer, for one call and one
    write (an agent's step that records a tool result and evaluates it). A refused
    observation (``event_id_reused``) claims nothing and writes nothing. Under the
    same *event_id* a retry records nothing twice (``duplicate``); its claim, like a
    repeated ``claim``, claims whatever waits then.
    """
    return ctx.backend.transact(
        lambda w: observe_and_claim_in(
            w, kind, text, session=session, event_id=event_id, risky=risky
        )
    )


def observe_and_claim_in(
    w: WriteView,
    kind: str,
    text: str,
    *,
    session: str = "main",
    event_id: str | None = None,
    risky: bool = False,
) -> ObserveClaimReply:
    """``observe_and_claim``'s write inside *w* (a write it may share with other calls)."""
    observed = observe_in(w, kind, text, session=session, event_id=event_id, risky=risky)
    claimed = claim_in(w)
    return ObserveClaimReply(
        ref=observed.ref,
        id=observed.id,
        duplicate=observed.duplicate,
        tick=claimed.tick,
        advanced=claimed.advanced,
        claimed=claimed.claimed,
        finalized=claimed.finalized,
        version=claimed.version,
    )


def deliver(ctx: Context, ref: EventRef) -> DeliverReply:
    """Mark the user request *ref* delivered: it may now be retired (R19)."""
    return ctx.backend.transact(lambda w: deliver_in(w, ref))


def deliver_in(w: WriteView, ref: str) -> DeliverReply:
    """``deliver``'s write inside *w* (a write it may share with other calls)."""
    e, cs = deliver_request(w, ref)
    if cs is not None:
        w.apply(cs)
    return DeliverReply(ref=e.ref, id=e.id, delivered=True)


RecallArg = RecallRequest | dict[str, Any] | str
"""A recall request: the model, its map or its JSON text."""


def recall_recorded(
    ctx: Context,
    request: RecallArg,
    cursor: Cursor | None = None,
    view_version: Count | None = None,
    *,
    session: Session = "main",
) -> tuple[RecallPage, Event]:
    """Recall one page for the model and record it as a ``recall_result`` observation (R30);
    the page and the recorded event.

    The result enters the context as tool output; no frame's lifecycle
    changes. Model-facing: without a ``trust`` filter the request gets
    candidate and accepted only, and naming rejected or quarantined is
    refused (``not_permitted``), see :func:`protocol.recall.for_model`; the
    cursor binds the request as run. The page is read and recorded in one
    write, and the event's ``extra["recalled"]`` lists the ids of the
    frames the page returned, in page order.
    """
    if not isinstance(request, RecallRequest):
        request = RecallRequest.parse(request)
    return ctx.backend.transact(
        lambda w: recall_recorded_in(w, request, cursor, view_version, session=session)
    )


def recall_recorded_in(
    w: WriteView,
    request: RecallArg,
    cursor: str | None = None,
    view_version: int | None = None,
    *,
    session: str = "main",
) -> tuple[RecallPage, Event]:
    """``recall_recorded``'s read and write inside *w* (a write it may share with other
    calls): the page is read from *w*, so it sees what the calls before it in that write
    changed."""
    if not isinstance(request, RecallRequest):
        request = RecallRequest.parse(request)
    req = for_model(request)
    page = recall(w, req, cursor, view_version)
    recalled = [
        str(n["id"]) for n in page.nodes if n["type"] == "frame" and n["lifecycle"] != "missing"
    ]
    e, cs = observe_event(
        w,
        kind="recall_result",
        text=as_recall_observation(page, req),
        session=session,
        now=time.time(),
        event_id=new_event_id(),
        extra={"recalled": recalled},
    )
    w.apply(cs)
    return page, e


def recall_observation(
    ctx: Context,
    request: RecallArg,
    *,
    session: Session = "main",
    cursor: Cursor | None = None,
    view_version: Count | None = None,
) -> RecallReply:
    """Recall one page for the model, recorded as a ``recall_result`` observation (R26, R30).

    Answers the observation's ref, the page's node and edge counts, the frame
    ids it returned (``recalled``) and the next cursor; ``recall_recorded`` answers
    the page itself.
    """
    if not isinstance(request, RecallRequest):
        request = RecallRequest.parse(request)
    return ctx.backend.transact(
        lambda w: recall_observation_in(
            w, request, session=session, cursor=cursor, view_version=view_version
        )
    )


def recall_observation_in(
    w: WriteView,
    request: RecallArg,
    *,
    session: str = "main",
    cursor: str | None = None,
    view_version: int | None = None,
) -> RecallReply:
    """``recall_observation``'s read and write inside *w* (a write it may share with other
    calls)."""
    page, e = recall_recorded_in(w, request, cursor, view_version, session=session)
    return RecallReply(
        ref=e.ref,
        nodes=len(page.nodes),
        edges=len(page.edges),
        recalled=[str(f) for f in e.extra.get("recalled") or ()],
        next_cursor=page.next_cursor,
    )


def keyed(args: Any) -> Any:
    """The arguments of ``observe`` or ``observe_many`` with an event id for every
    observation: what a remote port sends, so a retried call records nothing twice."""
    if hasattr(args, "items"):
        items = [item.with_event_id() for item in args.items]
        return args.model_copy(update={"items": items})
    if args.event_id is None:
        return args.model_copy(update={"event_id": new_event_id()})
    return args
