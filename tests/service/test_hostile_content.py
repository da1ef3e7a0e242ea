"""Hostile content never stalls a context: every sensitive-content rule is linear, a record is
scanned on its first MAX_SCAN_CHARS characters (the rest is reported, not skipped silently),
and the unattended pass scans observations within a budget, resuming where it stopped.

On main before this change the ``jwt`` rule was quadratic: a 400 kB run of ``eyJ-`` took
minutes on the store thread; :func:`test_a_400_kb_hostile_observation_is_scanned` then
misses its generous hang guard. Timings themselves are in benchmarks/bench_sensitive.py.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from protocol.governance import (
    MAX_SCAN_CHARS,
    locate_sensitive,
    plan_pass,
    scan_observations,
    sensitive_findings,
)
from service.context import Context
from service.governance import run_quarantine_scan

JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
KEY = "AKIAIOSFODNN7EXAMPLE"
HANG_GUARD = 30.0  # seconds: over a hundred times what a linear scan of 400 kB takes

# Repeated pieces that drive a backtracking engine: each rule's own openings, separators,
# and runs with no closing part.
HOSTILE_PIECES = (
    "eyJ-", "eyJa.", "sk-", "sk-aaaaaaaaaaaaaaa-", "a@", "a@a.", "+1 ", "1 ", "1-",
    "-----BEGIN ", "password ", "a_", "a.token", "bearer ", "a://", "a://u:", "ghp_",
    "github_pat_", "xoxb-", "(", "token:", "authorization: basic ",
)  # fmt: skip


def finished(fn: Any) -> Any:
    """Run *fn* on a thread; its result, or a failure when it is still running at the guard."""
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(HANG_GUARD)
    assert not t.is_alive(), f"still scanning after {HANG_GUARD:.0f} s: super-linear"
    return out[0]


def test_a_400_kb_hostile_observation_is_scanned(ctx: Context) -> None:
    hostile = "eyJ-" * 100_000  # 400 kB, the review's quadratic case for the jwt rule
    event = ctx.observe("tool_result", f"{hostile} then the real one: {JWT} and {KEY}")
    scan = finished(lambda: run_quarantine_scan(ctx.backend))
    rules = {(s.ref, s.rule) for s in scan.sensitive}
    assert (event.ref, "jwt") in rules and (event.ref, "aws_access_key") in rules
    assert all(JWT[3:] not in s.excerpt for s in scan.sensitive)


@pytest.mark.parametrize("piece", HOSTILE_PIECES)
def test_each_rule_finds_a_secret_behind_a_hostile_run(piece: str) -> None:
    text = piece * (100_000 // len(piece)) + f" token {JWT} key {KEY} "
    names = set(finished(lambda: sensitive_findings(text)))
    assert {"JSON web token", "AWS access key id"} <= names


def test_a_jwt_inside_a_run_of_tokens_is_still_found() -> None:
    for before in (" ", "\n", "=", ":", '"', "(", "Bearer "):
        (span,) = [s for s in locate_sensitive(f"x{before}{JWT}.") if s.rule.code == "jwt"]
        assert span.end - span.start == len(JWT)


def test_text_past_the_scan_limit_is_reported_not_skipped() -> None:
    clean = "plain words " * (MAX_SCAN_CHARS // 12 + 10)
    assert len(clean) > MAX_SCAN_CHARS
    text = f"{KEY} " + clean + KEY
    spans = locate_sensitive(text)
    assert [s.rule.code for s in spans] == ["aws_access_key", "unscanned"]
    assert (spans[1].start, spans[1].end) == (MAX_SCAN_CHARS, len(text))
    assert "text beyond the scan limit" in sensitive_findings(clean)
    assert sensitive_findings(clean[: MAX_SCAN_CHARS - 1]) == []


def test_an_oversized_observation_is_flagged_for_a_human(ctx: Context) -> None:
    event = ctx.observe("tool_result", "x " * (MAX_SCAN_CHARS // 2 + 5))
    scan = run_quarantine_scan(ctx.backend)
    (s,) = [s for s in scan.sensitive if s.ref == event.ref]
    assert s.rule == "unscanned" and s.start == MAX_SCAN_CHARS
    assert f"forget {event.ref}" in s.remedy


def test_a_budgeted_scan_stops_between_observations_and_resumes(ctx: Context) -> None:
    refs = [ctx.observe("tool_result", f"step {n}: {KEY}").ref for n in range(5)]
    first, upto = ctx.backend.read(lambda v: scan_observations(v, 0, budget=1))
    assert [s.ref for s in first] == refs[:1]  # at least one, however small the budget
    calls = iter([False, True])
    second, upto2 = ctx.backend.read(lambda v: scan_observations(v, upto, stop=lambda: next(calls)))
    assert [s.ref for s in second] == refs[1:3]  # asked between observations
    rest, last = ctx.backend.read(lambda v: scan_observations(v, upto2))
    assert [s.ref for s in rest] == refs[3:] and last == ctx.backend.read(
        lambda v: v.meta().next_seq - 1
    )


def test_the_pass_carries_a_stopped_scan_to_the_next_pass(ctx: Context) -> None:
    refs = [ctx.observe("tool_result", f"key {n}: {KEY}").ref for n in range(4)]
    plan = ctx.backend.read(lambda v: plan_pass(v, scan_budget=1))
    assert [s.ref for s in plan.sensitive] == refs[:1]
    assert plan.events < ctx.backend.read(lambda v: v.meta().next_seq - 1)
