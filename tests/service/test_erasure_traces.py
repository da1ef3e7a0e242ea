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
