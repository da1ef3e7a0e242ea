"""The transactions of the seed articles, run as written, with their before/after tables.

Only the refs (``@e42`` becomes whatever the store hands out) and the base
versions (the seeds' contexts had history we do not replay) are substituted.
"""

from __future__ import annotations

from service.context import Context
from tests.seed_texts import CONSOLIDATE_TX, RELEASE_TX

DEPLOY_TX = """(context-tx
  (base-version 17)
  (reason "current production configuration confirms cn-shanghai")
  (derive deployment/target-v2
    (from @e42 deployment/target-v1)
    (fact (region cn-shanghai)))
  (relate deployment/target-v2 supersedes deployment/target-v1)
  (retire deployment/target-v1)
  (retire @e42))"""


def as_written(text: str, ctx: Context, seed_base: int, **refs: str) -> str:
    """The seed text with the store's refs and the current version substituted."""
    text = text.replace(f"(base-version {seed_base})", f"(base-version {ctx.version()})")
    for seed_ref, ref in refs.items():
        text = text.replace("@" + seed_ref, ref)
    return text


def commit_ok(ctx: Context, text: str) -> dict[str, object]:
    receipt = ctx.commit(text)
    assert receipt.status == "committed", receipt.errors
    return receipt.to_dict()


def test_release_story(ctx: Context) -> None:
    request = ctx.observe("user_message", "Ship v1 once the regression tests pass.")
    commit_ok(
        ctx,
        f"(context-tx (base-version {ctx.version()}) "
        f"(derive release (from {request.ref}) (goal ship-v1) (stage awaiting-tests)))",
    )
    report = ctx.observe("tool_result", "regression suite: 412 passed, 0 failed\n" * 200)
    ctx.claim()

    before = ctx.frame("release")
    assert (before["revision"], before["body"]) == (1, "(goal ship-v1) (stage awaiting-tests)")
    assert ctx.event(report.ref)["lifecycle"] == "active"
    version_before = ctx.version()

    receipt = commit_ok(ctx, as_written(RELEASE_TX, ctx, 12, e42=report.ref))

    assert receipt["version"] == version_before + 1
    assert receipt["retired_now"] == [report.ref]
    assert receipt["relief_now"]["events"] == [report.ref]
    assert receipt["relief_now"]["tokens"] == ctx.event(report.ref)["tokens"] > 0
    test_result = ctx.frame("test-result")
    assert test_result["revision"] == 1
    assert test_result["body"] == "(tests passed)"
    assert test_result["sources"] == [report.ref]
    assert test_result["lifecycle"] == "active"
    release = ctx.frame("release")
    assert release["revision"] == 2
    assert release["body"] == "(goal ship-v1) (stage packaging)"
    assert release["sources"] == [request.ref]
    assert ["test-result", "supports", "release"] in ctx.state()["relations"]
    retired = ctx.event(report.ref)
    assert retired["lifecycle"] == "retired"
    assert ctx.read_event(report.ref, 0, 18)["text"] == "regression suite: "
    log = ctx.txlog(receipt["version"])  # type: ignore[arg-type]
    assert log["reason"] == "Incorporate the test result and prepare the release"
    assert "(derive test-result" in log["text"]


def test_deployment_region_change_retires_old_frame_through_successor(ctx: Context) -> None:
    commit_ok(
        ctx,
        f"(context-tx (base-version {ctx.version()}) "
        "(derive deployment/target-v1 (fact (region cn-hangzhou)))"
        "(derive build/failure (cause flaky-cache)))",
    )
    config = ctx.observe("tool_result", "production config: region=cn-shanghai")
    ctx.claim()
    other_before = ctx.frame("build/failure")

    receipt = commit_ok(ctx, as_written(DEPLOY_TX, ctx, 17, e42=config.ref))

    old = ctx.frame("deployment/target-v1")
    assert old["lifecycle"] == "retired"  # immediately, bypassing the window
    assert old["body"] == "(fact (region cn-hangzhou))"  # still traceable
    new = ctx.frame("deployment/target-v2")
    assert new["lifecycle"] == "active"
    assert new["body"] == "(fact (region cn-shanghai))"
    assert new["sources"] == [config.ref, "deployment/target-v1"]
    assert ctx.event(config.ref)["lifecycle"] == "retired"
    assert ctx.read_event(config.ref)["text"] == "production config: region=cn-shanghai"
    assert ctx.frame("build/failure") == other_before
    assert set(receipt["retired_now"]) == {"deployment/target-v1", config.ref}  # type: ignore[arg-type]
    assert receipt["retiring"] == []
    assert receipt["relief_now"]["frames"] == ["deployment/target-v1"]  # type: ignore[index]
    assert receipt["relief_pending"]["tokens"] == 0  # type: ignore[index]


def test_consolidating_two_release_cases_into_a_procedure(ctx: Context) -> None:
    run_a = ctx.observe("tool_result", "npm test: ok; npm run build: ok; dist/ verified")
    run_b = ctx.observe("tool_result", "pnpm --filter web test: ok; build ok; apps/web/dist/ ok")
    ctx.claim()
    commit_ok(
        ctx,
        f"""(context-tx (base-version {ctx.version()})
      (derive release-case-a (from {run_a.ref}) (layout single-package) (test "npm test"))
      (derive release-case-b (from {run_b.ref}) (layout workspace) (test "pnpm --filter web test")))""",
    )

    receipt = commit_ok(ctx, as_written(CONSOLIDATE_TX, ctx, 42))

    procedure = ctx.frame("release-procedure")
    assert procedure["sources"] == ["release-case-a", "release-case-b"]
    assert procedure["lifecycle"] == "active"
    assert procedure["body"].startswith('(steps "After tests pass, build, verify')
    assert '(workspace (test "pnpm --filter web test")' in procedure["body"]
    for case in ("release-case-a", "release-case-b"):
        assert ctx.frame(case)["lifecycle"] == "retired"
        assert ["release-procedure", "supersedes", case] in ctx.state()["relations"]
    assert sorted(receipt["retired_now"]) == ["release-case-a", "release-case-b"]  # type: ignore[arg-type]
    # The printed body reads back as the same forms (R3).
    from protocol.sexpr import read_forms

    assert read_forms(procedure["body"]) == list(ctx.frame_record("release-procedure").body)


def test_later_successor_completes_a_pending_retirement(ctx: Context) -> None:
    commit_ok(ctx, f"(context-tx (base-version {ctx.version()}) (derive plan/v1 (stage draft)))")
    first = commit_ok(ctx, f"(context-tx (base-version {ctx.version()}) (retire plan/v1))")
    assert first["retiring"] == [{"id": "plan/v1", "due_tick": 8}]
    assert ctx.frame("plan/v1")["lifecycle"] == "retiring"

    # No new retire: the successor alone completes the pending retirement.
    second = commit_ok(
        ctx,
        f"""(context-tx (base-version {ctx.version()})
      (derive plan/v2 (from plan/v1) (stage final))
      (relate plan/v2 supersedes plan/v1))""",
    )
    assert second["retired_now"] == ["plan/v1"]
    assert ctx.frame("plan/v1")["lifecycle"] == "retired"


def test_successor_without_source_or_relation_does_not_bypass_window(ctx: Context) -> None:
    commit_ok(ctx, f"(context-tx (base-version {ctx.version()}) (derive a (x 1)) (derive b (x 2)))")
    # b supersedes a but does not cite it: the window applies.
    receipt = commit_ok(
        ctx, f"(context-tx (base-version {ctx.version()}) (relate b supersedes a) (retire a))"
    )
    assert receipt["retired_now"] == []
    assert ctx.frame("a")["lifecycle"] == "retiring"
    # c cites a but no supersedes edge: still the window.
    commit_ok(ctx, f"(context-tx (base-version {ctx.version()}) (derive c (from a) (x 3)))")
    assert ctx.frame("a")["lifecycle"] == "retiring"
