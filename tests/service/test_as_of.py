"""As-of reads of a frame and the write history (R29): separate from the current graph."""

from __future__ import annotations

import pytest

from protocol.errors import NotFound, OutOfRange
from service.context import Context


def test_frame_as_of_each_version(ctx: Context) -> None:
    ctx.commit('(context-tx (base-version 0) (derive case (layout single) (test "npm test")))')
    ctx.commit("(context-tx (base-version 1) (derive other (x 1)))")
    ctx.commit("(context-tx (base-version 2) (revise case (layout workspace)))")
    ctx.commit("(context-tx (base-version 3) (retire case))")
    assert ctx.frame_at("case", 1)["body"] == '(layout single) (test "npm test")'
    assert ctx.frame_at("case", 2)["revision"] == 1  # unchanged by version 2
    assert ctx.frame_at("case", 3)["body"] == "(layout workspace)"
    assert ctx.frame_at("case", 3)["lifecycle"] == "active"
    assert ctx.frame_at("case", 4)["lifecycle"] == "retiring"
    with pytest.raises(NotFound):
        ctx.frame_at("other", 1)  # did not exist yet
    with pytest.raises(OutOfRange):
        ctx.frame_at("case", 9)
    # The history lists the same writes with the bodies they wrote.
    writes = ctx.history("case")
    assert [(w["version"], w["op"]) for w in writes] == [
        (1, "derive"),
        (3, "revise"),
        (4, "lifecycle"),
    ]
    for w in writes:
        if "body" in w:
            assert ctx.frame_at("case", w["version"])["body"] == w["body"]


def test_cited_by_index_follows_derive_and_revise(ctx: Context) -> None:
    e = ctx.observe("tool_result", "log")
    ctx.commit(
        f"(context-tx (base-version 0) (derive a (from {e.ref}) (x)) (derive b (from a) (y)))"
    )
    ctx.commit("(context-tx (base-version 1) (derive c (x)) (revise c (from a b) (z)))")
    event_id = ctx.event(e.ref)["id"]
    cited = ctx.backend.read(lambda v: (v.cited_by("a"), v.cited_by("b"), v.cited_by(event_id)))
    assert cited == (["b", "c"], ["c"], ["a"])
