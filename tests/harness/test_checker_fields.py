"""The history checker and field edits (issue 21): appends from stale bases are no lost
update, a set over a concurrent set of its field is one, an append lost or applied twice
is a ``lost_edit``."""

from __future__ import annotations

from typing import Any

from harness.checker import LOST_EDIT, LOST_UPDATE, REPLAY_DIVERGED, Submission
from protocol.forms import Symbol
from protocol.state import Frame
from service.context import Context
from storage.memory import MemoryBackend
from tests.harness.test_checker import History, Thread, read_history


def _story() -> tuple[History, Context, dict[str, int]]:
    ctx = Context(MemoryBackend())
    subs: list[Submission] = []
    seed = Thread(ctx, "seed", subs)
    assert seed.submit("(derive shared (status open) (tokens) (n 0))").committed  # type: ignore[union-attr]
    writers = [Thread(ctx, f"w{k}", subs) for k in range(4)]  # all based on v1
    versions: dict[str, int] = {}
    for k, w in enumerate(writers):
        r = w.submit(f"(append shared (tokens w{k}-0)) (incr shared (n 1))")
        assert r is not None and r.committed and r.edits[0].outcome in ("applied", "merged")
    a = Thread(ctx, "a", subs)
    b = Thread(ctx, "b", subs)  # both read the same version
    r = a.submit("(set shared (status blocked))")
    assert r is not None and r.committed
    versions["a_status"] = r.version
    r = b.submit("(set shared (owner bob))")  # another field: no conflict
    assert r is not None and r.committed
    versions["b_owner"] = r.version
    r = b.submit("(set shared (status done))")  # b's base is before a's status: refused
    assert r is not None and not r.committed and r.conflicts[0].field == "status"
    return read_history(ctx, subs), ctx, versions


def _replace_body(frames: list[Frame], body: tuple[Any, ...]) -> list[Frame]:
    out = []
    for f in frames:
        g = f.copy()
        if g.id == "shared":
            g.body = body
        out.append(g)
    return out


def test_appends_and_sets_of_other_fields_from_stale_bases_check_ok() -> None:
    h, _, _ = _story()
    verdict = h.check()
    assert verdict.ok, verdict.violations


def test_an_append_lost_or_applied_twice_is_a_lost_edit() -> None:
    h, ctx, _ = _story()
    S = Symbol
    shared = next(f for f in h.frames if f.id == "shared")
    tokens = next(f for f in shared.body if f[0] == "tokens")
    rest = tuple(f for f in shared.body if f[0] != "tokens")
    lost = (*rest, tokens[:-1])
    twice = (*rest, (*tokens, tokens[-1]))
    for body, words in ((lost, "1 value(s) lost"), (twice, "1 extra")):
        verdict = h.check(frames=_replace_body(h.frames, body))
        assert LOST_EDIT in verdict.kinds()
        assert any(words in v.detail for v in verdict.violations if v.kind == LOST_EDIT)
    counted_once = tuple((S("n"), 1) if f[0] == "n" else f for f in shared.body)
    verdict = h.check(frames=_replace_body(h.frames, counted_once))
    assert any("field n of frame shared" in v.detail for v in verdict.violations)


def test_a_set_over_a_concurrent_set_of_its_field_is_a_lost_update() -> None:
    h, _, versions = _story()
    v = versions["b_owner"]
    rec = h.log[v - 1]
    base = rec["base_version"]
    # Doctor b's committed set so that it set status (which a changed since b's base).
    text = rec["text"].replace("(owner bob)", "(status done)")
    log = [dict(r) for r in h.log]
    log[v - 1] = {**rec, "text": text}
    verdict = h.check(log=log)
    assert LOST_UPDATE in verdict.kinds()
    details = [x.detail for x in verdict.violations if x.kind == LOST_UPDATE]
    assert any(
        f"from base v{base}" in d and f"v{versions['a_status']} changed field status of shared" in d
        for d in details
    ), details
    assert REPLAY_DIVERGED in verdict.kinds()  # the engine would have refused it
