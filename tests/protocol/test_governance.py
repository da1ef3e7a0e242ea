"""Memory governance (R41-R43): the envelope op, admission, review, valid time, quarantine.

Every context test runs on both backends through the ``ctx`` fixture.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given

from protocol.compiler import Compiler, compile_input
from protocol.errors import ParseError, RequestError
from protocol.governance import Decision, DefaultPolicy, find_low_quality, sensitive_findings
from protocol.state import Frame
from protocol.tx import ContextTx, Envelope
from protocol.txlang import parse_tx, print_tx
from protocol.txwire import tx_from_json, tx_from_msgpack, tx_to_dict, tx_to_json, tx_to_msgpack
from protocol.view import ReadView
from service.context import Context
from tests.protocol.strategies import transactions

ENVELOPE_TX = """(context-tx (base-version 3)
  (envelope release/procedure (kind procedural) (valid-from "2026-01-01")
    (valid-to "2026-12-31") (keys release build) (risk medium) (trust candidate)))"""


def tx(ctx: Context, text: str) -> dict[str, Any]:
    return ctx.commit(f"(context-tx (base-version {ctx.version()}) {text})").to_dict()


def inputs(ctx: Context, session: str) -> tuple[str, tuple[str, ...]]:
    c = ctx.backend.read(lambda v: compile_input(v, session=session))
    return str(c.messages[2]["content"]), c.frames_present


# -- the envelope op ------------------------------------------------------------


def test_envelope_round_trips_through_text_msgpack_and_json() -> None:
    t = parse_tx(ENVELOPE_TX)
    (op,) = t.ops
    assert isinstance(op, Envelope)
    assert (op.kind, op.keys, op.risk, op.trust) == (
        "procedural",
        ("release", "build"),
        "medium",
        "candidate",
    )
    assert op.valid_from == 1767225600.0 and op.valid_to == 1798675200.0
    assert parse_tx(print_tx(t)) == t
    assert tx_from_msgpack(tx_to_msgpack(t)) == t
    assert tx_from_json(tx_to_json(t)) == t
    assert tx_to_dict(t)["ops"][0]["keys"] == ["release", "build"]


@given(transactions)
def test_every_transaction_round_trips(t: ContextTx) -> None:
    assert parse_tx(print_tx(t)) == t
    assert tx_from_json(tx_to_json(t)) == t


@pytest.mark.parametrize(
    "bad",
    [
        "(envelope a (colour red))",
        "(envelope a (kind nonsense))",
        "(envelope a (risk extreme))",
        '(envelope a (valid-from "not a date"))',
        '(envelope a (valid-from "2026-02-01") (valid-to "2026-01-01"))',
        "(envelope a (kind semantic) (kind meta))",
        "(envelope)",
    ],
)
def test_bad_envelope_text_is_a_parse_error(bad: str) -> None:
    with pytest.raises(ParseError):
        parse_tx(f"(context-tx (base-version 0) {bad})")


def test_envelope_sets_fields_without_a_new_revision(ctx: Context) -> None:
    tx(ctx, "(derive release/procedure (steps build test ship))")
    before = ctx.frame("release/procedure")
    assert before["envelope"]["trust"] == "accepted"
    assert before["envelope"]["kind"] == "working"
    r = tx(ctx, "(envelope release/procedure (kind procedural) (keys release) (risk medium))")
    assert r["status"] == "committed"
    after = ctx.frame("release/procedure")
    assert after["revision"] == before["revision"]
    assert after["updated_version"] == r["version"]
    env = after["envelope"]
    assert (env["kind"], env["keys"], env["risk"]) == ("procedural", ["release"], "medium")
    assert [h["op"] for h in ctx.history("release/procedure")] == ["derive", "envelope"]
    assert tx(ctx, "(envelope missing (kind meta))")["errors"][0]["code"] == "unknown_ref"


def test_model_cannot_set_accepted_trust_or_reviewed_by(ctx: Context) -> None:
    tx(ctx, "(derive a (x 1))")
    tx(ctx, "(envelope a (trust candidate))")
    version = ctx.version()
    for op in ("(envelope a (trust accepted))", '(envelope a (reviewed-by "me"))'):
        r = tx(ctx, op)
        assert r["status"] == "rejected"
        assert r["errors"][0]["code"] == "not_permitted"
    assert ctx.version() == version
    assert ctx.frame("a")["envelope"]["trust"] == "candidate"


# -- candidates and admission (R42) -------------------------------------------------


def test_derives_from_unreviewed_sources_are_candidates(ctx: Context) -> None:
    recall = ctx.observe("recall_result", "recalled", session="s1")
    risky = ctx.observe("tool_result", "scraped page", session="s2", risky=True)
    plain = ctx.observe("tool_result", "clean", session="s1")
    tx(ctx, f"(derive r (from {recall.ref}) (x))")
    tx(ctx, f"(derive k (from {risky.ref}) (x))")
    tx(ctx, f"(derive p (from {plain.ref}) (x))")
    tx(ctx, "(derive q (from r) (y))")
    trust = {f: ctx.frame(f)["envelope"]["trust"] for f in "rkpq"}
    assert trust == {"r": "candidate", "k": "candidate", "p": "accepted", "q": "candidate"}
    assert ctx.frame("q")["envelope"]["session"] == "s1"


def test_candidates_stay_out_of_other_sessions_input(ctx: Context) -> None:
    e = ctx.observe("recall_result", "recalled", session="writer")
    ctx.observe("user_message", "hello", session="other")
    ctx.claim()
    tx(ctx, f"(derive cand (from {e.ref}) (note))")
    tx(ctx, "(derive shared (fact))")
    tx(ctx, "(relate shared mentions cand)")
    own_text, own = inputs(ctx, "writer")
    other_text, other = inputs(ctx, "other")
    assert "cand" in own and "frame cand r1 active [candidate]" in own_text
    assert "cand" not in other and "cand" not in other_text
    assert "shared" in other
    ctx.admit()
    assert "cand" in inputs(ctx, "other")[1]


def test_admission_accepts_a_clean_candidate(ctx: Context) -> None:
    tx(ctx, '(derive fact (deploy region "cn-shanghai"))')
    tx(ctx, "(envelope fact (trust candidate) (keys region))")
    version = ctx.version()
    (d,) = ctx.admit().decisions
    assert d.verdict == "accept" and d.reviewer == "policy:default-admission-v1"
    env = ctx.frame("fact")["envelope"]
    assert env["trust"] == "accepted" and env["reviewed_by"] == "policy:default-admission-v1"
    assert ctx.version() == version + 1
    assert ctx.txlog(version + 1)["kind"] == "governance"
    assert ctx.admit().decisions == []  # nothing left to review


@pytest.mark.parametrize(
    "body",
    [
        '(config (key "sk-abcdefghijklmnopqrstuvwx"))',
        "(creds AKIAABCDEFGHIJKLMNOP)",
        '(db "password=hunter22")',
        '(contact "alice@example.com")',
        '(card "4111 1111 1111 1111")',
        '(phone "+1 415 555 0100")',
    ],
)
def test_admission_rejects_secrets_and_personal_data(ctx: Context, body: str) -> None:
    tx(ctx, f"(derive leak {body})")
    tx(ctx, "(envelope leak (trust candidate))")
    (d,) = ctx.admit().decisions
    assert d.verdict == "reject"
    assert any("sensitive content" in r for r in d.reasons)
    f = ctx.frame("leak")
    assert f["envelope"]["trust"] == "rejected"
    assert f["lifecycle"] == "retired"  # retired, kept in history
    assert [h["op"] for h in ctx.history("leak")] == ["derive", "envelope", "reject"]


def test_sensitive_content_has_no_false_positive_on_dates_and_versions() -> None:
    assert sensitive_findings("(release 2026-01-01 v1.2.3 build 1234567)") == []
    assert sensitive_findings("4111 1111 1111 1112") == []  # fails Luhn


def test_high_risk_candidate_waits_for_a_human(ctx: Context) -> None:
    tx(ctx, "(derive prod-change (drop table users))")
    tx(ctx, "(envelope prod-change (trust candidate) (risk high))")
    version = ctx.version()
    (d,) = ctx.admit().decisions
    assert d.verdict == "hold" and "high risk" in d.reasons[0]
    assert ctx.version() == version  # a hold changes nothing
    assert ctx.frame("prod-change")["envelope"]["trust"] == "candidate"
    done = ctx.review("prod-change", "accept", "alice")
    assert done.decision.verdict == "accept"
    env = ctx.frame("prod-change")["envelope"]
    assert (env["trust"], env["reviewed_by"]) == ("accepted", "human:alice")
    with pytest.raises(RequestError) as info:
        ctx.review("prod-change", "reject", "bob")
    assert info.value.code == "not_reviewable"


def test_conflicting_key_and_scope_checks(make_ctx: Any) -> None:
    ctx = make_ctx()
    tx(ctx, "(derive region-a (region cn-shanghai))")
    tx(ctx, "(envelope region-a (keys region))")
    tx(ctx, "(derive region-b (region us-east))")
    tx(ctx, "(envelope region-b (keys region) (trust candidate))")
    tx(ctx, "(derive other-tenant (x))")
    tx(ctx, "(envelope other-tenant (tenant someone-else) (trust candidate))")
    decisions = {d.frame: d for d in ctx.admit().decisions}
    assert decisions["region-b"].verdict == "hold"
    assert "conflicts with accepted region-a" in decisions["region-b"].reasons[0]
    assert decisions["other-tenant"].verdict == "reject"


def test_policy_is_pluggable(ctx: Context) -> None:
    class Nay:
        name = "nay"

        def review(self, frame: Frame, view: ReadView) -> Decision:
            return Decision(frame.id, "reject", ("never",))

    tx(ctx, "(derive a (x))")
    tx(ctx, "(envelope a (trust candidate))")
    (d,) = ctx.acting(policy=Nay()).admit("a").decisions
    assert d.reviewer == "policy:nay"
    assert ctx.frame("a")["envelope"]["reviewed_by"] == "policy:nay"
    assert isinstance(DefaultPolicy().name, str)


# -- valid time ---------------------------------------------------------------------


def test_valid_time_is_not_system_time(ctx: Context) -> None:
    tx(ctx, "(derive rule-2025 (vat 0.19))")
    tx(ctx, '(envelope rule-2025 (valid-from "2025-01-01") (valid-to "2026-01-01"))')
    tx(ctx, "(derive rule-2026 (vat 0.20))")
    tx(ctx, '(envelope rule-2026 (valid-from "2026-01-01"))')
    tx(ctx, "(derive timeless (x))")
    ids = [f["id"] for f in ctx.frames_valid_at("2025-06-01")]
    assert ids == ["rule-2025", "timeless"]
    assert [f["id"] for f in ctx.frames_valid_at("2026-01-01")] == ["rule-2026", "timeless"]
    assert [f["id"] for f in ctx.frames_valid_at(1767225600)] == ["rule-2026", "timeless"]
    r = tx(ctx, '(envelope rule-2026 (valid-to "2020-01-01"))')
    assert r["errors"][0]["code"] == "bad_validity"
    with pytest.raises(RequestError):
        ctx.frames_valid_at("yesterday")


# -- quarantine (R43) -----------------------------------------------------------


def test_quarantine_of_a_contradicted_frame_until_review(ctx: Context) -> None:
    tx(ctx, "(derive old-fact (region cn-beijing))")
    tx(ctx, "(derive new-fact (region cn-shanghai))")
    tx(ctx, "(relate new-fact contradicts old-fact)")
    findings = ctx.find_low_quality()
    assert [(f.frame_id, f.rule) for f in findings] == [("old-fact", "contradicted")]
    assert ctx.quarantine(findings) == ["old-fact"]
    assert ctx.frame("old-fact")["envelope"]["trust"] == "quarantined"
    text, present = inputs(ctx, "main")
    assert "old-fact" not in present and "old-fact" not in text
    assert ctx.find_low_quality() == []
    ctx.review("old-fact", "accept", "carol")
    assert "old-fact" in inputs(ctx, "main")[1]


def test_quarantine_of_unused_and_failing_frames(ctx: Context) -> None:
    tx(ctx, "(derive used (x))")
    tx(ctx, "(derive unused (y))")
    tx(ctx, "(derive deploy-steps (steps a b))")
    tx(ctx, "(envelope deploy-steps (kind procedural))")
    for _ in range(3):
        ctx.observe("user_message", "go")
        ctx.claim()
    ctx.record_trace({"tick": 3, "frames_present": ["used", "deploy-steps"]})
    for outcome in ("ok", "failed", "failed", "failed"):
        ctx.record_trace({"tick": 3, "cited": ["deploy-steps"], "outcome": outcome})
    rules = {(f.frame_id, f.rule) for f in ctx.find_low_quality(unused_ticks=3)}
    assert rules == {("unused", "unused"), ("deploy-steps", "failing_procedure")}
    quarantined = ctx.quarantine([f for f in ctx.find_low_quality(unused_ticks=3)])
    assert sorted(quarantined) == ["deploy-steps", "unused"]
    present = inputs(ctx, "main")[1]
    assert "unused" not in present and "used" in present
    ctx.review("unused", "reject", "dave")
    f = ctx.frame("unused")
    assert (f["envelope"]["trust"], f["lifecycle"]) == ("rejected", "retired")


def test_warm_compiler_follows_governance_changes(ctx: Context) -> None:
    compiler = Compiler()
    tx(ctx, "(derive a (x))")
    first = ctx.backend.read(lambda v: compiler.compile(v, session="main"))
    assert "a" in first.frames_present
    ctx.quarantine(["a"])
    second = ctx.backend.read(lambda v: compiler.compile(v, session="main"))
    assert "a" not in second.frames_present


def test_old_records_load_with_default_envelope() -> None:
    rec = Frame("a", 1, (), ()).to_record()
    del rec["envelope"]
    f = Frame.from_record(rec)
    assert f.trust == "accepted" and f.kind == "working"
    assert find_low_quality  # imported for the pure check above
