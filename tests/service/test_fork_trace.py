"""Cross-task reuse (R39): forks at a version, and traces of which frames took part in calls."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from protocol.errors import OutOfRange, RequestError
from service.context import Context
from storage.memory import MemoryBackend


def learned(ctx: Context) -> None:
    e = ctx.observe("tool_result", "npm test ok; npm run build ok; dist/")
    ctx.claim()
    ctx.commit(f'(context-tx (base-version 0) (derive case-a (from {e.ref}) (test "npm test")))')
    ctx.commit(
        "(context-tx (base-version 1) (derive procedure (from case-a) (steps test build))"
        " (relate procedure supersedes case-a) (retire case-a))"
    )
    ctx.commit("(context-tx (base-version 2) (revise procedure (steps test build verify)))")


def test_fork_at_current_and_older_versions(make_ctx: Callable[..., Context]) -> None:
    source = make_ctx()
    learned(source)
    now = source.fork(MemoryBackend())
    assert now.version() == source.version() == 3
    assert now.state()["frames"] == source.state()["frames"]
    assert now.state()["relations"] == source.state()["relations"]
    assert now.frame("procedure")["body"] == "(steps test build verify)"
    assert now.read_event("@e1")["text"].startswith("npm test ok")

    older = source.fork(MemoryBackend(), at_version=2)
    assert older.version() == 2
    assert older.frame("procedure")["revision"] == 1
    assert older.frame("case-a")["lifecycle"] == "retired"
    # The fork goes on independently of its source.
    r = older.commit("(context-tx (base-version 2) (revise procedure (steps test)))")
    assert r.status == "committed" and source.frame("procedure")["revision"] == 2


def test_fork_refuses_bad_versions_and_non_empty_targets(ctx: Context) -> None:
    learned(ctx)
    with pytest.raises(OutOfRange):
        ctx.fork(MemoryBackend(), at_version=9)
    busy = Context(MemoryBackend())
    busy.observe("user_message", "hi")
    with pytest.raises(RequestError) as err:
        ctx.fork(busy.backend)
    assert err.value.code == "fork_target_not_empty"


def test_traces_answer_which_frames_took_part(ctx: Context) -> None:
    learned(ctx)
    ctx.record_trace({"session": "main", "version": 3, "frames_present": ["procedure"]})
    ctx.record_trace({"session": "main", "version": 3, "frames_present": ["other"]})
    calls = ctx.traces(frame="procedure")
    assert [c["call"] for c in calls] == [1]
    assert calls[0]["frames_present"] == ["procedure"]
    assert [c["call"] for c in ctx.traces()] == [1, 2]
    assert [c["call"] for c in ctx.traces(after=1)] == [2]
    with pytest.raises(OutOfRange):
        ctx.traces(limit=0)


def test_a_fork_keeps_the_scope_of_its_source() -> None:
    source = Context(MemoryBackend(), tenant="acme", project="payroll")
    learned(source)
    fork = source.fork(MemoryBackend())
    assert (fork.meta().tenant, fork.meta().project) == ("acme", "payroll")
    r = fork.commit(f"(context-tx (base-version {fork.version()}) (derive later (x)))")
    assert r.committed and fork.frame("later")["envelope"]["tenant"] == "acme"
    assert fork.frame("procedure")["envelope"] == source.frame("procedure")["envelope"]
