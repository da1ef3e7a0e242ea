"""Forgetting an observation's text or a frame's body, in one write with its audit entry.

:func:`forget` decides, with the rules of :mod:`protocol.forget`, every record
the content lives in, and writes them all in one store write: the event (text,
preview) or the frame (current record, every history row, every log record
whose operation wrote the body), the ``recall_result`` observations that
carried it, an index intent that makes the search index rebuild without it,
and the audit entry (who, when, why, the digest). The version does not change.
:func:`forget_in_context` is what :meth:`service.context.Context.forget` runs:
the same, then the context's caches (compiled inputs, the search index) are
brought up to it. See ``docs/forget.md``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from protocol.engine import resolve_event
from protocol.errors import NotFound, RequestError, StoreError
from protocol.forget import (
    MAX_REASON,
    MAX_STILL_IN,
    ForgetReport,
    Rewrite,
    RewriteView,
    Tombstone,
    body_text,
    carries,
    check_by,
    check_reason,
    content_digest,
    event_tombstone,
    forget_audit,
    frame_tombstone,
    frame_tombstone_body,
    holds,
    needles,
    redact_log_record,
    scrub_reason,
    tombstone_event,
    tombstone_frame,
)
from protocol.ids import is_event_id, is_event_ref, is_frame_id
from protocol.state import Event, Frame, Meta
from protocol.view import Changeset, WriteView
from storage.backend import Backend

if TYPE_CHECKING:
    from service.context import Context


def _duplicate(kind: str, target: str, rid: str, stone: Tombstone, version: int) -> ForgetReport:
    return ForgetReport(
        target=target,
        kind=kind,
        id=rid,
        digest=stone.digest,
        by=stone.by,
        at=stone.at,
        reason=stone.reason,
        version=version,
        duplicate=True,
        cascade=[],
        log_versions=[],
        history_rows=0,
        scrubbed=[],
        still_in=[],
    )


def erasure_key_of(meta: Meta) -> bytes:
    """The erasure key of the context *meta* describes (kept apart from the store)."""
    from storage.keys import context_key_id, erasure_key

    return erasure_key(context_key_id(meta.tenant, meta.project, meta.created))


def destroy_erasure_key(backend: Backend) -> bool:
    """Destroy the erasure key of the context in *backend*: the digests its tombstones
    keep can no longer be checked against any text. True if there was a key."""
    from storage.keys import context_key_id
    from storage.keys import destroy_erasure_key as destroy

    meta = backend.read(lambda v: v.meta())
    return destroy(context_key_id(meta.tenant, meta.project, meta.created))


def _carriers(
    w: WriteView,
    stone: Tombstone,
    target: str,
    key: bytes,
    *,
    frame_id: str | None,
    ref: str | None,
) -> list[tuple[Event, str]]:
    """The recall results that carried the content, forgotten: ``(record, tombstone text)``."""
    found: list[tuple[Event, str]] = []
    for e in list(w.iter_events()):
        if e.kind != "recall_result" or event_tombstone(e) is not None:
            continue
        text = w.event_content(e.seq) or ""
        if carries(e, text, frame_id=frame_id, ref=ref):
            why = f"carried forgotten {target}: {stone.reason}"[:MAX_REASON]
            digest = content_digest(key, text)
            found.append(tombstone_event(e, Tombstone(digest, stone.by, stone.at, why)))
    return found


def forget(
    backend: Backend,
    target: str,
    *,
    reason: str | None,
    by: str,
    now: float,
    holder: str | None = None,
    context: str | None = None,
    tenant: str | None = None,
) -> ForgetReport:
    """Forget the content of *target* (``@eN``, an event id, or a frame id) in one write.

    *by* names who forgets (kept in the tombstone), *holder* who is audited
    (default *by*). Typed errors change nothing: RequestError ``missing_reason``
    (no or blank *reason*), ``bad_argument`` (reason over 512 characters, a bad
    *by*), NotFound (no such event or frame); StoreError for a read-only store.
    Forgetting a forgotten record is idempotent: it writes nothing and answers
    the first tombstone with ``duplicate`` true.
    """
    why = check_reason(reason)
    who = check_by(by)
    if not isinstance(target, str):
        raise RequestError("a target is an event reference or a frame id", code="bad_argument")
    if getattr(backend, "readonly", False):
        raise StoreError("this context is open read-only; forgetting needs a writer")

    def run(w: WriteView) -> ForgetReport:
        if not isinstance(w, RewriteView):
            raise StoreError("this store cannot rewrite records, so it cannot forget")
        meta = w.meta()
        version = meta.version
        key = erasure_key_of(meta)
        rw = Rewrite()
        cs = Changeset()
        if is_event_ref(target) or is_event_id(target):
            e = resolve_event(w, target)
            old = event_tombstone(e)
            if old is not None:
                return _duplicate("event", e.ref, e.id, old, version)
            content = w.event_content(e.seq) or ""
            pieces = needles(text=content)
            stone = Tombstone(content_digest(key, content), who, now, why)
            kind, ref, rid = "event", e.ref, e.id
            new, text = tombstone_event(e, stone)
            cs.events.append(new)
            rw.contents.append((e.seq, text))
            carried = [
                c
                for c in _carriers(w, stone, ref, key, frame_id=None, ref=ref)
                if c[0].seq != e.seq
            ]
        else:
            f: Frame | None = w.frame(target) if is_frame_id(target) else None
            if f is None:
                raise NotFound(
                    f"no frame or event {target!r}: name a frame id or an event reference (@eN)"
                )
            old = frame_tombstone(f)
            if old is not None:
                return _duplicate("frame", f.id, f.id, old, version)
            stone = Tombstone(content_digest(key, body_text(f.body)), who, now, why)
            kind, ref, rid = "frame", f.id, f.id
            body = frame_tombstone_body(stone.digest)
            cs.frames.append(tombstone_frame(f, stone))
            bodies = [f.body]
            for at in w.frame_history(f.id):
                row = w.frame_at(f.id, at)
                if row is not None:
                    bodies.append(row.body)
                    rw.history.append((f.id, at, tombstone_frame(row, stone)))
                record = w.txlog(at)
                redacted = None if record is None else redact_log_record(record, f.id, body)
                if redacted is not None:
                    rw.txlog.append(redacted)
            carried = _carriers(w, stone, ref, key, frame_id=f.id, ref=None)
            pieces = needles(body=tuple(form for b in bodies for form in b))
        scrubbed = _scrub_reasons(w, rw, pieces, version)
        still_in = _still_in(w, pieces, rid if kind == "frame" else None)
        for e2, text2 in carried:
            cs.events.append(e2)
            rw.contents.append((e2.seq, text2))
        cascade = [e2.ref for e2, _ in carried]
        cs.outbox = {
            "version": version,
            "frames": [rid] if kind == "frame" else [],
            "events": sorted(e2.seq for e2 in cs.events),
            "forget": True,
        }
        cs.audit = [
            forget_audit(
                kind=kind,
                target=ref,
                record_id=rid,
                stone=stone,
                cascade=cascade,
                holder=holder,
                context=context,
                tenant=tenant,
            )
        ]
        w.apply(cs)
        w.rewrite(rw)
        return ForgetReport(
            target=ref,
            kind=kind,
            id=rid,
            digest=stone.digest,
            by=stone.by,
            at=stone.at,
            reason=stone.reason,
            version=version,
            duplicate=False,
            cascade=cascade,
            log_versions=sorted(int(r["version"]) for r in rw.txlog),
            history_rows=len(rw.history),
            scrubbed=scrubbed,
            still_in=still_in,
        )

    return backend.transact(run)


def _scrub_reasons(w: WriteView, rw: Rewrite, pieces: list[str], version: int) -> list[int]:
    """Scrub *pieces* from the reason of every log record up to *version* (on top of the
    rewrites *rw* already holds); the versions scrubbed. One pass over the log."""
    if not pieces:
        return []
    pending = {int(r["version"]): r for r in rw.txlog}
    scrubbed: list[int] = []
    for v in range(1, version + 1):
        record = pending.get(v) or w.txlog(v)
        new = None if record is None else scrub_reason(record, pieces)
        if new is not None:
            pending[v] = new
            scrubbed.append(v)
    rw.txlog = [pending[v] for v in sorted(pending)]
    return scrubbed


def _still_in(w: WriteView, pieces: list[str], target: str | None) -> list[str]:
    """The other frames (not forgotten) whose current body still holds one of *pieces*."""
    if not pieces:
        return []
    found: list[str] = []
    for f in w.iter_frames():
        if f.id != target and frame_tombstone(f) is None and holds(f.body, pieces):
            found.append(f.id)
            if len(found) >= MAX_STILL_IN:
                break
    return sorted(found)


def forget_in_context(
    ctx: Context,
    target: str,
    *,
    reason: str | None,
    by: str,
    now: float,
    holder: str | None = None,
) -> ForgetReport:
    """:func:`forget` on *ctx*'s store, then its caches brought up to it.

    Compiled-input renders are dropped; the search index (if the context has
    one) is caught up, which rebuilds it without the forgotten content.
    """
    report = forget(
        ctx.backend,
        target,
        reason=reason,
        by=by,
        now=now,
        holder=holder,
        context=ctx.name,
        tenant=ctx.meta().tenant,
    )
    if not report.duplicate:
        ctx._compilers.clear()
        _refresh_index(ctx)
    return report


def _refresh_index(ctx: Context) -> None:
    from storage.search.format import INDEX_DIR

    path: Any = getattr(ctx.backend, "path", None)
    if ctx._searcher is None and not (
        isinstance(path, str) and os.path.isdir(os.path.join(path, INDEX_DIR))
    ):
        return  # no index: the first search builds one from the tombstones
    ctx.searcher.catch_up()
