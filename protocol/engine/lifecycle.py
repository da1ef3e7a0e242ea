"""The lifecycle rules that act beyond one operation: the successor rule and the window.

* :func:`successor_rule` (R17) — after a transaction's operations, a frame
  marked for retirement retires at once when a non-retired successor cites it
  and ``supersedes`` it;
* :func:`finalize_due` (R12, R13, R16) — when the tick moves, every
  retirement whose consolidation window has ended is finalized as one
  recorded runtime transaction; a stale one (the frame revised, restored,
  protected or re-marked since) does nothing.
"""

from __future__ import annotations

from protocol.engine.overlay import Overlay
from protocol.engine.records import runtime_records
from protocol.fields import lifecycle_key
from protocol.state import RETIRED, RETIRING
from protocol.view import Changeset, ReadView


def successor_rule(ov: Overlay, candidates: set[str], version: int) -> None:
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
    cs.lastmod.update({lifecycle_key(fid): version for fid in finalized})
    tokens = sum(f.tokens for f in cs.frames)
    cs.txlog, cs.outbox = runtime_records(
        base=meta.version,
        version=version,
        tick=tick,
        finalized=finalized,
        tokens=tokens,
        now=now,
    )
    return finalized, cs
