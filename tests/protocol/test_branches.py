"""The pure rules of branches (protocol/branches.py): three-way classification part by part,
the merged frame, the plan's operations and the merge base."""

from __future__ import annotations

import pytest

from protocol.branches import (
    BODY,
    EXISTS,
    classify,
    lineage,
    merge_frames,
    plan_ops,
    relation_changes,
)
from protocol.errors import RequestError
from protocol.forms import Symbol
from protocol.state import RETIRING, Frame, Meta
from protocol.tx import MAX_OPS, Derive, Relate, Retire, Revise, SetField
from protocol.txlang import parse_tx


def frame(
    body: str, fid: str = "p", *, lifecycle: str = "active", sources: tuple[str, ...] = ()
) -> Frame:
    ops = parse_tx(f"(context-tx (base-version 0) (derive {fid} {body}))").ops
    assert isinstance(ops[0], Derive)
    return Frame(fid, 1, ops[0].body, sources, lifecycle=lifecycle)


BASE = frame("(status draft) (owner ann)")


def test_one_sided_changes_and_agreement() -> None:
    assert classify("p", BASE, BASE, BASE) is None
    same = frame("(status ready) (owner ann)")
    assert classify("p", BASE, same, same) is None  # both made the same change
    theirs = classify("p", BASE, BASE, same)
    assert theirs is not None and (theirs.status, theirs.change) == ("changed", "changed")
    ours = classify("p", BASE, same, BASE)
    assert ours is not None and (ours.status, ours.change) == ("behind", "changed")
    added = classify("p", None, None, BASE)
    assert added is not None and added.status == "added"
    retired = classify("p", BASE, BASE, frame("(status draft) (owner ann)", lifecycle=RETIRING))
    assert retired is not None and retired.status == "retired"


def test_fields_both_sides_changed() -> None:
    ours = frame("(status draft) (owner bo)")
    theirs = frame("(status ready) (owner ann) (due friday)")
    d = classify("p", BASE, ours, theirs)
    assert d is not None and d.status == "changed" and d.both and not d.conflicts
    merged = merge_frames(BASE, ours, theirs, "theirs")
    assert merged is not None
    assert merged.body == (
        (Symbol("status"), Symbol("ready")),
        (Symbol("owner"), Symbol("bo")),
        (Symbol("due"), Symbol("friday")),
    )
    clash = classify("p", BASE, frame("(status hold) (owner ann)"), theirs)
    assert clash is not None and clash.status == "conflict"
    assert [c.as_dict() for c in clash.conflicts] == [
        {"field": "status", "base": "draft", "ours": "hold", "theirs": "ready"}
    ]
    kept = merge_frames(BASE, frame("(status hold) (owner ann)"), theirs, "ours")
    assert kept is not None and kept.body[0] == (Symbol("status"), Symbol("hold"))
    assert kept.body[-1] == (Symbol("due"), Symbol("friday"))  # the other field still lands


def test_unkeyed_bodies_are_one_part_and_lifecycle_merges_apart() -> None:
    base, ours, theirs = frame('"a"'), frame('"b"'), frame('"c"')
    d = classify("p", base, ours, theirs)
    assert d is not None and [c.part for c in d.conflicts] == [BODY]
    gone = classify("p", base, None, theirs)
    assert gone is not None and gone.status == "conflict" and gone.conflicts[0].part == EXISTS
    retired_ours = frame('"a"', lifecycle=RETIRING)
    d = classify("p", base, retired_ours, theirs)
    assert d is not None and d.status == "changed" and d.both
    merged = merge_frames(base, retired_ours, theirs, "theirs")
    assert merged is not None and merged.lifecycle == RETIRING and merged.body == theirs.body


def test_plan_ops_field_edits_derives_first_and_dropped_sources() -> None:
    ours = frame("(status draft) (owner ann)")
    changed = frame("(status ready) (owner ann)", sources=("ev:" + "0" * 20, "idea"))
    new = frame("(use cache)", "idea", sources=("missing",))
    plan = plan_ops(
        [(ours, changed), (None, new)],
        exists={"p"}.__contains__,
        event_refs={"ev:" + "0" * 20: "@e7"},
        relations_added=[("idea", "refines", "p"), ("idea", "x", "nowhere")],
    )
    assert isinstance(plan.ops[0], Derive) and plan.ops[0].id == "idea"
    assert plan.ops[0].sources == ()
    assert isinstance(plan.ops[1], SetField) and plan.ops[1].sources == ("@e7", "idea")
    assert plan.ops[2] == Relate(subject="idea", label="refines", object="p")
    assert len(plan.ops) == 3 and plan.dropped_sources == [("idea", "missing")]
    unkeyed = plan_ops([(frame('"a"'), frame('"b"'))], exists={"p"}.__contains__, event_refs={})
    assert isinstance(unkeyed.ops[0], Revise)
    retiring = plan_ops(
        [(ours, frame("(status draft) (owner ann)", lifecycle=RETIRING))],
        exists={"p"}.__contains__,
        event_refs={},
    )
    assert retiring.ops == [Retire(refs=("p",))]


def test_a_large_plan_is_cut_into_transactions_of_the_language_limit() -> None:
    pairs = [(None, frame("(n 1)", f"f{i}")) for i in range(MAX_OPS + 5)]
    txs = plan_ops(pairs, exists=set().__contains__, event_refs={}).transactions(10, "merge alt")
    assert [len(t.ops) for t in txs] == [MAX_OPS, 5]
    assert [t.base_version for t in txs] == [10, 11]


def test_relation_changes_are_a_union() -> None:
    base = {("a", "x", "b"), ("a", "y", "b")}
    ours = {("a", "x", "b"), ("c", "z", "d")}
    theirs = {("a", "y", "b"), ("e", "w", "f")}
    added, removed, ours_added, ours_removed = relation_changes(base, ours, theirs)
    assert added == [("e", "w", "f")] and removed == [("a", "x", "b")]
    assert ours_added == [("c", "z", "d")] and ours_removed == [("a", "y", "b")]


def test_the_merge_base_from_fork_and_merge_records() -> None:
    fork = Meta(branches={"fork": {"origin": "main", "version": 4}})
    lin = lineage("main", Meta(), "alt", fork)
    assert (lin.held_by, lin.base, lin.via) == ("source", 4, "fork")
    back = lineage("alt", fork, "main", Meta())
    assert (back.held_by, back.base) == ("target", 4)
    merged = Meta(branches={"merged": {"alt": {"source_version": 9, "version": 12}}})
    lin = lineage("main", merged, "alt", fork)
    assert (lin.held_by, lin.base, lin.ours_since, lin.theirs_since) == ("source", 9, 12, 9)
    with pytest.raises(RequestError) as err:
        lineage("main", Meta(), "other", Meta())
    assert err.value.code == "no_common_base"
