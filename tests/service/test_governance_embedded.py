"""The embedded governance API (``Context.admit``, ``review``, ``quarantine``,
``quarantine_scan``, ``pending``, ``audit``) is the store-level one: every decision
is written with its audit entry, a refused call is typed and changes nothing.
Both backends (the ``make_ctx`` fixture)."""

from __future__ import annotations

from typing import Any

import pytest

from protocol.errors import NotFound, OutOfRange, RequestError
from protocol.governance import EMBEDDED, pending
from service.context import Context
from storage.memory import MemoryBackend


def tx(ctx: Context, text: str) -> None:
    assert ctx.commit(f"(context-tx (base-version {ctx.version()}) {text})").committed


@pytest.fixture
def scoped() -> Context:
    """A memory context with a name and a scope, so audit entries carry both."""
    ctx = Context(MemoryBackend(), name="ops", tenant="acme", project="payroll")
    tx(ctx, "(derive risky (drop table users))")
    tx(ctx, "(envelope risky (trust candidate) (risk high))")
    tx(ctx, "(derive plain (x))")
    return ctx


def everything(ctx: Context) -> tuple[Any, ...]:
    """The whole durable state a governance call could touch: meta, frames, log, audit."""

    def read(v: Any) -> tuple[Any, ...]:
        meta = v.meta()
        frames = sorted((f.to_record() for f in v.iter_frames()), key=lambda r: str(r["id"]))
        log = [v.txlog(n) for n in range(1, meta.version + 1)]
        return meta.version, frames, log

    return (*ctx.backend.read(read), ctx.audit())


def test_an_embedded_review_is_audited_in_the_same_write(scoped: Context) -> None:
    reply = scoped.review("risky", "accept", "alice", reason="checked with the DBA")
    d = reply.decision
    assert (d.verdict, d.reviewer) == ("accept", "human:alice")
    assert reply.version == scoped.version()
    env = scoped.frame("risky")["envelope"]
    assert env["trust"] == "accepted"
    assert env["review_reasons"] == ["human review of a candidate frame", "checked with the DBA"]
    (entry,) = scoped.audit()
    assert entry["seq"] == 1 and entry["allowed"] and entry["outcome"] == "allowed"
    assert (entry["holder"], entry["method"], entry["op"]) == (EMBEDDED, "review", "admin")
    assert (entry["context"], entry["tenant"]) == ("ops", "acme")
    assert entry["version"] == scoped.version()
    assert scoped.txlog(scoped.version())["kind"] == "governance"
    assert entry["decisions"] == [
        {"frame": "risky", "verdict": "accept", "reviewer": "human:alice"}
    ]


@pytest.mark.parametrize(
    "frame_id, decision, reviewer, error, code",
    [
        ("risky", "maybe", "alice", RequestError, "bad_decision"),
        ("risky", "Accept", "alice", RequestError, "bad_decision"),
        ("risky", "accept", "", RequestError, "bad_reviewer"),
        ("risky", "accept", "a\nb", RequestError, "bad_reviewer"),
        ("nope", "accept", "alice", NotFound, "not_found"),
        ("plain", "accept", "alice", RequestError, "not_reviewable"),
        ("gone", "reject", "alice", RequestError, "not_reviewable"),
    ],
)
def test_a_refused_embedded_review_is_typed_and_changes_nothing(
    make_ctx: Any, frame_id: str, decision: str, reviewer: str, error: type, code: str
) -> None:
    ctx: Context = make_ctx(window=0)
    tx(ctx, "(derive risky (drop table users))")
    tx(ctx, "(envelope risky (trust candidate) (risk high))")
    tx(ctx, "(derive plain (x))")
    tx(ctx, "(derive gone (y))")
    tx(ctx, "(envelope gone (trust candidate))")
    tx(ctx, "(retire gone)")
    ctx.observe("user_message", "next")
    ctx.claim()  # the retirement falls due: a retired candidate is not reviewed
    assert ctx.frame("gone")["lifecycle"] == "retired"
    before = everything(ctx)
    with pytest.raises(error) as info:
        ctx.review(frame_id, decision, reviewer)
    assert isinstance(info.value, RequestError) and info.value.code == code
    assert everything(ctx) == before


def test_a_review_reason_over_the_limit_is_refused(scoped: Context) -> None:
    before = everything(scoped)
    with pytest.raises(RequestError) as info:
        scoped.review("risky", "reject", "alice", reason="x" * 513)
    assert info.value.code == "bad_argument" and everything(scoped) == before


def test_admission_is_audited_unless_it_only_holds(scoped: Context) -> None:
    version = scoped.version()
    only_holds = scoped.admit()
    (held,) = only_holds.decisions
    assert held.verdict == "hold" and scoped.version() == version and scoped.audit() == []
    assert only_holds.version is None
    tx(scoped, "(derive fine (region cn-shanghai))")
    tx(scoped, "(envelope fine (trust candidate))")
    decisions = scoped.admit().decisions
    assert [(d.frame, d.verdict) for d in decisions] == [("risky", "hold"), ("fine", "accept")]
    (entry,) = scoped.audit()
    assert (entry["holder"], entry["method"], entry["version"]) == (EMBEDDED, "admit", version + 3)
    assert [x["frame"] for x in entry["decisions"]] == ["fine"]


@pytest.mark.parametrize(
    "frame_id, error, code",
    [("nope", NotFound, "not_found"), ("plain", RequestError, "not_candidate")],
)
def test_admission_of_one_frame_that_is_not_a_candidate_is_refused(
    scoped: Context, frame_id: str, error: type, code: str
) -> None:
    before = everything(scoped)
    with pytest.raises(error) as info:
        scoped.admit(frame_id)
    assert isinstance(info.value, RequestError) and info.value.code == code
    assert everything(scoped) == before


def test_quarantine_by_request_is_audited_and_skips_what_it_cannot_quarantine(
    scoped: Context,
) -> None:
    before = everything(scoped)
    assert scoped.quarantine(["risky", "nope"]) == []  # a candidate and an unknown id
    assert everything(scoped) == before
    with pytest.raises(RequestError) as info:
        scoped.quarantine([42])  # type: ignore[list-item]
    assert info.value.code == "bad_argument" and everything(scoped) == before
    assert scoped.quarantine(["plain"]) == ["plain"]
    env = scoped.frame("plain")["envelope"]
    assert (env["trust"], env["reviewed_by"]) == ("quarantined", "runtime:quarantine")
    assert env["review_reasons"] == ["quarantined by request"]
    (entry,) = scoped.audit()
    assert (entry["method"], entry["decisions"][0]["verdict"]) == ("quarantine", "quarantine")


def test_scan_spares_a_human_decision_and_an_explicit_quarantine_reopens_it(
    scoped: Context,
) -> None:
    tx(scoped, "(derive newer (y))")
    tx(scoped, "(relate newer contradicts plain)")
    assert [f.rule for f in scoped.find_low_quality()] == ["contradicted"]
    scan = scoped.quarantine_scan()
    assert scan.quarantined == ["plain"] and scan.version == scoped.version()
    scoped.review("plain", "accept", "carol")
    again = scoped.quarantine_scan()
    assert (again.quarantined, again.spared, again.version) == ([], ["plain"], None)
    assert scoped.quarantine(scoped.find_low_quality()) == ["plain"]  # a request is not spared
    assert [e["method"] for e in scoped.audit()] == ["quarantine_scan", "review", "quarantine"]
    with pytest.raises(OutOfRange):
        scoped.quarantine_scan(failed_uses=0)
    with pytest.raises(OutOfRange):
        scoped.find_low_quality(unused_ticks=0)


def test_pending_and_audit_pages(scoped: Context) -> None:
    doc = scoped.pending()
    assert doc["version"] == scoped.version()
    assert doc["items"] == scoped.backend.read(lambda v: pending(v))
    assert [i["frame"] for i in doc["items"]] == ["risky"]
    scoped.review("risky", "reject", "alice")
    scoped.quarantine(["plain"])
    assert [e["seq"] for e in scoped.audit(after=1, limit=1)] == [2]
    assert scoped.audit(after=2) == []
    with pytest.raises(OutOfRange):
        scoped.audit(limit=1001)
    with pytest.raises(RequestError):
        scoped.audit(after="1")  # type: ignore[arg-type]
