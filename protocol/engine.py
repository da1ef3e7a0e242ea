"""The commit rules of a context, as pure functions from a read view to a changeset.

Every function here reads a :class:`~protocol.view.ReadView`, decides, and
returns a :class:`~protocol.view.Changeset` describing the writes; nothing is
mutated until a store applies the changeset. A rejected transaction therefore
writes nothing at all (R8): validation happens entirely on an overlay.

* :func:`evaluate` — a context transaction: exactly-once check (R25), base
  version and footprint check (R21–R24), operations in order (R7), the
  successor rule (R17), lifecycle effects and capacity relief (R9, R31).
* :func:`claim` — claim the waiting inputs as one batch, advance the tick once
  if the batch holds an external fact (R20), and finalize due retirements as
  a recorded runtime transaction (R12, R16).
* :func:`observe` and :func:`deliver` — record an observation; mark a user
  request delivered, which lifts its causal protection (R19).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from protocol.errors import OutOfRange, RequestError
from protocol.ids import SUPERSEDES, event_ref, is_event_ref, ref_seq
from protocol.receipts import Conflict, OpError, Receipt, Relief, committed_receipt
from protocol.state import (
    ACCEPTED,
    ACTIVE,
    CANDIDATE,
    EVENT_KINDS,
    RETIRED,
    RETIRING,
    TICK_KINDS,
    Event,
    Frame,
    Meta,
    estimate_tokens,
    preview_of,
)
from protocol.tx import (
    ContextTx,
    Derive,
    Envelope,
    Protect,
    Relate,
    Restore,
    Retire,
    Revise,
    Unprotect,
    Unrelate,
    edge_key,
    key_display,
)
from protocol.view import Changeset, ReadView
from protocol.wire import tx_to_dict

MAX_EVENT_CHARS = 64 << 20
"""Largest observation accepted, in characters."""
MAX_SESSION = 128


@dataclass(slots=True)
class Outcome:
    """A receipt and, when the transaction commits, the changeset to write."""

    receipt: Receipt
    changes: Changeset | None


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


class _OpFailure(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class _Overlay:
    """Copy-on-write view of frames, events and edges during one evaluation."""

    def __init__(self, view: ReadView) -> None:
        self.view = view
        self.frames: dict[str, Frame | None] = {}
        self.initial_frames: dict[str, Frame | None] = {}
        self.events: dict[int, Event] = {}
        self.initial_events: dict[int, Event] = {}
        self.rel_add: set[tuple[str, str, str]] = set()
        self.rel_del: set[tuple[str, str, str]] = set()

    def frame(self, frame_id: str) -> Frame | None:
        if frame_id in self.frames:
            return self.frames[frame_id]
        f = self.view.frame(frame_id)
        self.frames[frame_id] = f
        self.initial_frames[frame_id] = f
        return f

    def writable_frame(self, frame_id: str) -> Frame:
        f = self.frame(frame_id)
        assert f is not None
        initial = self.initial_frames.get(frame_id)
        if f is initial:
            f = f.copy()
            self.frames[frame_id] = f
        return f

    def put_new_frame(self, f: Frame) -> None:
        self.frame(f.id)
        self.frames[f.id] = f

    def event(self, seq: int) -> Event | None:
        if seq in self.events:
            return self.events[seq]
        e = self.view.event(seq)
        if e is not None:
            self.initial_events[seq] = e
            self.events[seq] = e
        return e

    def writable_event(self, seq: int) -> Event:
        e = self.event(seq)
        assert e is not None
        if e is self.initial_events[seq]:
            e = e.copy()
            self.events[seq] = e
        return e

    def has_relation(self, s: str, label: str, o: str) -> bool:
        t = (s, label, o)
        if t in self.rel_add:
            return True
        if t in self.rel_del:
            return False
        return self.view.has_relation(s, label, o)

    def successors(self, obj: str) -> list[str]:
        subs = {s for s, lab in self.view.relations_to(obj) if lab == SUPERSEDES}
        subs |= {s for (s, lab, o) in self.rel_add if lab == SUPERSEDES and o == obj}
        subs -= {s for (s, lab, o) in self.rel_del if lab == SUPERSEDES and o == obj}
        return sorted(subs)


class _Decision:
    """One transaction being decided: its overlay and what its operations did so far."""

    __slots__ = (
        "ov",
        "meta",
        "tx",
        "version",
        "marked",
        "sourced",
        "supersede_objects",
        "restored_subjects",
        "edges_changed",
        "writes",
    )

    def __init__(self, ov: _Overlay, meta: Meta, tx: ContextTx, version: int) -> None:
        self.ov = ov
        self.meta = meta
        self.tx = tx
        self.version = version
        """The version the transaction commits at if it commits."""
        self.marked: set[str] = set()
        """Frames named by a retire (candidates of the successor rule)."""
        self.sourced: set[str] = set()
        """Frames cited as sources by a derive or revise."""
        self.supersede_objects: set[str] = set()
        self.restored_subjects: set[str] = set()
        self.edges_changed: set[tuple[str, str, str]] = set()
        self.writes: list[dict[str, Any]] = []
        """The log's ``writes``: which frame each derive, revise or envelope wrote."""


def tx_digest(tx: ContextTx) -> bytes:
    """A digest of a transaction's content, to tell a retry from a reused client id."""
    return hashlib.blake2b(repr(tx.model_dump()).encode(), digest_size=16).digest()


def _reject(
    meta: Meta,
    tx: ContextTx,
    *,
    errors: tuple[OpError, ...] = (),
    conflicts: tuple[Conflict, ...] = (),
) -> Outcome:
    return Outcome(
        Receipt(
            status="rejected",
            version=meta.version,
            base_version=tx.base_version,
            rebased=tx.base_version < meta.version,
            client_id=tx.client_id,
            tick=meta.tick,
            errors=errors,
            conflicts=conflicts,
        ),
        None,
    )


def evaluate(view: ReadView, tx: ContextTx, *, now: float, text: str | None = None) -> Outcome:
    """Decide one transaction against *view*; on commit, return what to write.

    *text* is the transaction's S-expression as submitted, kept in the log;
    when None the canonical printing is logged.
    """
    meta = view.meta()
    base = tx.base_version
    digest = b""
    if tx.client_id is not None:
        digest = tx_digest(tx)
        known = view.client(tx.client_id)
        if known is not None:
            version, old_digest = known
            if old_digest == digest:
                record = view.txlog(version)
                assert record is not None, "client index points at a missing log record"
                original = Receipt.from_dict(record["receipt"])
                return Outcome(original.model_copy(update={"duplicate": True}), None)
            return _reject(
                meta,
                tx,
                errors=(
                    OpError(
                        op=None,
                        code="client_id_reused",
                        message=f"client id {tx.client_id!r} was used by the transaction "
                        f"committed at version {version} with different content",
                    ),
                ),
            )
    if base > meta.version:
        return _reject(
            meta,
            tx,
            errors=(
                OpError(
                    op=None,
                    code="future_base",
                    message=f"base version {base} is newer than the context "
                    f"(version {meta.version})",
                ),
            ),
        )
    rebased = base < meta.version
    if rebased:
        if meta.version - base > meta.history_keep:
            return _reject(
                meta,
                tx,
                errors=(
                    OpError(
                        op=None,
                        code="too_old",
                        message=f"base version {base} is more than {meta.history_keep} versions "
                        f"behind {meta.version}; re-read the context and rebuild the transaction",
                    ),
                ),
            )
        found = _conflicts(view, tx, base)
        if found:
            shown = ", ".join(f"{c.id} (v{c.version})" for c in found)
            return _reject(
                meta,
                tx,
                errors=(
                    OpError(
                        op=None,
                        code="conflict",
                        message=f"changed after base version {base}: {shown}",
                    ),
                ),
                conflicts=found,
            )

    d = _Decision(_Overlay(view), meta, tx, meta.version + 1)
    for index, op in enumerate(tx.ops):
        try:
            _HANDLERS.get(type(op), _apply)(d, op, index)
        except _OpFailure as failure:
            return _reject(
                meta,
                tx,
                errors=(
                    OpError(op=index, code=failure.code, message=f"{op.op}: {failure.message}"),
                ),
            )

    candidates = d.marked | d.sourced | d.supersede_objects
    for s in d.restored_subjects:
        for label, o in view.relations_from(s):
            if label == SUPERSEDES:
                candidates.add(o)
    _successor_rule(d.ov, candidates, d.version)

    return _commit(d, rebased, digest, now, text)


def _conflicts(view: ReadView, tx: ContextTx, base: int) -> tuple[Conflict, ...]:
    reads, writes = tx.footprint()
    # An event's content never changes; only its lifecycle does. Citing an event as
    # a source therefore cannot conflict: only retire/restore of the same event can.
    keys = writes | {k for k in reads if not k.startswith("e:")}
    found = []
    for key in sorted(keys):
        changed_at = view.lastmod(key)
        if changed_at > base:
            found.append(Conflict(id=key_display(key), version=changed_at))
    return tuple(found)


def _resolve_sources(ov: _Overlay, refs: tuple[str, ...], self_id: str) -> dict[str, Event | Frame]:
    """The sources named by *refs*, by stable id in first-mention order, with their records.

    The records are what the governance check reads (:func:`_unreviewed_session`),
    so an event source costs no second lookup by its stable id.
    """
    out: dict[str, Event | Frame] = {}
    for ref in refs:
        record: Event | Frame | None
        seq = _event_seq(ref)
        if seq is not None:
            record = ov.event(seq)
            if record is None:
                raise _OpFailure("unknown_ref", f"no event {ref}")
            stable = record.id
        else:
            if ref == self_id:
                raise _OpFailure("self_source", f"{ref} cannot list itself as a source")
            record = ov.frame(ref)
            if record is None:
                raise _OpFailure("unknown_ref", f"no frame {ref}")
            stable = ref
        if stable not in out:
            out[stable] = record
    return out


UNREVIEWED_EVENT_KINDS = frozenset({"recall_result"})
"""Observation kinds whose content is unreviewed: a frame derived from one is a candidate."""
MODEL_TRUST = frozenset({CANDIDATE})
"""The only trust status a model transaction may set (R42): the rest is the runtime's."""


def _unreviewed_session(sources: Iterable[Event | Frame]) -> tuple[bool, str | None]:
    """Whether any source is unreviewed (R42), and the session it came from.

    *sources* are the source records as :func:`_resolve_sources` found them.
    Unreviewed: a frame that is not ``accepted`` (a candidate, or quarantined or
    rejected), a ``recall_result`` observation, or one recorded with
    ``extra["risky"]`` set. The session is that of the first event source, or
    else of the first unreviewed frame source.
    """
    unreviewed = False
    event_session: str | None = None
    frame_session: str | None = None
    for src in sources:
        if isinstance(src, Event):
            if event_session is None:
                event_session = src.session
            if src.kind in UNREVIEWED_EVENT_KINDS or src.extra.get("risky"):
                unreviewed = True
        elif src.trust != ACCEPTED:
            unreviewed = True
            if frame_session is None:
                frame_session = src.envelope.get("session")
    return unreviewed, event_session or frame_session


def _set_envelope(f: Frame, op: Envelope) -> None:
    current = f.trust
    if op.reviewed_by is not None:
        raise _OpFailure("not_permitted", "reviewed-by is set by the runtime, not by a model")
    if op.trust is not None and op.trust != current:
        if op.trust not in MODEL_TRUST or current != ACCEPTED:
            raise _OpFailure(
                "not_permitted",
                f"trust {op.trust} of {f.id} (now {current}) is decided by admission or a "
                "reviewer; a model may only mark an accepted frame as a candidate",
            )
    env = dict(f.envelope)
    for key in ("kind", "tenant", "project", "valid_from", "valid_to", "risk", "trust"):
        value = getattr(op, key)
        if value is not None:
            env[key] = value
    if op.keys is not None:
        env["keys"] = list(op.keys)
    lo, hi = env.get("valid_from"), env.get("valid_to")
    if lo is not None and hi is not None and hi < lo:
        raise _OpFailure("bad_validity", f"valid-to of {f.id} would be before its valid-from")
    f.envelope = env


def _cancel(f: Frame) -> None:
    f.lifecycle = ACTIVE
    f.due_tick = None
    f.marked_tick = None
    f.retire_reason = None


def _event_seq(ref: str) -> int | None:
    """The sequence number of the event reference *ref* (``@e42`` → 42); None for a frame id."""
    if ref[:2] != "@e":
        return None
    try:
        return ref_seq(ref)
    except ValueError:
        return None


# One function per operation: evaluate() looks the function up by the operation's
# exact class (_HANDLERS); _apply is the isinstance dispatch for anything else.


def _derive(d: _Decision, op: Derive, index: int) -> None:
    ov = d.ov
    if ov.frame(op.id) is not None:
        raise _OpFailure("frame_exists", f"frame {op.id} already exists")
    resolved = _resolve_sources(ov, op.sources, op.id)
    sources = tuple(resolved)
    version, meta = d.version, d.meta
    f = Frame(
        id=op.id,
        revision=1,
        body=op.body,
        sources=sources,
        created_version=version,
        updated_version=version,
    )
    # The runtime fills what it owns (R41): scope from the context, the tick,
    # the session the content came from, and candidacy for unreviewed sources (R42).
    unreviewed, session = _unreviewed_session(resolved.values())
    env = f.envelope
    env["tenant"], env["project"] = meta.tenant, meta.project
    env["created_tick"] = meta.tick
    env["session"] = session
    if unreviewed:
        env["trust"] = CANDIDATE
    ov.put_new_frame(f)
    sourced = d.sourced
    for src in sources:
        if not src.startswith("ev:"):
            sourced.add(src)
    d.writes.append({"frame": op.id, "op": "derive", "revision": 1, "index": index})


def _revise(d: _Decision, op: Revise, index: int) -> None:
    ov = d.ov
    current = ov.frame(op.id)
    if current is None:
        raise _OpFailure("unknown_ref", f"no frame {op.id}")
    if current.lifecycle == RETIRED:
        raise _OpFailure("retired_frame", f"frame {op.id} is retired; restore it first")
    added = _resolve_sources(ov, op.sources, op.id)
    f = ov.writable_frame(op.id)
    f.revision += 1
    f.body = op.body
    new = [s for s in added if s not in f.sources]
    f.sources = f.sources + tuple(new)
    unreviewed, session = _unreviewed_session(added[s] for s in new)
    if unreviewed and f.trust == ACCEPTED:
        f.envelope["trust"] = CANDIDATE
        if f.envelope.get("session") is None:
            f.envelope["session"] = session
    if f.lifecycle == RETIRING:
        _cancel(f)
    sourced = d.sourced
    for src in f.sources:
        if not src.startswith("ev:"):
            sourced.add(src)
    d.writes.append({"frame": op.id, "op": "revise", "revision": f.revision, "index": index})


def _relate(d: _Decision, op: Relate, index: int) -> None:  # Unrelate too
    ov = d.ov
    t = (op.subject, op.label, op.object)
    for end in (t[0], t[2]):
        if ov.frame(end) is None:
            raise _OpFailure("unknown_ref", f"no frame {end}")
    if isinstance(op, Unrelate):
        if not ov.has_relation(*t):
            raise _OpFailure("unknown_relation", f"no relation {op.subject} {op.label} {op.object}")
        ov.rel_add.discard(t)
        ov.rel_del.add(t)
        d.edges_changed.add(t)
    else:
        if not ov.has_relation(*t):  # relating an existing edge changes nothing
            ov.rel_del.discard(t)
            ov.rel_add.add(t)
            d.edges_changed.add(t)
        if t[1] == SUPERSEDES:
            d.supersede_objects.add(t[2])


def _retire(d: _Decision, op: Retire, index: int) -> None:
    ov = d.ov
    for ref in op.refs:
        seq = _event_seq(ref)
        if seq is not None:
            e = ov.event(seq)
            if e is None:
                raise _OpFailure("unknown_ref", f"no event {ref}")
            if e.causally_protected:
                raise _OpFailure(
                    "causally_protected",
                    f"{ref} is a user request not yet delivered; deliver it first",
                )
            if e.lifecycle != RETIRED:
                w = ov.writable_event(e.seq)
                w.lifecycle = RETIRED
                w.retired_version = d.version
            continue
        f0 = ov.frame(ref)
        if f0 is None:
            raise _OpFailure("unknown_ref", f"no frame {ref}")
        if f0.protected:
            raise _OpFailure("protected", f"frame {ref} is protected; unprotect it first")
        d.marked.add(ref)
        if f0.lifecycle == ACTIVE:
            meta = d.meta
            f = ov.writable_frame(ref)
            f.lifecycle = RETIRING
            f.retire_gen += 1
            f.marked_tick = meta.tick
            f.due_tick = meta.tick + meta.window
            f.retire_reason = d.tx.reason


def _restore(d: _Decision, op: Restore, index: int) -> None:
    ov = d.ov
    seq = _event_seq(op.ref)
    if seq is not None:
        e = ov.event(seq)
        if e is None:
            raise _OpFailure("unknown_ref", f"no event {op.ref}")
        if e.lifecycle == RETIRED:
            w = ov.writable_event(e.seq)
            w.lifecycle = ACTIVE
            w.retired_version = None
        return
    f0 = ov.frame(op.ref)
    if f0 is None:
        raise _OpFailure("unknown_ref", f"no frame {op.ref}")
    if f0.lifecycle != ACTIVE:
        f = ov.writable_frame(op.ref)
        _cancel(f)
        f.retired_version = None
        d.restored_subjects.add(op.ref)


def _protect(d: _Decision, op: Protect, index: int) -> None:
    ov = d.ov
    f0 = ov.frame(op.id)
    if f0 is None:
        raise _OpFailure("unknown_ref", f"no frame {op.id}")
    if f0.lifecycle == RETIRED:
        raise _OpFailure("retired_frame", f"frame {op.id} is retired; restore it first")
    if not f0.protected or f0.lifecycle == RETIRING:
        f = ov.writable_frame(op.id)
        _cancel(f)
        f.protected = True


def _unprotect(d: _Decision, op: Unprotect, index: int) -> None:
    ov = d.ov
    f0 = ov.frame(op.id)
    if f0 is None:
        raise _OpFailure("unknown_ref", f"no frame {op.id}")
    if f0.protected:
        ov.writable_frame(op.id).protected = False


def _envelope(d: _Decision, op: Envelope, index: int) -> None:
    ov = d.ov
    if ov.frame(op.id) is None:
        raise _OpFailure("unknown_ref", f"no frame {op.id}")
    f = ov.writable_frame(op.id)
    _set_envelope(f, op)
    # No "index": the history shows no body for an envelope change.
    d.writes.append({"frame": op.id, "op": "envelope", "revision": f.revision})


_HANDLERS: dict[type, Callable[[_Decision, Any, int], None]] = {
    Derive: _derive,
    Revise: _revise,
    Relate: _relate,
    Unrelate: _relate,
    Retire: _retire,
    Restore: _restore,
    Protect: _protect,
    Unprotect: _unprotect,
    Envelope: _envelope,
}


def _apply(d: _Decision, op: Any, index: int) -> None:
    """Apply *op*, an instance of a subclass of an operation class, to the decision."""
    if isinstance(op, Derive):
        _derive(d, op, index)
    elif isinstance(op, Revise):
        _revise(d, op, index)
    elif isinstance(op, Relate):
        _relate(d, op, index)
    elif isinstance(op, Retire):
        _retire(d, op, index)
    elif isinstance(op, Restore):
        _restore(d, op, index)
    elif isinstance(op, Protect):
        _protect(d, op, index)
    elif isinstance(op, Unprotect):
        _unprotect(d, op, index)
    elif isinstance(op, Envelope):
        _envelope(d, op, index)
    else:  # pragma: no cover - the op union is closed
        raise _OpFailure("unknown_op", f"unknown operation {op!r}")


def _successor_rule(ov: _Overlay, candidates: set[str], version: int) -> None:
    """R17: retire now every marked frame that a non-retired successor supersedes and cites.

    Successors are judged by their lifecycle after the operations and before this
    rule runs, so the outcome does not depend on the order candidates are visited.
    """
    to_retire: list[str] = []
    # Nothing changes until the loop ends, so every frame read in it is as the
    # operations left it.
    for fid in sorted(candidates) if len(candidates) > 1 else candidates:
        f = ov.frame(fid)
        if f is None or f.lifecycle != RETIRING:
            continue
        for s in ov.successors(fid):
            succ = ov.frame(s)
            if succ is not None and succ.lifecycle != RETIRED and fid in succ.sources:
                to_retire.append(fid)
                break
    for fid in to_retire:
        f = ov.writable_frame(fid)
        f.lifecycle = RETIRED
        f.due_tick = None
        f.retired_version = version


def _commit(d: _Decision, rebased: bool, digest: bytes, now: float, text: str | None) -> Outcome:
    ov, tx, meta, version = d.ov, d.tx, d.meta, d.version
    frames_out: list[Frame] = []
    history: list[tuple[str, int]] = []
    due_add: list[tuple[int, str, int, int]] = []
    due_del: list[tuple[int, str]] = []
    changed: list[str] = []  # footprint keys of what changed (lastmod) ...
    shown: list[str] = []  # ... and the same as the log shows them (key_display)
    frame_ids: list[str] = []
    retired_now: list[str] = []
    retiring: list[tuple[str, int]] = []
    cancelled: list[str] = []
    restored: list[str] = []
    now_events: list[str] = []
    now_frames: list[str] = []
    pending_frames: list[str] = []
    now_tokens = 0
    pending_tokens = 0
    targets: set[str] | None = None

    frames = ov.frames
    initials = ov.initial_frames
    for fid in sorted(frames) if len(frames) > 1 else frames:
        f = frames[fid]
        initial = initials.get(fid)
        if f is None or f is initial:
            if f is not None and f.lifecycle == RETIRING:
                if targets is None:
                    targets = _retire_targets(tx)
                if fid in targets:
                    retiring.append((fid, f.due_tick or 0))
            continue
        f.updated_version = version
        frames_out.append(f)
        frame_ids.append(f.id)
        history.append((fid, version))
        changed.append("f:" + fid)
        shown.append(fid)
        was = initial.lifecycle if initial is not None else None
        life = f.lifecycle
        if life == RETIRED:
            if was != RETIRED:
                retired_now.append(fid)
                now_frames.append(fid)
                now_tokens += f.tokens
        elif life == RETIRING:
            assert f.due_tick is not None
            retiring.append((fid, f.due_tick))
            if was != RETIRING or (initial is not None and initial.retire_gen != f.retire_gen):
                pending_frames.append(fid)
                pending_tokens += f.tokens
                due_add.append((f.due_tick, fid, f.retire_gen, f.revision))
        elif was == RETIRING:
            cancelled.append(fid)
        elif was == RETIRED:
            restored.append(fid)
        if (
            initial is not None
            and initial.lifecycle == RETIRING
            and (life != RETIRING or f.retire_gen != initial.retire_gen)
        ):
            assert initial.due_tick is not None
            due_del.append((initial.due_tick, fid))

    events_out: list[Event] = []
    event_seqs: list[int] = []
    events = ov.events
    initial_events = ov.initial_events
    for seq in sorted(events) if len(events) > 1 else events:
        e = events[seq]
        if e is initial_events[seq]:
            continue
        events_out.append(e)
        event_seqs.append(e.seq)
        ref = event_ref(e.seq)
        changed.append("e:" + ref)
        shown.append(ref)
        if e.lifecycle == RETIRED:
            retired_now.append(ref)
            now_events.append(ref)
            now_tokens += e.tokens
        else:
            restored.append(ref)

    edges = d.edges_changed
    for s, label, o in sorted(edges) if len(edges) > 1 else edges:
        key = edge_key(s, label, o)
        changed.append(key)
        shown.append(key_display(key))
    cites_add: list[tuple[str, str]] = []
    for f in frames_out:
        initial = initials.get(f.id)
        if initial is None:
            for src in f.sources:
                cites_add.append((src, f.id))
        elif f.sources is not initial.sources:
            cites_add.extend((src, f.id) for src in f.sources if src not in initial.sources)

    new_meta = meta.copy()
    new_meta.version = version

    receipt, receipt_doc = committed_receipt(
        version=version,
        base_version=tx.base_version,
        rebased=rebased,
        client_id=tx.client_id,
        tick=meta.tick,
        retired_now=retired_now,
        retiring=retiring,
        cancelled=cancelled,
        restored=restored,
        now_events=now_events,
        now_frames=now_frames,
        now_tokens=now_tokens,
        pending_frames=pending_frames,
        pending_tokens=pending_tokens,
    )
    cs = Changeset(
        meta=new_meta,
        frames=frames_out,
        events=events_out,
        rel_add=sorted(ov.rel_add) if len(ov.rel_add) > 1 else list(ov.rel_add),
        rel_del=sorted(ov.rel_del) if len(ov.rel_del) > 1 else list(ov.rel_del),
        cites_add=cites_add,
        lastmod=dict.fromkeys(changed, version),
        due_add=due_add,
        due_del=due_del,
        client=None if tx.client_id is None else (tx.client_id, version, digest),
        txlog={
            "version": version,
            "kind": "model",
            "base_version": tx.base_version,
            "client_id": tx.client_id,
            "reason": tx.reason,
            # The text as submitted, or, for a transaction submitted as a model or
            # wire payload, its dict form (printing it is left to whoever reads the log).
            "text": text,
            "tx": None if text is not None else tx_to_dict(tx),
            "time": now,
            "tick": meta.tick,
            "changes": shown,
            "writes": d.writes,
            "receipt": receipt_doc,
        },
        history=history,
        outbox={"version": version, "frames": frame_ids, "events": event_seqs},
    )
    return Outcome(receipt, cs)


def _retire_targets(tx: ContextTx) -> set[str]:
    out: set[str] = set()
    for op in tx.ops:
        if isinstance(op, Retire):
            out.update(op.refs)
    return out


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


def finalize_due(view: ReadView, *, tick: int, now: float) -> tuple[list[str], Changeset]:
    """Move the tick to *tick* and retire every frame whose window ended by then (R12, R16).

    A pending retirement is stale, and does nothing, unless the frame is still
    retiring with the same request generation, revision and deadline. If any
    frame retires, the changes commit as one recorded runtime transaction
    (version + 1); otherwise only the tick moves. Replaying a runtime log
    record means calling this with the record's tick.
    """
    meta = view.meta()
    new_meta = meta.copy()
    new_meta.tick = tick
    cs = Changeset(meta=new_meta)
    version = meta.version + 1
    finalized: list[str] = []
    for due_tick, fid, gen, revision in view.due(tick):
        cs.due_del.append((due_tick, fid))
        f = view.frame(fid)
        if (
            f is None
            or f.lifecycle != RETIRING
            or f.retire_gen != gen
            or f.revision != revision
            or f.due_tick != due_tick
        ):
            continue  # stale: revised, restored, protected or re-marked since
        w = f.copy()
        w.lifecycle = RETIRED
        w.due_tick = None
        w.retired_version = version
        w.updated_version = version
        cs.frames.append(w)
        cs.history.append((fid, version))
        finalized.append(fid)
    if not finalized:
        return finalized, cs
    new_meta.version = version
    cs.lastmod = {"f:" + fid: version for fid in finalized}
    tokens = sum(f.tokens for f in cs.frames)
    receipt = Receipt(
        status="committed",
        version=version,
        base_version=meta.version,
        tick=tick,
        retired_now=tuple(finalized),
        relief_now=Relief(frames=tuple(finalized), tokens=tokens),
    )
    reason = f"consolidation window ended at tick {tick}"
    cs.txlog = {
        "version": version,
        "kind": "runtime",
        "base_version": meta.version,
        "client_id": None,
        "reason": reason,
        "text": _runtime_text(meta.version, reason, finalized),
        "tx": None,
        "time": now,
        "tick": tick,
        "changes": list(finalized),
        "writes": [{"frame": fid, "op": "finalize"} for fid in finalized],
        "finalize": list(finalized),
        "receipt": receipt.to_dict(),
    }
    cs.outbox = {"version": version, "frames": list(finalized), "events": []}
    return finalized, cs


def _runtime_text(base: int, reason: str, finalized: list[str]) -> str:
    ids = " ".join(finalized)
    return f'(runtime-tx\n  (base-version {base})\n  (reason "{reason}")\n  (finalize {ids}))'


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
    from protocol.errors import NotFound
    from protocol.ids import is_event_id

    seq: int | None
    if is_event_ref(ref):
        seq = ref_seq(ref)
    elif is_event_id(ref):
        seq = view.event_seq(ref)
    else:
        raise NotFound(f"not an event reference: {ref!r} (expected @e<number>)")
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
