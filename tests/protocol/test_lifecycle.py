"""Lifecycle rules R11–R20: windows, cancellation, stale finalization, causal protection, ticks."""

from __future__ import annotations

from collections.abc import Callable

from service.context import Context


def tx(ctx: Context, *ops: str, reason: str | None = None) -> dict[str, object]:
    head = f"(context-tx (base-version {ctx.version()})"
    if reason:
        head += f' (reason "{reason}")'
    return ctx.commit(head + " " + " ".join(ops) + ")").to_dict()


def advance(ctx: Context, ticks: int) -> list[str]:
    """Feed *ticks* batches of one tool result each; return every finalized frame id."""
    finalized: list[str] = []
    for i in range(ticks):
        ctx.observe("tool_result", f"batch {i}")
        finalized.extend(ctx.claim().finalized)
    return finalized


def test_eight_tick_window(ctx: Context) -> None:
    tx(ctx, "(derive notes (a 1))")
    advance(ctx, 100 - ctx.tick())
    assert ctx.tick() == 100
    r = tx(ctx, "(retire notes)", reason="no longer needed")
    assert r["retiring"] == [{"id": "notes", "due_tick": 108}]
    assert r["relief_now"]["tokens"] == 0  # type: ignore[index]
    assert r["relief_pending"]["frames"] == ["notes"]  # type: ignore[index]
    f = ctx.frame("notes")
    assert (f["lifecycle"], f["due_tick"], f["retire_reason"]) == (
        "retiring",
        108,
        "no longer needed",
    )
    assert advance(ctx, 7) == []
    assert ctx.frame("notes")["lifecycle"] == "retiring"
    version = ctx.version()
    assert advance(ctx, 1) == ["notes"]
    assert ctx.frame("notes")["lifecycle"] == "retired"
    # Finalization is a recorded runtime transaction.
    assert ctx.version() == version + 1
    log = ctx.txlog(ctx.version())
    assert log["kind"] == "runtime" and log["finalize"] == ["notes"]


def test_window_is_configurable_and_idle_time_does_not_count(
    make_ctx: Callable[..., Context],
) -> None:
    ctx = make_ctx(window=2)
    tx(ctx, "(derive notes (a 1))", "(retire notes)")
    assert ctx.frame("notes")["due_tick"] == 2
    for _ in range(5):  # claims with nothing waiting advance nothing
        assert ctx.claim().advanced is False
    assert ctx.frame("notes")["lifecycle"] == "retiring"
    assert advance(ctx, 2) == ["notes"]


def test_repeated_retire_keeps_the_deadline(ctx: Context) -> None:
    tx(ctx, "(derive notes (a 1))", "(retire notes)")
    advance(ctx, 3)
    r = tx(ctx, "(retire notes)")
    assert r["retiring"] == [{"id": "notes", "due_tick": 8}]
    assert ctx.frame("notes")["due_tick"] == 8
    assert advance(ctx, 5) == ["notes"]


def test_revise_restore_protect_cancel_the_request(ctx: Context) -> None:
    tx(ctx, "(derive a (x 1))", "(derive b (x 1))", "(derive c (x 1))")
    tx(ctx, "(retire a b c)")
    r = tx(ctx, "(revise a (x compact))", "(restore b)", "(protect c)")
    assert sorted(r["retirement_cancelled"]) == ["a", "b", "c"]  # type: ignore[arg-type]
    assert [ctx.frame(i)["lifecycle"] for i in "abc"] == ["active"] * 3
    assert ctx.frame("c")["protected"] is True
    assert advance(ctx, 10) == []  # the old deadlines do nothing
    rejected = tx(ctx, "(retire c)")
    assert rejected["status"] == "rejected"
    assert rejected["errors"] == [
        {
            "op": 0,
            "code": "protected",
            "message": "retire: frame c is protected; unprotect it first",
        }
    ]
    assert tx(ctx, "(unprotect c)", "(retire c)")["status"] == "committed"
    assert ctx.frame("c")["lifecycle"] == "retiring"


def test_stale_finalization_does_nothing(ctx: Context) -> None:
    tx(ctx, "(derive a (x 1))", "(retire a)")  # due at 8, generation 1
    advance(ctx, 2)
    tx(ctx, "(restore a)")
    advance(ctx, 1)
    tx(ctx, "(retire a)")  # a new request at tick 3: due at 11, generation 2
    assert advance(ctx, 5) == []  # tick 8: the first request is stale
    assert ctx.frame("a")["lifecycle"] == "retiring"
    assert advance(ctx, 3) == ["a"]  # tick 11


def test_finalization_checks_the_revision(ctx: Context) -> None:
    tx(ctx, "(derive a (x 1))", "(retire a)")
    tx(ctx, "(revise a (x 2))", "(retire a)")  # revised then marked again, same tick
    f = ctx.frame("a")
    assert (f["revision"], f["lifecycle"], f["due_tick"]) == (2, "retiring", 8)
    assert advance(ctx, 8) == ["a"]
    assert ctx.frame("a")["revision"] == 2


def test_restore_then_revise_a_retired_frame_in_one_transaction(ctx: Context) -> None:
    tx(
        ctx,
        "(derive old (x 1))",
        "(derive new (from old) (x 2))",
        "(relate new supersedes old)",
        "(retire old)",
    )
    assert ctx.frame("old")["lifecycle"] == "retired"
    rejected = tx(ctx, "(revise old (x 3))")
    assert rejected["errors"][0]["code"] == "retired_frame"  # type: ignore[index]
    r = tx(ctx, "(restore old)", "(revise old (x 3))")
    assert r["status"] == "committed"
    assert r["restored"] == ["old"]
    f = ctx.frame("old")
    assert (f["lifecycle"], f["revision"], f["body"]) == ("active", 2, "(x 3)")


def test_causal_protection_until_delivery(ctx: Context) -> None:
    request = ctx.observe("user_message", "please package the release")
    ctx.claim()
    r = tx(ctx, f"(retire {request.ref})")
    assert r["status"] == "rejected"
    assert r["errors"][0]["code"] == "causally_protected"  # type: ignore[index]
    assert ctx.event(request.ref)["lifecycle"] == "active"
    assert ctx.state()["sessions"][0]["pending_requests"] == [request.ref]
    ctx.deliver(request.ref)
    assert tx(ctx, f"(retire {request.ref})")["retired_now"] == [request.ref]


def test_one_tick_per_claimed_batch(ctx: Context) -> None:
    refs = [ctx.observe(k, "x").ref for k in ("user_message", "tool_result", "external")]
    result = ctx.claim()
    assert (result.tick, result.advanced, list(result.claimed)) == (1, True, refs)
    assert ctx.claim().tick == 1  # empty batch
    ctx.observe("recall_result", "recalled text")
    only_recall = ctx.claim()
    assert (only_recall.tick, only_recall.advanced) == (1, False)
    # Receipts never advance the tick.
    tx(ctx, "(derive a (x 1))")
    assert ctx.tick() == 1


def test_observation_retirement_is_immediate_and_references_still_resolve(ctx: Context) -> None:
    e = ctx.observe("tool_result", "log " * 1000)
    ctx.claim()
    tx(ctx, f"(retire {e.ref})")
    assert ctx.event(e.ref)["lifecycle"] == "retired"
    # A retired observation may still be cited as a source.
    assert tx(ctx, f"(derive summary (from {e.ref}) (lines 1000))")["status"] == "committed"
    assert ctx.frame("summary")["sources"] == [e.ref]
    assert tx(ctx, f"(restore {e.ref})")["restored"] == [e.ref]


def test_rejected_transaction_writes_nothing(ctx: Context) -> None:
    tx(ctx, "(derive a (x 1))")
    before = ctx.state()
    r = tx(ctx, "(revise a (x 2))", "(derive b (from a) (y 1))", "(relate b supports nowhere)")
    assert r["status"] == "rejected"
    assert r["errors"] == [{"op": 2, "code": "unknown_ref", "message": "relate: no frame nowhere"}]
    assert r["version"] == before["version"]
    assert ctx.state() == before
    assert ctx.frame("a")["revision"] == 1


def test_operation_errors_have_stable_codes(ctx: Context) -> None:
    tx(ctx, "(derive a (x 1))")
    cases = {
        "(derive a (x 2))": "frame_exists",
        "(derive b (from @e99) (x 1))": "unknown_ref",
        "(revise a (from a) (x 1))": "self_source",
        "(unrelate a supports a)": "unknown_relation",
        "(retire ghost)": "unknown_ref",
        "(restore @e7)": "unknown_ref",
        "(protect ghost)": "unknown_ref",
    }
    for op, code in cases.items():
        r = tx(ctx, op)
        assert r["status"] == "rejected", op
        assert r["errors"][0]["code"] == code, op  # type: ignore[index]
    assert ctx.version() == 1
