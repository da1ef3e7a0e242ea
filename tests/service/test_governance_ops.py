"""Governance through a store (admission, review, pending, quarantine scan, one pass), audited
in the same write, and the embedded background worker. Both backends (the ``ctx`` fixture)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from protocol.errors import NotFound, OutOfRange, RequestError
from protocol.governance import Decision, pending
from protocol.state import Frame
from protocol.view import ReadView
from service.context import Context
from service.governance import (
    GovernanceWorker,
    read_audit,
    run_admission,
    run_pass,
    run_quarantine_scan,
    run_review,
)

AUDIT = {"method": "admit", "op": "admin", "holder": "tester", "context": "c"}


def tx(ctx: Context, text: str) -> None:
    assert ctx.commit(f"(context-tx (base-version {ctx.version()}) {text})").committed


def candidates(ctx: Context) -> None:
    tx(ctx, "(derive fine (deploy region cn-shanghai))")
    tx(ctx, "(envelope fine (trust candidate))")
    tx(ctx, "(derive risky (drop table users))")
    tx(ctx, "(envelope risky (trust candidate) (risk high))")
    tx(ctx, '(derive leak (db "password=hunter22"))')
    tx(ctx, "(envelope leak (trust candidate))")


def contradicted(ctx: Context) -> None:
    tx(ctx, "(derive old-fact (region cn-beijing))")
    tx(ctx, "(derive new-fact (region cn-shanghai))")
    tx(ctx, "(relate new-fact contradicts old-fact)")


def audit(ctx: Context) -> list[dict[str, Any]]:
    return read_audit(ctx.backend, 0, 1000)  # type: ignore[arg-type]


def test_pending_is_a_read_only_dry_run(ctx: Context) -> None:
    candidates(ctx)
    contradicted(ctx)
    ctx.quarantine(ctx.find_low_quality())
    version, entries = ctx.version(), audit(ctx)
    items = {i["frame"]: i for i in ctx.backend.read(lambda v: pending(v))}
    assert ctx.version() == version and audit(ctx) == entries
    assert items["risky"]["awaits"] == "human" and items["risky"]["verdict"] == "hold"
    assert "high risk" in items["risky"]["reasons"][0]
    assert items["old-fact"]["trust"] == "quarantined" and items["old-fact"]["awaits"] == "human"
    assert items["old-fact"]["reasons"] == ["contradicted: new-fact contradicts old-fact"]
    assert items["fine"]["awaits"] == items["leak"]["awaits"] == "admission"
    assert (items["fine"]["verdict"], items["leak"]["verdict"]) == ("accept", "reject")
    assert "new-fact" not in items


def test_admission_commits_and_audits_in_one_write(ctx: Context) -> None:
    candidates(ctx)
    version = ctx.version()
    ds, committed = run_admission(ctx.backend, audit=AUDIT, now=1000.0)
    assert committed == version + 1 == ctx.version()
    assert {d.frame_id: d.verdict for d in ds} == {
        "fine": "accept",
        "risky": "hold",
        "leak": "reject",
    }
    (entry,) = audit(ctx)
    assert entry["holder"] == "tester" and entry["method"] == "admit" and entry["allowed"]
    assert entry["version"] == committed and entry["context"] == "c"
    assert [d["frame"] for d in entry["decisions"]] == ["fine", "leak"]
    # holds only: nothing changes, nothing is audited
    assert run_admission(ctx.backend, audit=AUDIT)[1] is None
    assert ctx.version() == committed and len(audit(ctx)) == 1


@pytest.mark.parametrize(
    "frame_id, error, code",
    [("nope", NotFound, "not_found"), ("plain", RequestError, "not_candidate")],
)
def test_admission_of_a_bad_frame_changes_nothing(
    ctx: Context, frame_id: str, error: type[Exception], code: str
) -> None:
    tx(ctx, "(derive plain (x))")
    version = ctx.version()
    with pytest.raises(error) as info:
        run_admission(ctx.backend, frame_id=frame_id, audit=AUDIT)
    assert getattr(info.value, "code", None) == code
    assert ctx.version() == version and audit(ctx) == []


def test_review_decides_and_audits(ctx: Context) -> None:
    candidates(ctx)
    d, version = run_review(
        ctx.backend, "risky", "reject", "alice", reason="never in prod", audit=AUDIT
    )
    assert d.reviewer == "human:alice" and version == ctx.version()
    f = ctx.frame("risky")
    assert f["envelope"]["trust"] == "rejected" and f["lifecycle"] == "retired"
    assert f["envelope"]["review_reasons"] == ["human review of a candidate frame", "never in prod"]
    assert audit(ctx)[-1]["decisions"] == [
        {"frame": "risky", "verdict": "reject", "reviewer": "human:alice"}
    ]


@pytest.mark.parametrize(
    "frame_id, decision, reviewer, code",
    [
        ("risky", "maybe", "alice", "bad_decision"),
        ("risky", "accept", "", "bad_reviewer"),
        ("risky", "accept", "a\nb", "bad_reviewer"),
        ("nope", "accept", "alice", "not_found"),
        ("plain", "accept", "alice", "not_reviewable"),
    ],
)
def test_bad_reviews_are_typed_and_change_nothing(
    ctx: Context, frame_id: str, decision: str, reviewer: str, code: str
) -> None:
    candidates(ctx)
    tx(ctx, "(derive plain (x))")
    version = ctx.version()
    with pytest.raises(RequestError) as info:
        run_review(ctx.backend, frame_id, decision, reviewer, audit=AUDIT)
    assert info.value.code == code
    assert ctx.version() == version and audit(ctx) == []


def test_quarantine_scan_and_bad_options(ctx: Context) -> None:
    contradicted(ctx)
    scan = run_quarantine_scan(ctx.backend, audit=AUDIT)
    assert [(f.frame_id, f.rule) for f in scan.findings] == [("old-fact", "contradicted")]
    assert scan.quarantined == ("old-fact",) and scan.version == ctx.version()
    assert ctx.frame("old-fact")["envelope"]["reviewed_by"] == "runtime:quarantine"
    assert audit(ctx)[-1]["decisions"][0]["verdict"] == "quarantine"
    with pytest.raises(OutOfRange):
        run_quarantine_scan(ctx.backend, unused_ticks=0)
    with pytest.raises(OutOfRange):
        run_quarantine_scan(ctx.backend, failed_uses=0)


def test_a_pass_admits_then_quarantines_and_spares_a_human_decision(ctx: Context) -> None:
    contradicted(ctx)
    tx(ctx, "(derive hint (x))")
    tx(ctx, "(envelope hint (trust candidate))")
    report = run_pass(ctx.backend, audit=AUDIT)
    assert report["quarantined"] == ["old-fact"] and len(report["versions"]) == 2
    assert report["decisions"][0]["frame"] == "hint"
    assert ctx.frame("old-fact")["envelope"]["reviewed_by"] == "runtime:governance-worker"
    ctx.review("old-fact", "accept", "carol")  # a human keeps it despite the contradiction
    version = ctx.version()
    assert run_pass(ctx.backend)["spared"] == ["old-fact"]
    scan = run_quarantine_scan(ctx.backend)  # reported, not acted on
    assert (scan.spared, scan.quarantined, scan.version) == (("old-fact",), (), None)
    assert ctx.version() == version


def wait_for(check: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "the worker did not act in time"
        time.sleep(0.01)


def test_the_embedded_worker_quarantines_unattended_and_survives_a_failing_pass(
    ctx: Context,
) -> None:
    class FailsOnce:
        name = "fails-once"
        failed = False

        def review(self, frame: Frame, view: ReadView) -> Decision:
            if not self.failed:
                self.failed = True
                raise ValueError("policy bug")
            return Decision(frame.id, "accept", ("fine",))

    tx(ctx, "(derive hint (x))")
    tx(ctx, "(envelope hint (trust candidate))")
    worker = GovernanceWorker(ctx, every=0.02, policy=FailsOnce())
    with worker:
        wait_for(lambda: worker.errors == 1)
        wait_for(lambda: ctx.frame("hint")["envelope"]["trust"] == "accepted")
        contradicted(ctx)  # written by this thread while the worker runs
        wait_for(lambda: ctx.frame("old-fact")["envelope"]["trust"] == "quarantined")
    passes = worker.passes
    time.sleep(0.1)
    assert worker.passes == passes  # stopped
    errors = [e for e in audit(ctx) if e["outcome"] == "error"]
    assert len(errors) == 1 and "policy bug" in errors[0]["why"]
    assert errors[0]["holder"] == "runtime:governance-worker"
    assert "ValueError" in str(worker.last_error)


def test_worker_arguments_are_checked(ctx: Context) -> None:
    with pytest.raises(OutOfRange):
        GovernanceWorker(ctx, every=0)
    with pytest.raises(RequestError):
        GovernanceWorker(ctx, every="often")  # type: ignore[arg-type]
