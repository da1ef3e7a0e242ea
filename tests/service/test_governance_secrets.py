"""Secrets don't hide in accepted memory: the quarantine scan and the unattended pass check
accepted frames and observations against the sensitive-content rules, locate what they find,
quarantine the frames, report the observations (``forget`` is the remedy) and audit it all,
masked. On both stores (the ``ctx`` fixture runs on LMDB files and in memory)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from protocol.errors import OutOfRange
from protocol.governance import audit_template
from service.context import Context
from service.governance import GovernanceWorker, run_pass, run_quarantine_scan

KEY = "AKIAIOSFODNN7EXAMPLE"
SECRET = "IOSFODNN7EXAMPLE"  # the part of KEY no report may show
TOKEN = "ghp_" + "a1B2c3D4e5" * 3 + "f6G7h8"
AUDIT = audit_template("quarantine_scan", holder="test:secrets", context="default")


def tx(ctx: Context, text: str) -> None:
    assert ctx.commit(f"(context-tx (base-version {ctx.version()}) {text})").committed


def sensitive_entries(ctx: Context) -> list[dict[str, Any]]:
    return [e for e in ctx.audit() if e["outcome"] == "flagged"]


def no_secret(*docs: Any) -> None:
    text = json.dumps(docs, default=str)
    assert SECRET not in text and TOKEN[4:] not in text


def test_a_key_in_an_accepted_frame_is_located_quarantined_and_audited(ctx: Context) -> None:
    tx(ctx, f'(derive deploy-creds (aws "{KEY}") (region cn-shanghai))')
    tx(ctx, "(derive release (goal ship-v1))")
    assert ctx.frame("deploy-creds")["envelope"]["trust"] == "accepted"  # never reviewed
    scan = ctx.quarantine_scan()
    assert scan.quarantined == ["deploy-creds"]
    (finding,) = [f for f in scan.findings if f.frame == "deploy-creds"]
    assert finding.rule == "sensitive_content"
    (s,) = scan.sensitive
    body = str(ctx.frame("deploy-creds")["body"])
    assert (s.record, s.id, s.ref, s.field, s.rule) == (
        "frame",
        "deploy-creds",
        "deploy-creds",
        "body",
        "aws_access_key",
    )
    assert body[s.start : s.end] == KEY  # the offsets point into the printed body
    assert s.action == "quarantined" and "AKIA****" in s.excerpt
    assert "forget deploy-creds" in s.remedy
    env = ctx.frame("deploy-creds")["envelope"]
    assert env["trust"] == "quarantined"
    assert env["review_reasons"] == [
        f"sensitive_content: AWS access key id in body at {s.start}-{s.end}"
    ]
    assert ctx.frame("release")["envelope"]["trust"] == "accepted"
    (entry,) = sensitive_entries(ctx)
    assert entry["allowed"] and entry["method"] == "quarantine_scan"
    assert entry["sensitive_total"] == 1 and entry["sensitive"][0]["ref"] == "deploy-creds"
    assert "deploy-creds" in entry["why"]
    no_secret(
        scan.to_dict(), ctx.audit(), ctx.txlog(ctx.version()), ctx.frame("deploy-creds")["envelope"]
    )


def test_a_token_in_a_tool_result_is_reported_with_forget_as_the_remedy(ctx: Context) -> None:
    report = ctx.observe("tool_result", f"$ env\nHOME=/root\nGITHUB_TOKEN={TOKEN}\nPATH=/bin")
    ctx.claim()
    version = ctx.version()
    scan = ctx.quarantine_scan()
    assert scan.quarantined == [] and scan.version is None and ctx.version() == version
    (s,) = scan.sensitive
    assert (s.record, s.ref, s.field, s.action) == ("observation", report.ref, "text", "reported")
    assert s.id == report.id
    text = ctx.read_event(report.ref, s.start, s.end - s.start)["text"]
    assert TOKEN in text  # the offsets locate the span in the observation's text
    assert s.rule in ("key_value", "github_token")
    assert f"forget {report.ref}" in s.remedy and "cannot be quarantined" in s.remedy
    (entry,) = sensitive_entries(ctx)
    assert report.ref in entry["why"] and entry["sensitive"][0]["ref"] == report.ref
    no_secret(scan.to_dict(), ctx.audit())


def test_a_clean_context_is_scanned_without_a_write_or_an_audit_entry(ctx: Context) -> None:
    ctx.observe("user_message", "ship v1 once tests pass; build 3f786850e387550fdab836ed7e6d")
    tx(ctx, "(derive release (goal ship-v1) (run 123e4567-e89b-12d3-a456-426614174000))")
    version = ctx.version()
    scan = run_quarantine_scan(ctx.backend, audit=AUDIT)
    assert scan.sensitive == () and scan.quarantined == () and ctx.version() == version
    assert ctx.audit() == []


def test_a_human_accepted_frame_with_a_secret_is_spared_and_reported(ctx: Context) -> None:
    tx(ctx, f'(derive creds (key "{KEY}"))')
    assert ctx.quarantine_scan().quarantined == ["creds"]
    ctx.review("creds", "accept", "alice", reason="a test key, not live")
    again = ctx.quarantine_scan()
    assert again.quarantined == [] and again.spared == ["creds"]
    (s,) = again.sensitive
    assert s.action == "spared" and "human accepted" in s.remedy
    assert ctx.frame("creds")["envelope"]["trust"] == "accepted"


def test_keys_and_protected_or_retiring_frames_are_checked_candidates_left_to_admission(
    ctx: Context,
) -> None:
    tx(ctx, "(derive pinned (note ok)) (envelope pinned (keys ops@example.com))")
    tx(ctx, '(derive held (db "password=hunter22")) (protect held)')
    tx(ctx, '(derive maybe (db "password=hunter23")) (envelope maybe (trust candidate))')
    scan = ctx.quarantine_scan()
    assert sorted(scan.quarantined) == ["held", "pinned"]
    assert {(s.ref, s.field) for s in scan.sensitive} == {("pinned", "keys"), ("held", "body")}
    assert ctx.frame("maybe")["envelope"]["trust"] == "candidate"  # admission rejects it


def test_bad_scan_options_change_nothing(ctx: Context) -> None:
    tx(ctx, f'(derive creds (key "{KEY}"))')
    version = ctx.version()
    for kw in ({"unused_ticks": 0}, {"failed_uses": 0}, {"failed_uses": 10_000}):
        with pytest.raises(OutOfRange):
            ctx.quarantine_scan(**kw)  # type: ignore[arg-type]
    assert ctx.version() == version and ctx.audit() == []
    assert ctx.frame("creds")["envelope"]["trust"] == "accepted"


def test_the_incremental_pass_checks_new_frames_and_recent_observations_once(
    ctx: Context,
) -> None:
    old = ctx.observe("tool_result", f"aws configure: {KEY}")
    worker = GovernanceWorker(ctx, every=60)
    first = worker.run_once()  # a full pass: every observation
    assert first["full"] and [s["ref"] for s in first["sensitive"]] == [old.ref]
    assert worker.cursor is not None and worker.cursor.events == 1
    quiet = worker.run_once()
    assert not quiet["full"] and quiet["sensitive"] == []  # reported once, not every pass
    new = ctx.observe("tool_result", f"token {TOKEN}")
    tx(ctx, f'(derive leaked (token "{TOKEN}"))')
    later = worker.run_once()
    assert not later["full"]
    assert sorted((s["record"], s["ref"]) for s in later["sensitive"]) == [
        ("frame", "leaked"),
        ("observation", new.ref),
    ]
    assert later["quarantined"] == ["leaked"]
    assert ctx.frame("leaked")["envelope"]["reviewed_by"] == "runtime:governance-worker"
    entries = sensitive_entries(ctx)
    assert [e["method"] for e in entries] == ["governance_pass", "governance_pass"]
    assert [e["sensitive_total"] for e in entries] == [1, 2]
    no_secret(first, later, ctx.audit())
    # An explicit scan is a full one: it reports the observations again.
    full = ctx.quarantine_scan()
    assert sorted(s.ref for s in full.sensitive) == sorted([old.ref, new.ref])


def test_a_pass_without_a_cursor_and_one_from_it_agree_on_what_they_quarantine(
    make_ctx: Any,
) -> None:
    inc, full = make_ctx(), make_ctx()
    cursor = None
    for n, body in enumerate(['(db "password=hunter22")', "(fine)", f'(k "{KEY}")']):
        for c in (inc, full):
            tx(c, f"(derive f{n} {body})")
            c.observe("tool_result", f"step {n}: {body}")
        a = run_pass(inc.backend, cursor=cursor)
        b = run_pass(full.backend)
        cursor = a["cursor"]
        assert a["quarantined"] == b["quarantined"]
        assert {s["ref"] for s in a["sensitive"]} <= {s["ref"] for s in b["sensitive"]}
    assert inc.frame("f2")["envelope"] == full.frame("f2")["envelope"]
