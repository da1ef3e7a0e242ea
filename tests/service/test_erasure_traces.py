"""Erasure leaves no readable trace in the audit log: a scan's audit entry names the rule, the
record and the offsets of what it found, and no text of the record at all (on main before this
change each excerpt kept 16 characters on each side of the match, unmasked, in a log that
``forget`` does not rewrite). On both stores (the ``ctx`` fixture)."""

from __future__ import annotations

import json

from service.context import Context

PHONE_CONTEXT = "call Wang Lei at home"
EMAIL = "wang.lei@example-corp.cn"


def test_audit_excerpts_hold_no_text_of_the_record(ctx: Context) -> None:
    event = ctx.observe("tool_result", f"{PHONE_CONTEXT} +86 138 0013 8000 or {EMAIL} today")
    scan = ctx.quarantine_scan()
    assert {s.rule for s in scan.sensitive if s.ref == event.ref} >= {"phone", "email"}
    ctx.forget(event.ref, reason="personal data", by="dpo")
    logged = json.dumps([e for e in ctx.audit() if e["outcome"] == "flagged"])
    assert "sensitive" in logged and event.ref in logged
    for piece in ("Wang Lei", "at home", "+86", "0013 8000", "wang.lei", "example-corp", "today"):
        assert piece not in logged, piece


def test_the_tombstone_digest_is_keyed_and_the_key_can_be_destroyed(ctx: Context) -> None:
    import hashlib

    from protocol.forget import content_digest
    from service.forget import destroy_erasure_key, erasure_key_of

    phone = "+86 138 0013 8000"
    event = ctx.observe("user_message", phone)
    report = ctx.forget(event.ref, reason="personal data", by="dpo")
    plain = hashlib.sha256(phone.encode()).hexdigest()
    everything = json.dumps([report.digest, ctx.read_event(event.ref), ctx.audit()], default=str)
    assert plain not in everything  # the guessable digest is written nowhere
    assert report.digest.startswith("hmac-sha256:")
    key = erasure_key_of(ctx.meta())
    assert report.digest == content_digest(key, phone)  # the key holder can prove it
    assert report.digest != content_digest(key, "+86 138 0013 8001")
    assert destroy_erasure_key(ctx.backend) and not destroy_erasure_key(ctx.backend)
    assert content_digest(erasure_key_of(ctx.meta()), phone) != report.digest  # gone for good
