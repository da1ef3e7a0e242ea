"""Hostile input through the service every port calls (real LMDB files and the in-memory
store): a typed error, nothing written, and bounded work however small the input.

Before these fixes, on main: text holding a lone surrogate (which JSON's ``\\ud800`` escape
carries over HTTP) escaped as ``UnicodeEncodeError`` from the store or the word breaker
(HTTP answered 503 ``actor_error``, as if the actor had died); a search filter of
``since=10**400`` or ``kinds=[["x"]]`` escaped as ``OverflowError`` / ``TypeError``; and
1,024 ``set`` operations on one frame of 200,000 fields — 15 kB of text — held the
single writer for two minutes (each edit re-read every field of the body), where they
are now refused ``work_limit`` after counting the forms they would copy.
"""

from __future__ import annotations

from typing import Any

import pytest

from protocol.errors import OutOfRange, RequestError
from protocol.fields import MAX_EDIT_WORK
from service.context import Context

SURROGATE = "\ud800"


def _written(ctx: Context) -> tuple[int, int]:
    st = ctx.state()
    return st.version, len(st.events)


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.observe("tool_result", f"a{SURROGATE}b"),
        lambda c: c.observe("tool_result", "a", session=f"s{SURROGATE}"),
        lambda c: c.observe("tool_result", "a", event_id=f"ev:{SURROGATE}"),
        lambda c: c.observe_many([("tool_result", f"x{SURROGATE}", "main")]),
        lambda c: c.frame(f"a{SURROGATE}"),
        lambda c: c.read_event(f"@e{SURROGATE}", 0, 1),
        lambda c: c.recall({"frame_id": f"a{SURROGATE}"}),
    ],
    ids=["observe", "session", "event_id", "observe_many", "frame", "read_event", "recall"],
)
def test_text_with_a_lone_surrogate_is_a_bad_argument(ctx: Context, call: Any) -> None:
    ctx.observe("tool_result", "keep me")
    before = _written(ctx)
    with pytest.raises(RequestError) as caught:
        call(ctx)
    assert caught.value.code == "bad_argument" and "surrogate" in caught.value.message
    assert _written(ctx) == before


def test_a_search_with_a_lone_surrogate_is_a_bad_argument(tmp_path: Any) -> None:
    from service.store import open_context

    with open_context(tmp_path, "default", create=True) as ctx:
        ctx.observe("tool_result", "deployment region")
        before = _written(ctx)
        with pytest.raises(RequestError, match="surrogate"):
            ctx.search({"query": f"deployment {SURROGATE}"})
        with pytest.raises(RequestError, match="surrogate"):
            ctx.search({"query": "deployment", "kinds": [f"tool{SURROGATE}"]})
        assert _written(ctx) == before  # the search was not recorded


@pytest.mark.parametrize(
    ("args", "error", "words"),
    [
        ({"since": 10**400}, OutOfRange, "seconds since the epoch"),
        ({"until": -(10**30)}, OutOfRange, "seconds since the epoch"),
        ({"since": float("nan")}, OutOfRange, "nan"),
        ({"since": "yesterday"}, OutOfRange, "seconds since the epoch"),
        ({"kinds": [["tool_result"]]}, RequestError, "unknown kind (list)"),
        ({"kinds": 5}, RequestError, "unknown kind (int)"),
        ({"lifecycle": [{"a": 1}]}, RequestError, "unknown lifecycle (dict)"),
    ],
)
def test_malformed_search_filters_are_typed_errors(
    tmp_path: Any, args: dict[str, Any], error: type[Exception], words: str
) -> None:
    from service.store import open_context

    with open_context(tmp_path, "default", create=True) as ctx:
        ctx.observe("tool_result", "deployment region")
        before = _written(ctx)
        with pytest.raises(error) as caught:
            ctx.search({"query": "deployment", **args})
        assert words in str(caught.value)
        assert _written(ctx) == before


def _keyed(n: int) -> str:
    return "".join(f"(a{i} x)" for i in range(n))


def test_many_edits_of_a_huge_body_are_refused_after_counting_their_work(ctx: Context) -> None:
    fields = 40_000  # 1,024 edits of it copy 41 Mi forms: over the bound
    assert 1024 * fields > MAX_EDIT_WORK > 64 * fields
    made = ctx.commit(f"(context-tx (base-version 0) (derive f {_keyed(fields)}))")
    assert made.status == "committed"
    text = f"(context-tx (base-version {made.version}) " + "(set f (a1 y))" * 1024 + ")"
    assert len(text) < 16_000  # a small transaction
    receipt = ctx.commit(text)
    assert receipt.status == "rejected"
    (error,) = receipt.errors
    assert error.code == "work_limit" and error.op is not None and error.op < 1024
    frame = ctx.frame("f")
    assert frame.revision == 1 and ctx.state().version == made.version  # nothing written
    # Fewer edits of the same body stay well inside the bound and commit.
    fine = ctx.commit(f"(context-tx (base-version {made.version}) " + "(set f (a1 y))" * 64 + ")")
    assert fine.status == "committed" and ctx.frame("f").revision == 65


def test_edits_reusing_the_field_index_match_the_same_edits_one_by_one(
    make_ctx: Any,
) -> None:
    ops = [
        "(set f (a3 z))",
        "(unset f a1)",
        "(set f (a5 q))",
        "(append f (a2 w v))",
        "(unset f a0)",
        "(set f (new 1))",
        "(incr f (new 2))",
        "(remove f (a2 x))",
        "(unset f absent)",
        "(set f (a4 last))",
        "(unset f new)",
        "(append f (later 1))",
    ]
    together, one_by_one = make_ctx(), make_ctx()
    for ctx in (together, one_by_one):
        ctx.commit(f"(context-tx (base-version 0) (derive f {_keyed(8)}))")
    receipt = together.commit("(context-tx (base-version 1) " + " ".join(ops) + ")")
    assert receipt.status == "committed"
    for op in ops:
        version = one_by_one.state().version
        assert one_by_one.commit(f"(context-tx (base-version {version}) {op})").committed
    assert together.frame("f").body == one_by_one.frame("f").body
