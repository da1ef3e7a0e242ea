"""Governance decisions are logged transactions: forks and the history checker replay them."""

from __future__ import annotations

from harness.checker import check_history
from service.context import Context
from storage.memory import MemoryBackend


def test_admitted_candidates_replay_in_forks_and_the_checker(ctx: Context) -> None:
    recalled = ctx.observe("recall_result", "old case: npm test; npm run build; dist/")
    ctx.claim()
    receipt = ctx.commit(
        f'(context-tx (base-version 0) (derive hint (from {recalled.ref}) (build "npm run build")))'
    )
    assert receipt.committed
    assert ctx.frame_record("hint").envelope["trust"] == "candidate"
    decisions = ctx.admit().decisions
    assert [d.verdict for d in decisions] == ["accept"]
    assert ctx.frame_record("hint").envelope["trust"] == "accepted"
    assert ctx.txlog(ctx.version())["kind"] == "governance"

    fork = ctx.fork(MemoryBackend())
    assert fork.frame_record("hint").envelope == ctx.frame_record("hint").envelope
    assert fork.version() == ctx.version()

    def export(v):  # type: ignore[no-untyped-def]
        meta = v.meta()
        log = [v.txlog(n) for n in range(1, meta.version + 1)]
        return meta, log, list(v.iter_events()), list(v.iter_frames()), list(v.iter_relations())

    meta, log, events, frames, relations = ctx.backend.read(export)
    verdict = check_history(
        [],
        log,
        events=events,
        final_frames=frames,
        final_relations=relations,
        window=meta.window,
        history_keep=meta.history_keep,
    )
    assert verdict.ok, verdict.summary()
