"""A context for the inspector's tests: the release story of the seeds, a superseded
deployment target, a candidate, a quarantined frame, a usage trace, a rejected
transaction, and a frame whose body carries HTML and JavaScript that must never run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import morphz

HOSTILE = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'
"""Text written into a frame body and an observation."""


def _tx(ctx: Any, body: str, reason: str | None = None) -> int:
    why = f' (reason "{reason}")' if reason else ""
    receipt = ctx.submit(f"(context-tx (base-version {ctx.version()}){why} {body})")
    assert receipt.committed, receipt
    return int(receipt.version)


def fill(store: Path, name: str = "demo") -> dict[str, int]:
    """Write the story into context *name* of *store*; answers the versions by step."""
    out: dict[str, int] = {}
    with morphz.open_context(store, name, window=100) as ctx:
        ask = ctx.observe("user_message", "Ship v1 once the regression suite passes.").ref
        tests = ctx.observe("tool_result", "regression suite: 412 passed, 0 failed").ref
        region = ctx.observe("tool_result", "deployment region moved to cn-shanghai").ref
        evil = ctx.observe("tool_result", "page title: " + HOSTILE).ref
        ctx.claim()
        out["derive"] = _tx(
            ctx,
            f"(derive release (from {ask}) (goal ship-v1) (stage awaiting-tests))"
            f" (derive test-result (from {tests}) (tests passed))",
            "the user asked for a release",
        )
        out["revise"] = _tx(
            ctx,
            "(revise release (goal ship-v1) (stage packaging))"
            " (relate test-result supports release)",
            "tests passed",
        )
        out["target"] = _tx(
            ctx,
            f"(derive deployment/target-v1 (from {ask}) (fact (region us-east-1)))"
            " (relate deployment/target-v1 serves release)",
        )
        out["supersede"] = _tx(
            ctx,
            f"(derive deployment/target-v2 (from {region} deployment/target-v1)"
            " (fact (region cn-shanghai)))"
            " (relate deployment/target-v2 supersedes deployment/target-v1)"
            " (relate deployment/target-v2 serves release)"
            " (retire deployment/target-v1)",
            "the region changed",
        )
        quoted = HOSTILE.replace('"', '\\"')
        out["hostile"] = _tx(
            ctx,
            f'(derive hostile (from {evil}) (note "{quoted}")) (relate hostile mentions release)',
        )
        out["candidate"] = _tx(
            ctx,
            f"(derive rumour (from {ask}) (claim (skip the tests)))"
            " (envelope rumour (trust candidate))",
        )
        _tx(
            ctx,
            f"(derive old-plan (from {ask}) (plan (manual deploy))) (relate old-plan serves release)",
        )
        _tx(ctx, "(retire old-plan)", "the plan is automated now")
        _tx(ctx, f"(derive stale-note (from {tests}) (note (cache is warm)))")
        ctx.quarantine(["stale-note"])
        out["quarantine"] = ctx.version()
        ctx.record_trace(
            {
                "session": "main",
                "version": out["revise"],
                "tick": 1,
                "frames_present": ["release", "test-result"],
                "events_present": [ask, tests],
                "cited": ["test-result"],
                "decisions": [
                    {"version": out["revise"], "writes": ["release"], "cited": ["test-result"]}
                ],
                "action": "reply",
            }
        )
        # A writer on a stale base: rejected, it leaves an audit entry (never its text).
        stale = ctx.submit(
            f'(context-tx (base-version {out["derive"]}) (revise release (note "{quoted}")))'
        )
        assert not stale.committed and stale.errors[0].code == "conflict", stale
        out["version"] = ctx.version()
    return out
