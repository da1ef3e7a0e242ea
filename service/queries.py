"""The read operations of a context: their service functions and their declarations.

Each read is declared in :class:`Reads`, below the functions, beside them: adding a
read-only operation touches this module (its function and its declaration), its test,
and the generated call table of ``docs/api.md``.

Each function takes the :class:`~service.context.Context` first and the call's
arguments after it, already checked against the argument model its signature
describes (:mod:`service.registry`): the bounds written in the annotations are
the only argument checks there are. Each reads one snapshot (one
``backend.read``) through :mod:`service.reads` and answers a reply model of
:mod:`protocol.replies`; none writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field, Strict

import service.reads as reads
import service.traces as traces_of
from protocol.engine import resolve_event
from protocol.errors import NotFound, RequestError
from protocol.governance import MAX_AUDIT_PAGE
from protocol.recall import RecallPage, RecallRequest, read_recall
from protocol.replies import (
    EventPage,
    EventReply,
    FrameReply,
    HistoryEntry,
    MetaReply,
    Reply,
    SnapshotReply,
    StateReply,
    UpdateReadReply,
)
from protocol.tx import valid_time
from service.asof import VersionRef, resolve
from service.reads import MAX_READ_CHARS, MAX_SNAPSHOT_FRAMES, event_dict, logged_tx
from service.registry import Count, Cursor, EventRef, Example, FrameId, Operation, Route, Tool

if TYPE_CHECKING:
    from service.context import Context

FrameIds = Annotated[Sequence[FrameId], Field(max_length=MAX_SNAPSHOT_FRAMES)]
"""The frame ids of one consistent read: at most :data:`~service.reads.MAX_SNAPSHOT_FRAMES`."""
Length = Annotated[int, Strict(), Field(ge=0, le=MAX_READ_CHARS)]
"""How many characters of an event's text one read returns."""
AuditLimit = Annotated[int, Strict(), Field(ge=1, le=MAX_AUDIT_PAGE)]
"""How many audit entries one page holds."""
TraceLimit = Annotated[int, Strict(), Field(ge=1, le=traces_of.MAX_TRACE_PAGE)]
"""How many traces one read returns."""
ValidTime = float | Annotated[str, Strict(), Field(max_length=64)]
"""A moment of valid time: epoch seconds or an ISO date (``2026-01-01``)."""


def frame(ctx: Context, frame_id: FrameId) -> FrameReply:
    """The current frame (body, revision, sources, lifecycle, relations); NotFound."""
    return FrameReply.of(ctx.backend.read(lambda v: reads.frame(v, frame_id)))


def frame_at(ctx: Context, frame_id: FrameId, version: VersionRef) -> FrameReply:
    """The frame as it stood when *version* (a number or a tag) committed (R29 as-of
    read); NotFound if absent."""

    def read(v: Any) -> dict[str, Any]:
        at = version if isinstance(version, int) else resolve(v, version)
        return reads.frame_at(v, frame_id, at)

    return FrameReply.of(ctx.backend.read(read))


def event(ctx: Context, ref: EventRef) -> EventReply:
    """An event's metadata (reference, id, kind, lifecycle, size, preview); NotFound."""
    return EventReply.of(ctx.backend.read(lambda v: event_dict(resolve_event(v, ref))))


def read_event(
    ctx: Context, ref: EventRef, offset: Count = 0, length: Length | None = None
) -> EventPage:
    """Characters ``[offset, offset+length)`` of an event's original text (R28).

    Retired events are readable too. *length* defaults to the rest, capped at
    1 MiB characters per call; offsets past the end give an empty chunk.
    """
    return EventPage.of(ctx.backend.read(lambda v: reads.read_event(v, ref, offset, length)))


def state(ctx: Context) -> StateReply:
    """Version, tick, every frame, event and relation, and the sessions."""
    return StateReply.of(ctx.backend.read(lambda v: reads.state(v, ctx.name)))


def history(ctx: Context, frame_id: FrameId) -> list[HistoryEntry]:
    """Every committed write of a frame (R29): op, revision, body, version, base.

    Reads the transaction log, not the current graph: the body shown is the
    one that transaction wrote. Lifecycle-only changes (retire, restore,
    protect, finalization at a tick) appear with ``op`` naming them.
    """
    entries = ctx.backend.read(lambda v: reads.history(v, frame_id))
    return [HistoryEntry.of(entry) for entry in entries]


class FrameRevision(Reply):
    """One committed write of a frame with who made it, when and why.

    ``version`` is the transaction that wrote it (``base_version`` the one it
    was based on), ``kind`` the transaction's (``model``, ``runtime``,
    ``governance``), ``who`` its writer (the client id of a model transaction,
    None if it had none; ``runtime`` for a finalization; the reviewer of a
    governance decision, ``human:…`` or ``policy:…``), ``time`` the commit time
    (seconds since the epoch) and ``tick`` the tick it committed at.
    ``revision`` and ``body`` are sent when that write set them.
    """

    version: int
    base_version: int
    kind: str
    who: str | None
    time: float | None
    tick: int | None
    reason: str | None
    op: str
    revision: int | None = None
    body: str | None = None


def _writer(record: dict[str, Any], frame_id: str) -> str | None:
    if record.get("kind") == "runtime":
        return "runtime"
    for decision in record.get("decisions") or ():
        if decision.get("frame") == frame_id:
            return str(decision.get("reviewer") or "") or None
    client = record.get("client_id")
    return None if client is None else str(client)


def frame_history(ctx: Context, frame_id: FrameId) -> list[FrameRevision]:
    """Every revision of a frame, oldest first: the transaction, who wrote it, when and why.

    :func:`history` with each write's writer, commit time and tick, from the
    same snapshot (what an inspector shows beside a frame). NotFound for an
    unknown frame.
    """

    def read(v: Any) -> list[FrameRevision]:
        out = []
        for entry in reads.history(v, frame_id):
            record = v.txlog(entry["version"]) or {}
            time, tick = record.get("time"), record.get("tick")
            out.append(
                FrameRevision.of(
                    {
                        **entry,
                        "who": _writer(record, frame_id),
                        "time": None if time is None else float(time),
                        "tick": tick,
                    }
                )
            )
        return out

    revisions: list[FrameRevision] = ctx.backend.read(read)
    return revisions


def snapshot(ctx: Context, frame_ids: FrameIds) -> SnapshotReply:
    """One consistent read: ``{"version", "tick", "frames": {id: summary | None}}``.

    A summary is ``{"revision", "lifecycle", "protected"}``; None means absent.
    An agent bases its next transaction on ``version``.
    """
    return SnapshotReply.of(ctx.backend.read(lambda v: reads.snapshot(v, list(frame_ids))))


def read_for_update(ctx: Context, frame_ids: FrameIds) -> UpdateReadReply:
    """:func:`snapshot` with each frame's body and last-written version, from one read:
    what a writer bases its next transaction on (:func:`service.reads.read_for_update`)."""
    return UpdateReadReply.of(ctx.backend.read(lambda v: reads.read_for_update(v, list(frame_ids))))


def meta(ctx: Context) -> MetaReply:
    """The context's counters: version, tick, window, next_seq, history_keep, created."""
    return MetaReply.of(ctx.backend.read(lambda v: v.meta()).to_record())


def txlog(ctx: Context, version: Count) -> dict[str, Any]:
    """The log record of the transaction committed at *version*; NotFound.

    A transaction submitted as text is logged with that text; one submitted as a
    model gets its printed text.
    """
    rec = ctx.backend.read(lambda v: v.txlog(version))
    if rec is None:
        raise NotFound(f"no transaction at version {version}")
    if rec.get("text") is None and rec.get("tx") is not None:
        from protocol.txlang import print_tx

        rec["text"] = print_tx(logged_tx(rec))
    return rec


def traces(
    ctx: Context, frame: FrameId | None = None, after: Count = 0, limit: TraceLimit = 1000
) -> list[dict[str, Any]]:
    """Model-call traces numbered above *after*; with *frame*, only the calls it took part in.

    Taking part is being present in the input, retrieved or cited (see
    :func:`protocol.usage.roles`); each such trace gets ``roles``.
    """
    return traces_of.traces(ctx, frame=frame, after=after, limit=limit)


def audit(
    ctx: Context, after: Count = 0, limit: AuditLimit = MAX_AUDIT_PAGE
) -> list[dict[str, Any]]:
    """Durable audit entries numbered above *after*, at most *limit* (1 to 1000).

    Denials, exports, imports and governance decisions, oldest first, each with
    its ``seq``; page on with ``after=<last seq>``. See
    :func:`service.governance.read_audit`.
    """
    from typing import cast

    from service.governance import AuditStore, read_audit

    return read_audit(cast(AuditStore, ctx.backend), after, limit)


def version(ctx: Context) -> int:
    """The current version: the number of committed transactions."""
    return int(ctx.backend.read(lambda v: v.meta()).version)


def tick(ctx: Context) -> int:
    """The current cognitive tick: the number of claimed input batches."""
    return int(ctx.backend.read(lambda v: v.meta()).tick)


def recall(
    ctx: Context,
    request: RecallRequest | dict[str, Any] | str,
    cursor: Cursor | None = None,
    view_version: Count | None = None,
) -> RecallPage:
    """One page of graph recall (R26, R27), read-only: the nodes, the edges completed on
    the page, the version read and the next page's cursor; see :func:`protocol.recall.recall`.
    ``recall_observation`` records a page for the model instead."""
    return read_recall(ctx.backend, request, cursor, view_version)


def frames_valid_at(
    ctx: Context, t: ValidTime, include_retired: Annotated[bool, Strict()] = False
) -> list[FrameReply]:
    """Frames whose valid time covers *t* (ISO date or epoch seconds), by id.

    Valid time is the envelope's ``[valid_from, valid_to)``, independent of the
    version a frame committed at (system time). Rejected frames never count;
    retired ones only with *include_retired*. RequestError ``bad_time`` for a
    moment that is neither.
    """
    try:
        when = valid_time(t)
    except ValueError as e:
        raise RequestError(str(e), code="bad_time") from e
    found = ctx.backend.read(lambda v: reads.frames_valid_at(v, when, include_retired))
    return [FrameReply.of(f) for f in found]


class Derivation(Reply):
    """A frame derived from a source: its id, revision and lifecycle."""

    id: str
    revision: int
    lifecycle: str


def derived_from(ctx: Context, source: EventRef) -> list[Derivation]:
    """The frames citing *source* (a frame id, an event reference ``@eN`` or an event id)
    among their sources, by id, retired ones too: what a change to it may invalidate.
    NotFound for an unknown source."""

    def read(v: Any) -> list[Derivation]:
        if v.frame(source) is not None:
            key = source
        else:
            try:
                key = resolve_event(v, source).id
            except NotFound:
                raise reads.no_frame(v, source) from None
        found = (v.frame(fid) for fid in v.cited_by(key))
        return [Derivation(id=f.id, revision=f.revision, lifecycle=f.lifecycle) for f in found if f]

    return ctx.backend.read(read)


class Reads:
    """The registered reads of this module, each declared beside its service function
    (:class:`~service.operations.Operations` derives from this class, so they are
    methods of every port like the operations declared there)."""

    frame = Operation(
        frame,
        permission="read",
        writes=False,
        example=Example("release"),
    )
    frame_at = Operation(
        frame_at,
        permission="read",
        writes=False,
        example=Example("test-result", 1),
    )
    event = Operation(
        event,
        permission="read",
        writes=False,
        example=Example("@e1"),
    )
    read_event = Operation(
        read_event,
        permission="read",
        writes=False,
        example=Example("@e1", 2, 9),
    )
    state = Operation(
        state,
        permission="read",
        writes=False,
        http=Route("GET", "/state"),
        example=Example(),
    )
    frames_valid_at = Operation(
        frames_valid_at,
        permission="read",
        writes=False,
        example=Example(0.0, include_retired=True),
    )
    history = Operation(
        history,
        permission="read",
        writes=False,
        example=Example("release"),
    )
    frame_history = Operation(
        frame_history,
        permission="read",
        writes=False,
        http=Route("GET", "/frames/{frame_id}/revisions", key="revisions"),
        mcp=Tool(),
        example=Example("test-result"),
    )
    snapshot = Operation(
        snapshot,
        permission="read",
        writes=False,
        example=Example(["release", "nope"]),
    )
    read_for_update = Operation(
        read_for_update,
        permission="read",
        writes=False,
        example=Example(["release"]),
    )
    meta = Operation(
        meta,
        permission="read",
        writes=False,
        example=Example(),
    )
    txlog = Operation(
        txlog,
        permission="read",
        writes=False,
        example=Example(1),
    )
    traces = Operation(
        traces,
        permission="read",
        writes=False,
        example=Example(after=0, limit=10),
    )
    audit = Operation(
        audit,
        permission="admin",
        writes=False,
        http=Route("GET", "/audit", key="entries"),
        example=Example(0, 10),
    )

    version = Operation(
        version,
        permission="read",
        writes=False,
        example=Example(),
    )
    tick = Operation(
        tick,
        permission="read",
        writes=False,
        example=Example(),
    )
    recall = Operation(
        recall,
        permission="recall",
        writes=False,
        example=Example({"frame_id": "release", "depth": 1}),
    )
    derived_from = Operation(
        derived_from,
        permission="read",
        writes=False,
        http=Route("GET", "/derived/{source}", key="frames"),
        mcp=Tool(),
        example=Example("@e1"),
    )
