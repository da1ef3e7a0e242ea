"""Base versions, footprints, rebase and reject, exactly-once commits (R21–R25)."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import pytest

from protocol.errors import StoreError
from service.context import Context


def seed(ctx: Context) -> int:
    ctx.commit(
        "(context-tx (base-version 0) (derive release (stage testing)) "
        "(derive constraints (region eu)) (derive notes (x 1)))"
    )
    return ctx.version()


def test_independent_transactions_from_one_base_both_commit(ctx: Context) -> None:
    base = seed(ctx)
    a = ctx.commit(f"(context-tx (base-version {base}) (revise release (stage packaging)))")
    b = ctx.commit(f"(context-tx (base-version {base}) (revise notes (x 2)))")
    assert (a.status, a.rebased) == ("committed", False)
    assert (b.status, b.rebased, b.version) == ("committed", True, base + 2)
    assert ctx.frame("release")["body"] == "(stage packaging)"
    assert ctx.frame("notes")["body"] == "(x 2)"


def test_same_frame_from_one_base_rejects_the_later_one(ctx: Context) -> None:
    base = seed(ctx)
    tests_passed = ctx.commit(
        f"(context-tx (base-version {base}) (revise release (stage packaging)))"
    )
    paused = ctx.commit(f"(context-tx (base-version {base}) (revise release (stage paused)))")
    assert tests_passed.status == "committed"
    assert paused.status == "rejected"
    assert [(c.id, c.version) for c in paused.conflicts] == [("release", tests_passed.version)]
    assert paused.errors[0].code == "conflict"
    assert "release (v" in paused.errors[0].message
    assert ctx.frame("release")["body"] == "(stage packaging)"
    assert ctx.version() == tests_passed.version


def test_dependencies_listed_in_from_are_checked(ctx: Context) -> None:
    base = seed(ctx)
    ctx.commit(f"(context-tx (base-version {base}) (revise constraints (region us)))")
    r = ctx.commit(f"(context-tx (base-version {base}) (derive plan (from constraints) (go eu)))")
    assert r.status == "rejected"
    assert [c.id for c in r.conflicts] == ["constraints"]


def test_relation_endpoints_and_edges_are_in_the_footprint(ctx: Context) -> None:
    base = seed(ctx)
    ctx.commit(f"(context-tx (base-version {base}) (relate notes supports release))")
    same_edge = ctx.commit(f"(context-tx (base-version {base}) (relate notes supports release))")
    assert [c.id for c in same_edge.conflicts] == ["notes supports release"]
    other_edge = ctx.commit(
        f"(context-tx (base-version {base}) (relate constraints limits release))"
    )
    assert other_edge.status == "committed" and other_edge.rebased
    ctx.commit(f"(context-tx (base-version {ctx.version()}) (revise release (stage shipped)))")
    stale_endpoint = ctx.commit(
        f"(context-tx (base-version {base}) (relate constraints informs release))"
    )
    assert [c.id for c in stale_endpoint.conflicts] == ["release"]


def test_citing_an_event_retired_meanwhile_is_not_a_conflict(ctx: Context) -> None:
    e = ctx.observe("tool_result", "config: region=eu")
    ctx.claim()
    base = ctx.version()
    ctx.commit(f"(context-tx (base-version {base}) (retire {e.ref}))")
    cite = ctx.commit(f"(context-tx (base-version {base}) (derive region (from {e.ref}) (eu)))")
    assert cite.status == "committed" and cite.rebased
    again = ctx.commit(f"(context-tx (base-version {base}) (restore {e.ref}))")
    assert [c.id for c in again.conflicts] == [e.ref]


def test_runtime_finalization_counts_as_a_change(make_ctx: Callable[..., Context]) -> None:
    ctx = make_ctx(window=1)
    ctx.commit("(context-tx (base-version 0) (derive a (x 1)) (retire a))")
    base = ctx.version()
    ctx.observe("tool_result", "tick")
    assert ctx.claim().finalized == ["a"]
    r = ctx.commit(f"(context-tx (base-version {base}) (restore a))")
    assert [(c.id, c.version) for c in r.conflicts] == [("a", base + 1)]


def test_future_base_is_refused(ctx: Context) -> None:
    future = ctx.commit("(context-tx (base-version 5) (derive a (x 1)))")
    assert future.status == "rejected"
    assert future.errors[0].code == "future_base"
    assert ctx.version() == 0


def test_too_old_beyond_kept_history() -> None:
    from storage.memory import MemoryBackend

    ctx = Context(MemoryBackend(), history_keep=3)
    for i in range(5):
        ctx.commit(f"(context-tx (base-version {ctx.version()}) (derive f{i} (x {i})))")
    r = ctx.commit("(context-tx (base-version 1) (derive g (x 1)))")
    assert r.status == "rejected"
    assert r.errors[0].code == "too_old"
    ok = ctx.commit("(context-tx (base-version 2) (derive g (x 1)))")
    assert ok.status == "committed" and ok.rebased


def test_client_id_makes_commits_exactly_once(ctx: Context) -> None:
    seed(ctx)
    text = f"(context-tx (base-version {ctx.version()}) (revise notes (x 9)))"
    first = ctx.commit(text, client_id="thread-1/tx-1")
    retry = ctx.commit(text, client_id="thread-1/tx-1")
    assert first.status == "committed" and not first.duplicate
    assert retry.duplicate
    assert retry.model_copy(update={"duplicate": False}) == first
    assert ctx.version() == first.version
    assert ctx.frame("notes")["revision"] == 2
    reused = ctx.commit(
        f"(context-tx (base-version {ctx.version()}) (revise notes (x 10)))",
        client_id="thread-1/tx-1",
    )
    assert reused.errors[0].code == "client_id_reused"
    assert ctx.frame("notes")["revision"] == 2


def test_group_commit_decides_each_against_the_previous(ctx: Context) -> None:
    base = seed(ctx)
    receipts = ctx.commit_many(
        [
            f"(context-tx (base-version {base}) (revise release (stage a)))",
            f"(context-tx (base-version {base}) (revise release (stage b)))",
            f"(context-tx (base-version {base}) (revise notes (x 3)))",
        ]
    )
    assert [r.status for r in receipts] == ["committed", "rejected", "committed"]
    assert [r.version for r in receipts] == [base + 1, base + 1, base + 2]
    assert ctx.version() == base + 2


def test_group_commit_leaves_the_cyclic_collector_as_it_found_it(ctx: Context) -> None:
    seed(ctx)
    inner = ctx.backend

    class FailingWrites:
        """The store, but every changeset a write applies raises inside the decisions."""

        def transact(self, fn: Callable[[Any], Any]) -> Any:
            class Broken:
                def __init__(self, view: Any) -> None:
                    self.view = view

                def apply(self, changes: Any) -> None:
                    raise StoreError("the write failed")

                def __getattr__(self, name: str) -> Any:
                    return getattr(self.view, name)

            return inner.transact(lambda view: fn(Broken(view)))

        def __getattr__(self, name: str) -> Any:
            return getattr(inner, name)

    was = gc.isenabled()
    seen: list[bool] = []
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            version = ctx.version()
            tx = f"(context-tx (base-version {version}) (revise notes (x {int(enabled)})))"
            assert ctx.commit_many([tx])[0].committed
            seen.append(gc.isenabled())
            ctx.backend = FailingWrites()  # type: ignore[assignment]
            try:
                with pytest.raises(StoreError, match="the write failed"):
                    ctx.commit_many([tx.replace(str(version), str(version + 1))])
            finally:
                ctx.backend = inner
            seen.append(gc.isenabled())
            assert ctx.version() == version + 1
    finally:
        (gc.enable if was else gc.disable)()
    assert seen == [True, True, False, False]
