"""One cognitive context over any store that offers ``read(fn)`` and ``transact(fn)``.

:class:`Context` is the embedded API of one agent memory (R1): record
observations, claim input batches, commit transactions (one at a time or
group-committed), and read frames, events, the state and a frame's write
history. It holds no state of its own beyond the store handle; every answer
comes from durable records.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, TypeVar, cast

from protocol.engine import (
    ClaimResult,
    claim,
    deliver,
    evaluate,
    observe,
    resolve_event,
    source_ref,
)
from protocol.errors import NotFound, OutOfRange, RequestError
from protocol.forms import to_plain
from protocol.governance import MAX_AUDIT_PAGE, AdmissionPolicy, Decision, Finding, ScanResult
from protocol.ids import MAX_CLIENT_ID
from protocol.recall import RecallPage, RecallRequest, as_recall_observation, read_recall
from protocol.receipts import Receipt
from protocol.state import REJECTED, RETIRED, RETIRING, Event, Frame, Meta
from protocol.tx import ContextTx
from protocol.usage import influence as usage_influence
from protocol.usage import roles, tx_citations, tx_writes
from protocol.view import BatchView, ReadView, WriteView

T = TypeVar("T")

MAX_WINDOW = 1_000_000
MAX_READ_CHARS = 1 << 20
"""Largest chunk one event read returns."""


class Backend(Protocol):
    """What a context needs of a store: snapshot reads and all-or-nothing writes."""

    def read(self, fn: Callable[[ReadView], T]) -> T:
        """Run *fn* against one consistent snapshot."""

    def transact(self, fn: Callable[[WriteView], T]) -> T:
        """Run *fn* in one write transaction; commit if it returns, discard if it raises."""

    def close(self) -> None:
        """Release the store."""


def new_event_id() -> str:
    """A fresh stable event id: ``ev:`` and 20 random hex digits."""
    return "ev:" + os.urandom(10).hex()


def print_body(body: tuple[Any, ...]) -> str:
    """A frame body as S-expression text, one form after another."""
    from protocol.txlang import print_form

    return " ".join(print_form(f) for f in body)


class Context:
    """One agent memory. Thread-compatible, not thread-safe: one writer at a time."""

    def __init__(
        self,
        backend: Backend,
        *,
        window: int | None = None,
        history_keep: int | None = None,
        name: str = "default",
        tenant: str | None = None,
        project: str | None = None,
    ):
        self.backend = backend
        self.name = name
        if window is not None and not 0 <= window <= MAX_WINDOW:
            raise OutOfRange(f"window must be between 0 and {MAX_WINDOW} ticks, not {window}")
        if history_keep is not None and not 1 <= history_keep <= 1 << 40:
            raise OutOfRange(f"history_keep must be at least 1, not {history_keep}")

        def init(w: WriteView) -> Meta:
            meta = w.meta()
            if meta.created == 0.0:
                meta = meta.copy()
                meta.created = time.time()
                if window is not None:
                    meta.window = window
                if history_keep is not None:
                    meta.history_keep = history_keep
                meta.tenant, meta.project = tenant, project
                from protocol.view import Changeset

                w.apply(Changeset(meta=meta))
            return meta

        meta = backend.read(lambda v: v.meta())
        if meta.created == 0.0 and not getattr(backend, "readonly", False):
            meta = backend.transact(init)
        self._meta = meta

    # -- counters -----------------------------------------------------------

    def meta(self) -> Meta:
        """The context's counters, read fresh from the store."""
        return self.backend.read(lambda v: v.meta())

    @property
    def version(self) -> int:
        """The current version: the number of committed transactions."""
        return self.meta().version

    @property
    def tick(self) -> int:
        """The current cognitive tick."""
        return self.meta().tick

    # -- writes -------------------------------------------------------------

    def observe(self, kind: str, text: str, *, session: str = "main", risky: bool = False) -> Event:
        """Record an observation; it is immutable and waits until claimed.

        *risky* flags it as unreviewed content: a frame derived from it enters
        as a candidate (R42).
        """
        if not risky:
            return self.observe_many([(kind, text, session)])[0]
        return self._observe_one(kind, text, session, {"risky": True})

    def observe_retrieval(
        self, text: str, frames: Sequence[str], *, session: str = "main"
    ) -> Event:
        """Record retrieved memory (e.g. search hits) as a ``recall_result`` observation.

        ``extra["recalled"]`` lists *frames*, the frames it names, for the usage
        traces of the calls that see it (R42).
        """
        return self._observe_one("recall_result", text, session, {"recalled": list(frames)})

    def _observe_one(self, kind: str, text: str, session: str, extra: dict[str, Any]) -> Event:
        now = time.time()
        eid = new_event_id()

        def run(w: WriteView) -> Event:
            e, cs = observe(
                w, kind=kind, text=text, session=session, now=now, event_id=eid, extra=extra
            )
            w.apply(cs)
            return e

        return self.backend.transact(run)

    def observe_many(
        self, items: Iterable[tuple[str, str, str] | tuple[str, str, str, float | None]]
    ) -> list[Event]:
        """Record many observations, in order, in one durable write.

        Each item is ``(kind, text, session)`` or ``(kind, text, session, time)``
        where *time* (seconds since the epoch) is when the input happened; it
        defaults to now.
        """
        batch = [(*item, None)[:4] for item in items]
        now = time.time()
        ids = [new_event_id() for _ in batch]

        def run(w: WriteView) -> list[Event]:
            out = []
            for (kind, text, session, at), eid in zip(batch, ids, strict=True):
                when = now if at is None else at
                e, cs = observe(w, kind=kind, text=text, session=session, now=when, event_id=eid)
                w.apply(cs)
                out.append(e)
            return out

        return self.backend.transact(run)

    def claim(self) -> ClaimResult:
        """Claim every waiting input as one batch; see :func:`protocol.engine.claim`."""
        now = time.time()

        def run(w: WriteView) -> ClaimResult:
            result, cs = claim(w, now=now)
            w.apply(cs)
            return result

        return self.backend.transact(run)

    def commit(self, tx: ContextTx | str, *, client_id: str | None = None) -> Receipt:
        """Validate and commit one transaction durably; return its receipt.

        *tx* is a model or S-expression text (a :class:`~protocol.errors.ParseError`
        is raised for bad text: that is not a transaction, so there is no receipt).
        """
        item, text = _prepare((tx, client_id))
        now = time.time()

        # One transaction per write: no batch view, the changeset (meta included)
        # goes straight to the store, as commit_many's batch of one would write it.
        def run(w: WriteView) -> Receipt:
            outcome = evaluate(w, item, now=now, text=text)
            if outcome.changes is not None:
                w.apply(outcome.changes)
            return outcome.receipt

        return self.backend.transact(run)

    def commit_many(
        self, txs: Sequence[ContextTx | str | tuple[ContextTx | str, str | None]]
    ) -> list[Receipt]:
        """Group commit: evaluate each transaction in order and write all in one durable write.

        Each is decided against the state the previous ones left; a rejected one
        writes nothing and does not affect the others.
        """
        prepared = [_prepare(item) for item in txs]
        now = time.time()

        def run(inner: WriteView) -> list[Receipt]:
            w = BatchView(inner)
            receipts = []
            for tx, text in prepared:
                outcome = evaluate(w, tx, now=now, text=text)
                if outcome.changes is not None:
                    w.apply(outcome.changes)
                receipts.append(outcome.receipt)
            w.flush()
            return receipts

        return self.backend.transact(run)

    def deliver(self, ref: str) -> dict[str, Any]:
        """Mark the user request *ref* delivered: it may now be retired (R19)."""

        def run(w: WriteView) -> Event:
            e, cs = deliver(w, ref)
            if cs is not None:
                w.apply(cs)
            return e

        e = self.backend.transact(run)
        return {"ref": e.ref, "id": e.id, "delivered": True}

    # -- reads --------------------------------------------------------------

    def frame(self, frame_id: str) -> dict[str, Any]:
        """The current frame as a JSON-ready dict; raises NotFound for an unknown id."""

        def run(v: ReadView) -> dict[str, Any]:
            f = v.frame(frame_id)
            if f is None:
                raise NotFound(f"no frame {frame_id!r}")
            return frame_dict(v, f)

        return self.backend.read(run)

    def frame_at(self, frame_id: str, version: int) -> dict[str, Any]:
        """The frame as it stood when *version* committed (R29 as-of read); NotFound if absent."""
        if version < 0:
            raise OutOfRange(f"version must be >= 0, not {version}")

        def run(v: ReadView) -> dict[str, Any]:
            current = v.meta().version
            if version > current:
                raise OutOfRange(f"version {version} is after the current version {current}")
            f = v.frame_at(frame_id, version)
            if f is None:
                raise NotFound(f"no frame {frame_id!r} at version {version}")
            out = frame_dict(v, f, relations=False)
            out["as_of"] = version
            return out

        return self.backend.read(run)

    def frame_record(self, frame_id: str) -> Frame:
        """The stored :class:`Frame`; raises NotFound for an unknown id."""
        f = self.backend.read(lambda v: v.frame(frame_id))
        if f is None:
            raise NotFound(f"no frame {frame_id!r}")
        return f

    def event(self, ref: str) -> dict[str, Any]:
        """An event's metadata (reference, id, kind, lifecycle, size, preview)."""
        return self.backend.read(lambda v: event_dict(resolve_event(v, ref)))

    def read_event(self, ref: str, offset: int = 0, length: int | None = None) -> dict[str, Any]:
        """Characters ``[offset, offset+length)`` of an event's original text (R28).

        Retired events are readable too. *length* defaults to the rest, capped at
        1 MiB characters per call; offsets past the end give an empty chunk.
        """
        if offset < 0:
            raise OutOfRange(f"offset must be >= 0, not {offset}")
        if length is not None and not 0 <= length <= MAX_READ_CHARS:
            raise OutOfRange(f"length must be between 0 and {MAX_READ_CHARS}, not {length}")

        def run(v: ReadView) -> dict[str, Any]:
            e = resolve_event(v, ref)
            n = min(MAX_READ_CHARS, max(0, e.size - offset)) if length is None else length
            text = v.event_chunk(e.seq, offset, n) or ""
            return {
                "ref": e.ref,
                "id": e.id,
                "offset": offset,
                "length": len(text),
                "size": e.size,
                "more": offset + len(text) < e.size,
                "text": text,
            }

        return self.backend.read(run)

    def state(self) -> dict[str, Any]:
        """Version, tick, every frame, event and relation, and the sessions."""

        def run(v: ReadView) -> dict[str, Any]:
            meta = v.meta()
            frames = []
            for f in v.iter_frames():
                item: dict[str, Any] = {
                    "id": f.id,
                    "revision": f.revision,
                    "lifecycle": f.lifecycle,
                }
                if f.protected:
                    item["protected"] = True
                if f.lifecycle == RETIRING:
                    item["due_tick"] = f.due_tick
                frames.append(item)
            events = []
            sessions: dict[str, dict[str, Any]] = {}
            for e in v.iter_events():
                events.append({"ref": e.ref, "kind": e.kind, "lifecycle": e.lifecycle})
                s = sessions.setdefault(
                    e.session, {"name": e.session, "events": 0, "pending_requests": []}
                )
                s["events"] += 1
                if e.causally_protected:
                    s["pending_requests"].append(e.ref)
            waiting = [f"@e{seq}" for seq in v.inbox()]
            return {
                "context": self.name,
                "version": meta.version,
                "tick": meta.tick,
                "window": meta.window,
                "frames": frames,
                "events": events,
                "relations": [list(r) for r in v.iter_relations()],
                "sessions": list(sessions.values()),
                "waiting": waiting,
            }

        return self.backend.read(run)

    def history(self, frame_id: str) -> list[dict[str, Any]]:
        """Every committed write of *frame_id* (R29): op, revision, body, version, base.

        Reads the transaction log, not the current graph: the body shown is the
        one that transaction wrote. Lifecycle-only changes (retire, restore,
        protect, finalization at a tick) appear with ``op`` naming them.
        """

        def run(v: ReadView) -> list[dict[str, Any]]:
            versions = v.frame_history(frame_id)
            if not versions and v.frame(frame_id) is None:
                raise NotFound(f"no frame {frame_id!r}")
            out: list[dict[str, Any]] = []
            for version in versions:
                rec = v.txlog(version)
                if rec is None:
                    continue
                base = {
                    "version": version,
                    "base_version": rec["base_version"],
                    "kind": rec["kind"],
                    "reason": rec.get("reason"),
                }
                mine = [w for w in rec.get("writes", []) if w["frame"] == frame_id]
                if not mine:
                    out.append({**base, "op": "lifecycle"})
                    continue
                ops = logged_tx(rec).ops if rec["kind"] == "model" else ()
                for w in mine:
                    item = {**base, "op": w["op"]}
                    if "revision" in w:
                        item["revision"] = w["revision"]
                    if "index" in w and w["index"] < len(ops):
                        item["body"] = print_body(ops[w["index"]].body)
                    out.append(item)
            return out

        return self.backend.read(run)

    def recall(
        self,
        request: RecallRequest | dict[str, Any] | str,
        cursor: str | None = None,
        view_version: int | None = None,
    ) -> RecallPage:
        """One page of graph recall (R26, R27); see :func:`protocol.recall.recall`."""
        return read_recall(self.backend, request, cursor, view_version)

    def recall_observation(
        self,
        request: RecallRequest | dict[str, Any] | str,
        cursor: str | None = None,
        view_version: int | None = None,
        *,
        session: str = "main",
    ) -> tuple[RecallPage, Event]:
        """Recall one page for the model and record it as a ``recall_result`` observation (R30).

        The result enters the context as tool output; no frame's lifecycle
        changes. Model-facing: without a ``trust`` filter the request gets
        candidate and accepted only, and naming rejected or quarantined is
        refused (``not_permitted``), see :func:`protocol.recall.for_model`; the
        cursor binds the request as run. The page is read and recorded in one
        write, and the event's ``extra["recalled"]`` lists the ids of the
        frames the page returned, in page order.
        """
        from protocol.recall import for_model, recall

        if not isinstance(request, RecallRequest):
            request = RecallRequest.parse(request)
        req = for_model(request)
        now = time.time()
        eid = new_event_id()

        def run(w: WriteView) -> tuple[RecallPage, Event]:
            page = recall(w, req, cursor, view_version)
            recalled = [
                str(n["id"])
                for n in page.nodes
                if n["type"] == "frame" and n["lifecycle"] != "missing"
            ]
            e, cs = observe(
                w,
                kind="recall_result",
                text=as_recall_observation(page, req),
                session=session,
                now=now,
                event_id=eid,
                extra={"recalled": recalled},
            )
            w.apply(cs)
            return page, e

        return self.backend.transact(run)

    def record_trace(self, trace: dict[str, Any]) -> None:
        """Append a model-call trace: which frames and observations were in its input (R39).

        *trace* is a JSON-like dict; by convention it holds ``session``,
        ``version``, ``tick``, ``frames_present``, ``events_present``, the
        ``action`` taken and the ``committed`` versions of its transactions.
        """
        record = {"time": time.time(), **trace}
        from protocol.view import Changeset

        self.backend.transact(lambda w: w.apply(Changeset(trace=record)))

    def traces(
        self, *, frame: str | None = None, after: int = 0, limit: int = 1000
    ) -> list[dict[str, Any]]:
        """Model-call traces numbered above *after*; with *frame*, only calls it took part in.

        Taking part is being present in the input, retrieved or cited (see
        :func:`protocol.usage.roles`); each such trace gets ``roles``.
        """
        if not 1 <= limit <= 100_000:
            raise OutOfRange(f"limit must be between 1 and 100000, not {limit}")
        rows = self.backend.read(lambda v: v.traces(after, limit))
        out = [{"call": n, **t} for n, t in rows]
        if frame is not None:
            out = [{**t, "roles": r} for t in out if (r := roles(t, frame))]
        return out

    def influence(self, *, version: int | None = None, call: int | None = None) -> dict[str, Any]:
        """Which memories influenced a decision (R42): the one committed at *version*,
        or everything traced call *call* decided and did.

        From the usage trace (:func:`protocol.usage.influence`), with
        ``"traced": True``. A version no traced call committed (a transaction
        from the CLI or an API user, a runtime or governance record) answers
        from the log alone: what it cited, with ``"traced": False``.
        """
        if (version is None) == (call is None):
            raise RequestError("name exactly one of a version or a call", code="bad_argument")
        if call is not None:
            if call < 1:
                raise OutOfRange(f"calls are numbered from 1, not {call}")
            rows = self.traces(after=call - 1, limit=1)
            if not rows or rows[0]["call"] != call:
                raise NotFound(f"no traced call {call}")
            return {**usage_influence(rows[0]), "traced": True}
        assert version is not None
        if not 1 <= version <= self.version:
            raise OutOfRange(f"version must be between 1 and {self.version}, not {version}")
        after = 0
        while rows := self.traces(after=after, limit=1000):
            for t in rows:
                if any(d.get("version") == version for d in t.get("decisions") or ()):
                    return {**usage_influence(t, version), "traced": True}
            after = rows[-1]["call"]
        record = self.txlog(version)
        kind = str(record.get("kind", "model"))
        tx = logged_tx(record) if kind == "model" else None
        decision = {
            "version": version,
            "kind": kind,
            "writes": tx_writes(tx) if tx is not None else [],
            "cited": tx_citations(tx) if tx is not None else [],
        }
        return {**usage_influence({"decisions": [decision]}, version), "traced": False}

    # -- governance (R41-R43) -------------------------------------------------

    def _governance_audit(self, method: str) -> dict[str, Any]:
        """The audit template of an embedded governance call: holder ``embedded``."""
        from protocol.governance import EMBEDDED, audit_template

        return audit_template(method, holder=EMBEDDED, context=self.name, tenant=self._meta.tenant)

    def admit(
        self, frame_id: str | None = None, policy: AdmissionPolicy | None = None
    ) -> list[Decision]:
        """Run admission over the candidates (or just *frame_id*); see :mod:`protocol.governance`.

        Accepted and rejected ones change in one recorded runtime transaction
        (``reviewed_by`` ``policy:<name>``) written with its audit entry (holder
        ``embedded``, method ``admit``); held ones stay candidates until
        :meth:`review`, and a pass of holds only writes nothing. Returns every
        decision, oldest candidate first. NotFound for an unknown *frame_id*,
        RequestError ``not_candidate`` for one that is not a candidate; nothing
        changes then. See :func:`protocol.governance.run_admission`.
        """
        from protocol.governance import run_admission

        decisions, _ = run_admission(
            self.backend, policy=policy, frame_id=frame_id, audit=self._governance_audit("admit")
        )
        return decisions

    def review(
        self, frame_id: str, decision: str, reviewer: str, *, reason: str | None = None
    ) -> Decision:
        """A human decision (``accept`` or ``reject``) on a candidate or quarantined frame.

        Recorded as a runtime transaction with ``reviewed_by`` ``human:<reviewer>``
        (*reason* joins the review reasons) and its audit entry (holder
        ``embedded``, method ``review``) in one write. Typed errors change
        nothing: RequestError ``bad_decision``, ``bad_reviewer`` (1 to 128
        printable characters), ``bad_argument`` (reason over 512 characters),
        NotFound for an unknown frame, ``not_reviewable`` for a frame that is
        neither a candidate nor quarantined, or is retired. See
        :func:`protocol.governance.run_review`.
        """
        from protocol.governance import run_review

        d, _ = run_review(
            self.backend,
            frame_id,
            decision,
            reviewer,
            reason=reason,
            audit=self._governance_audit("review"),
        )
        return d

    def pending(self, policy: AdmissionPolicy | None = None) -> dict[str, Any]:
        """What awaits a human or admission, read-only: ``{"version", "items"}``.

        One snapshot; see :func:`protocol.governance.pending` (a dry run of
        *policy*, default ``DefaultPolicy``). Writes nothing, audits nothing.
        """
        from protocol.governance import pending

        return self.backend.read(
            lambda v: {"version": v.meta().version, "items": pending(v, policy)}
        )

    def audit(self, after: int = 0, limit: int = MAX_AUDIT_PAGE) -> list[dict[str, Any]]:
        """Durable audit entries numbered above *after*, at most *limit* (1 to 1000).

        Denials, exports, imports and governance decisions, oldest first, each
        with its ``seq``; page on with ``after=<last seq>``. OutOfRange or
        ``bad_argument`` for a bad page. See :func:`protocol.governance.read_audit`.
        """
        from protocol.governance import AuditStore, read_audit

        return read_audit(cast(AuditStore, self.backend), after, limit)

    def find_low_quality(
        self, *, unused_ticks: int | None = None, failed_uses: int = 3
    ) -> list[Finding]:
        """:func:`protocol.governance.find_low_quality` over this context and all its traces.

        One snapshot; writes nothing. OutOfRange for *unused_ticks* below 1 or
        *failed_uses* outside 1 to 1000.
        """
        from protocol.governance import all_traces, check_scan, find_low_quality

        check_scan(unused_ticks, failed_uses)
        return self.backend.read(
            lambda v: find_low_quality(
                v,
                now_tick=v.meta().tick,
                unused_ticks=unused_ticks,
                usage=all_traces(v),
                failed_uses=failed_uses,
            )
        )

    def quarantine(self, findings: Iterable[Finding | str]) -> list[str]:
        """Move accepted frames to trust ``quarantined`` (R43): out of every input until reviewed.

        One recorded runtime transaction with its audit entry (holder
        ``embedded``, method ``quarantine``); frames not accepted, retired or
        unknown are skipped (nothing is written when none is left). A frame a
        human accepted is quarantined too: this is how a human decision is
        reopened. Returns the ids quarantined. See
        :func:`protocol.governance.run_quarantine`.
        """
        from protocol.governance import run_quarantine

        ids, _ = run_quarantine(self.backend, findings, audit=self._governance_audit("quarantine"))
        return ids

    def quarantine_scan(
        self, *, unused_ticks: int | None = None, failed_uses: int = 3
    ) -> ScanResult:
        """Find low-quality frames and quarantine them in one audited write (R43).

        Like the actor's ``quarantine_scan`` and ``morphz review scan``: frames a
        human accepted are reported under ``spared``, not quarantined. See
        :func:`protocol.governance.run_quarantine_scan`.
        """
        from protocol.governance import run_quarantine_scan

        return run_quarantine_scan(
            self.backend,
            unused_ticks=unused_ticks,
            failed_uses=failed_uses,
            audit=self._governance_audit("quarantine_scan"),
        )

    def frames_valid_at(
        self, t: float | str, *, include_retired: bool = False
    ) -> list[dict[str, Any]]:
        """Frames whose valid time covers *t* (ISO date or epoch seconds), by id.

        Valid time is the envelope's ``[valid_from, valid_to)``, independent of
        the version a frame committed at (system time). Rejected frames never
        count; retired ones only with *include_retired*.
        """
        from protocol.tx import valid_time

        try:
            when = valid_time(t)
        except ValueError as e:
            raise RequestError(str(e), code="bad_time") from e

        def run(v: ReadView) -> list[dict[str, Any]]:
            out = [
                frame_dict(v, f, relations=False)
                for f in v.iter_frames()
                if f.valid_at(when)
                and f.trust != REJECTED
                and (include_retired or f.lifecycle != RETIRED)
            ]
            return sorted(out, key=lambda d: str(d["id"]))

        return self.backend.read(run)

    def fork(self, target: Backend, *, at_version: int | None = None) -> Context:
        """A new context in *target* (an empty store) holding this one as of *at_version*.

        See :func:`service.fork.fork_into`; the fork records where it came from.
        """
        from service.fork import fork_into

        fork_into(self.backend, target, at_version=at_version, origin=self.name)
        return Context(target, name=self.name + "-fork")

    def txlog(self, version: int) -> dict[str, Any]:
        """The log record of the transaction committed at *version*."""
        rec = self.backend.read(lambda v: v.txlog(version))
        if rec is None:
            raise NotFound(f"no transaction at version {version}")
        if rec.get("text") is None and rec.get("tx") is not None:
            from protocol.txlang import print_tx

            rec["text"] = print_tx(logged_tx(rec))
        return rec

    def close(self) -> None:
        """Close the underlying store."""
        self.backend.close()

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _prepare(
    item: ContextTx | str | tuple[ContextTx | str, str | None],
) -> tuple[ContextTx, str | None]:
    client_id: str | None = None
    if isinstance(item, tuple):
        item, client_id = item
    text: str | None = None
    if isinstance(item, str):
        from protocol.txlang import parse_tx

        text = item
        item = parse_tx(item)
    if client_id is not None and client_id != item.client_id:
        if not 1 <= len(client_id) <= MAX_CLIENT_ID:
            raise RequestError(
                f"a client id is 1 to {MAX_CLIENT_ID} characters", code="bad_client_id"
            )
        item = item.model_copy(update={"client_id": client_id})
    return item, text


def logged_tx(record: dict[str, Any]) -> ContextTx:
    """The transaction a model-kind log record holds, from its text or its dict form."""
    if record.get("text") is not None:
        from protocol.txlang import parse_tx

        return parse_tx(record["text"])
    from protocol.wire import tx_from_dict

    return tx_from_dict(record["tx"])


def frame_dict(v: ReadView, f: Frame, *, relations: bool = True) -> dict[str, Any]:
    """A frame as the CLI and the API show it."""
    out: dict[str, Any] = {
        "id": f.id,
        "revision": f.revision,
        "body": print_body(f.body),
        "body_forms": [to_plain(x) for x in f.body],
        "sources": [source_ref(v, s) for s in f.sources],
        "lifecycle": f.lifecycle,
        "protected": f.protected,
        "created_version": f.created_version,
        "updated_version": f.updated_version,
        "tokens": f.tokens,
    }
    if f.lifecycle == RETIRING:
        out["due_tick"] = f.due_tick
        out["marked_tick"] = f.marked_tick
        out["retire_reason"] = f.retire_reason
    if f.retired_version is not None:
        out["retired_version"] = f.retired_version
    env = f.envelope
    out["envelope"] = {
        **{k: env.get(k) for k in ("kind", "tenant", "project", "risk", "trust", "reviewed_by")},
        "keys": list(env.get("keys") or ()),
        "valid_from": env.get("valid_from"),
        "valid_to": env.get("valid_to"),
        "session": env.get("session"),
        "review_reasons": list(env.get("review_reasons") or ()),
    }
    if relations:
        out["relations_out"] = [[f.id, lab, o] for lab, o in v.relations_from(f.id)]
        out["relations_in"] = [[s, lab, f.id] for s, lab in v.relations_to(f.id)]
    return out


def event_dict(e: Event) -> dict[str, Any]:
    """An event's metadata as the CLI and the API show it."""
    out: dict[str, Any] = {
        "ref": e.ref,
        "id": e.id,
        "kind": e.kind,
        "session": e.session,
        "time": e.time,
        "size": e.size,
        "tokens": e.tokens,
        "lifecycle": e.lifecycle,
        "claimed_tick": e.claimed_tick,
        "preview": e.preview,
    }
    if e.kind == "user_message":
        out["delivered"] = bool(e.delivered)
    return out
