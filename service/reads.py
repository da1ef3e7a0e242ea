"""Consistent reads of one context, as the ports show them: frames, events, the state,
a frame's write history, a snapshot of some frames (with their bodies, to base an
update on: :func:`read_for_update`), and a page of the exported history.

Every function here reads one :class:`~protocol.view.ReadView` (one snapshot) and returns
plain JSON-ready values; none writes. :class:`~service.context.Context` runs them through
its backend; the dict shapes are the ones the CLI, the embedded API and the Ray actor answer.
"""

from __future__ import annotations

from typing import Any

from protocol.engine import resolve_event, source_ref
from protocol.errors import NotFound, OutOfRange
from protocol.forms import to_plain
from protocol.state import REJECTED, RETIRED, RETIRING, Event, Frame
from protocol.suggest import did_you_mean
from protocol.tx import ContextTx
from protocol.view import ReadView

MAX_EXPORT_PAGE = 5000
"""Most log records one :func:`export_page` carries."""
MAX_SNAPSHOT_FRAMES = 1024
"""Most frames one :func:`snapshot` reads."""
MAX_READ_CHARS = 1 << 20
"""Largest chunk one event read returns."""


def print_body(body: tuple[Any, ...]) -> str:
    """A frame body as S-expression text, one form after another."""
    from protocol.sexpr import print_form

    return " ".join(print_form(f) for f in body)


def logged_tx(record: dict[str, Any]) -> ContextTx:
    """The transaction a model-kind log record holds, from its text or its dict form."""
    if record.get("text") is not None:
        from protocol.txlang import parse_tx

        return parse_tx(record["text"], legacy=True)
    from protocol.txwire import tx_from_dict

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
    if env.get("forgotten") is not None:
        out["envelope"]["forgotten"] = dict(env["forgotten"])
    gone = forgotten_sources(v, f.sources)
    if gone:
        out["forgotten_sources"] = gone
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
    if e.extra.get("forgotten") is not None:
        out["forgotten"] = dict(e.extra["forgotten"])
    return out


def forgotten_sources(v: ReadView, sources: tuple[str, ...]) -> list[str]:
    """The sources among *sources* whose content was forgotten, as the model reads them."""
    out: list[str] = []
    for s in sources:
        if s.startswith("ev:"):
            seq = v.event_seq(s)
            e = v.event(seq) if seq is not None else None
            if e is not None and e.extra.get("forgotten") is not None:
                out.append(e.ref)
        else:
            src = v.frame(s)
            if src is not None and src.envelope.get("forgotten") is not None:
                out.append(s)
    return out


def frame(v: ReadView, frame_id: str) -> dict[str, Any]:
    """The current frame *frame_id* (:func:`frame_dict`); NotFound for an unknown id."""
    f = v.frame(frame_id)
    if f is None:
        raise no_frame(v, frame_id)
    return frame_dict(v, f)


def no_frame(v: ReadView, frame_id: str) -> NotFound:
    """The NotFound of an unknown *frame_id*, with "did you mean …?" when a frame is close."""
    hint = did_you_mean(frame_id, (f.id for f in v.iter_frames()))
    return NotFound(f"no frame {frame_id!r}" + (f"; {hint}" if hint else ""))


def frame_at(v: ReadView, frame_id: str, version: int) -> dict[str, Any]:
    """The frame as it stood when *version* committed, with ``as_of``; NotFound if absent,
    OutOfRange for a version before 0 or after the current one."""
    if version < 0:
        raise OutOfRange(f"version must be >= 0, not {version}")
    current = v.meta().version
    if version > current:
        raise OutOfRange(
            f"version {version} is after the current version {current}", code="future_version"
        )
    f = v.frame_at(frame_id, version)
    if f is None:
        raise NotFound(f"no frame {frame_id!r} at version {version}")
    out = frame_dict(v, f, relations=False)
    out["as_of"] = version
    return out


def read_event(v: ReadView, ref: str, offset: int, length: int | None) -> dict[str, Any]:
    """Characters ``[offset, offset+length)`` of an event's original text, retired or not.

    *length* defaults to the rest, capped at :data:`MAX_READ_CHARS`; offsets
    past the end give an empty chunk. The bounds of *offset* and *length* are the
    argument model's (:func:`service.queries.read_event`).
    """
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


def frames_valid_at(v: ReadView, when: float, include_retired: bool) -> list[dict[str, Any]]:
    """Frames whose valid time covers *when*, by id; never rejected ones, retired ones only
    with *include_retired*."""
    out = [
        frame_dict(v, f, relations=False)
        for f in v.iter_frames()
        if f.valid_at(when) and f.trust != REJECTED and (include_retired or f.lifecycle != RETIRED)
    ]
    return sorted(out, key=lambda d: str(d["id"]))


def state(v: ReadView, name: str) -> dict[str, Any]:
    """Version, tick, every frame, event and relation, and the sessions of context *name*."""
    meta = v.meta()
    frames = []
    for f in v.iter_frames():
        item: dict[str, Any] = {"id": f.id, "revision": f.revision, "lifecycle": f.lifecycle}
        if f.protected:
            item["protected"] = True
        if f.lifecycle == RETIRING:
            item["due_tick"] = f.due_tick
        frames.append(item)
    events = []
    sessions: dict[str, dict[str, Any]] = {}
    for e in v.iter_events():
        events.append({"ref": e.ref, "kind": e.kind, "lifecycle": e.lifecycle})
        s = sessions.setdefault(e.session, {"name": e.session, "events": 0, "pending_requests": []})
        s["events"] += 1
        if e.causally_protected:
            s["pending_requests"].append(e.ref)
    return {
        "context": name,
        "version": meta.version,
        "tick": meta.tick,
        "window": meta.window,
        "frames": frames,
        "events": events,
        "relations": [list(r) for r in v.iter_relations()],
        "sessions": list(sessions.values()),
        "waiting": [f"@e{seq}" for seq in v.inbox()],
    }


def history(v: ReadView, frame_id: str) -> list[dict[str, Any]]:
    """Every committed write of *frame_id* from the log; NotFound for an unknown frame.

    The body shown is the one that transaction wrote; lifecycle-only changes
    appear with ``op`` ``lifecycle``.
    """
    versions = v.frame_history(frame_id)
    if not versions and v.frame(frame_id) is None:
        raise no_frame(v, frame_id)
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


def snapshot(v: ReadView, frame_ids: list[str]) -> dict[str, Any]:
    """``{"version", "tick", "frames": {id: summary | None}}`` from one snapshot.

    A summary is ``{"revision", "lifecycle", "protected"}``; None means absent.
    An agent bases its next transaction on ``version``.
    """
    meta = v.meta()
    frames: dict[str, Any] = {}
    for fid in frame_ids:
        f = v.frame(fid)
        frames[fid] = (
            None
            if f is None
            else {"revision": f.revision, "lifecycle": f.lifecycle, "protected": f.protected}
        )
    return {"version": meta.version, "tick": meta.tick, "frames": frames}


def read_for_update(v: ReadView, frame_ids: list[str]) -> dict[str, Any]:
    """What a writer bases its next transaction on, from one snapshot:
    ``{"version", "tick", "frames": {id: state | None}}``.

    A state is ``{"revision", "version", "lifecycle", "protected", "body",
    "body_forms"}`` (``version``: the version that last wrote the frame); None
    means absent. Base the transaction on ``version``: the bodies are the ones
    that stood at that version, so a revise built from them is rejected only
    if another writer commits first.
    """
    meta = v.meta()
    frames: dict[str, Any] = {}
    for fid in frame_ids:
        f = v.frame(fid)
        frames[fid] = (
            None
            if f is None
            else {
                "revision": f.revision,
                "version": f.updated_version,
                "lifecycle": f.lifecycle,
                "protected": f.protected,
                "body": print_body(f.body),
                "body_forms": [to_plain(x) for x in f.body],
            }
        )
    return {"version": meta.version, "tick": meta.tick, "frames": frames}


def export_page(v: ReadView, after: int, limit: int) -> dict[str, Any]:
    """One page of the context's history, for history checkers.

    ``{"log": [log records after *after*, ascending, at most *limit*], "version",
    "tick", "window", "history_keep", "tenant", "project", "more", "events",
    "frames", "relations"}``. ``events`` (records, no content), ``frames`` and
    ``relations`` are filled on the last page only (``more`` false), from the
    same snapshot as its log.
    """
    meta = v.meta()
    last = min(meta.version, after + limit)
    log = []
    for version in range(after + 1, last + 1):
        rec = v.txlog(version)
        if rec is not None:
            log.append(rec)
    more = last < meta.version
    page: dict[str, Any] = {
        "log": log,
        "version": meta.version,
        "tick": meta.tick,
        "window": meta.window,
        "history_keep": meta.history_keep,
        "tenant": meta.tenant,
        "project": meta.project,
        "more": more,
        "events": [],
        "frames": [],
        "relations": [],
    }
    if not more:
        page["events"] = [e.to_record() for e in v.iter_events()]
        page["frames"] = [f.to_record() for f in v.iter_frames()]
        page["relations"] = [list(r) for r in v.iter_relations()]
    return page
