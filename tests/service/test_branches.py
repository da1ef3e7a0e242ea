"""Branches of memory through the service: diff, merge, pick, tags, as-of reads, revert.

Property tests run random edits on both sides of a fork (in-memory stores, the same
``Context`` code as LMDB); the examples run on real LMDB stores of one directory, the
way ``morphz fork`` makes them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.branches import same_frame
from protocol.errors import NotFound, OutOfRange, RequestError
from service.branches import merge_contexts
from service.context import Context
from service.diffs import diff_contexts
from service.store import Store
from storage.memory import MemoryBackend
from tests.examples import examples

FRAMES = ["a", "b", "c"]
FIELDS = ["f", "g"]


def seeded() -> tuple[Context, Context]:
    """A context of three keyed frames and a relation, and a fork of it."""
    main = Context(MemoryBackend(), name="main")
    e = main.observe("tool_result", "seed")
    main.claim()
    main.commit(
        f"(context-tx (base-version 0) (derive a (from {e.ref}) (f 0) (g 0))"
        " (derive b (f 0) (g 0)) (derive c (f 0) (g 0)) (relate a needs b))"
    )
    return main, main.fork(MemoryBackend())


edit = st.one_of(
    st.tuples(st.just("set"), st.sampled_from(FRAMES), st.sampled_from(FIELDS), st.integers(1, 3)),
    st.tuples(st.just("retire"), st.sampled_from(FRAMES)),
    st.tuples(st.just("derive"), st.sampled_from(["n1", "n2"]), st.integers(1, 3)),
    st.tuples(st.just("relate"), st.sampled_from(FRAMES), st.sampled_from(FRAMES)),
    st.tuples(st.just("unrelate")),
    st.tuples(st.just("observe"), st.integers(0, 3)),
)


def apply_edits(ctx: Context, edits: list[tuple[Any, ...]]) -> None:
    """Each edit as one transaction; one the engine refuses (a retired frame …) is skipped."""
    for ed in edits:
        v = ctx.version()
        if ed[0] == "set":
            op = f"(set {ed[1]} ({ed[2]} {ed[3]}))"
        elif ed[0] == "retire":
            op = f"(retire {ed[1]})"
        elif ed[0] == "derive":
            op = f"(derive {ed[1]} (from a) (f {ed[2]}))"
        elif ed[0] == "relate":
            op = f"(relate {ed[1]} sees {ed[2]})"
        elif ed[0] == "unrelate":
            op = "(unrelate a needs b)"
        else:
            e = ctx.observe("tool_result", f"note {ed[1]}")
            op = f"(derive obs-{ed[1]}-{v} (from {e.ref}) (f 1))"
        ctx.commit(f"(context-tx (base-version {v}) {op})")


def picture(ctx: Context) -> tuple[dict[str, Any], list[Any]]:
    """What a merge may change: each frame's body, liveness and protection; the relations."""
    state = ctx.backend.read(
        lambda v: ({f.id: f for f in v.iter_frames()}, sorted(v.iter_relations()))
    )
    frames = {
        k: (" ".join(map(str, f.body)), f.lifecycle == "active", f.protected)
        for k, f in state[0].items()
    }
    return frames, state[1]


side_edits = st.lists(edit, max_size=5)
SETTINGS = settings(
    max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@SETTINGS
@given(side_edits)
def test_merging_an_unchanged_fork_is_a_no_op(ours: list[tuple[Any, ...]]) -> None:
    main, fork = seeded()
    apply_edits(main, ours)
    before, version = picture(main), main.version()
    reply = merge_contexts(main, fork)
    assert reply["status"] == "nothing" and reply["applied"] == []
    assert all(f["status"] == "behind" for f in reply["frames"])
    assert picture(main) == before and main.version() == version


@SETTINGS
@given(side_edits, side_edits, st.sampled_from(["ours", "theirs"]))
def test_merging_twice_applies_nothing_the_second_time(
    ours: list[tuple[Any, ...]], theirs: list[tuple[Any, ...]], strategy: Any
) -> None:
    main, fork = seeded()
    apply_edits(main, ours)
    apply_edits(fork, theirs)
    first = merge_contexts(main, fork, strategy=strategy)
    assert first["status"] in ("merged", "nothing"), first
    after, version = picture(main), main.version()
    second = merge_contexts(main, fork, strategy=strategy)
    assert second["status"] == "nothing" and second["applied"] == [] and second["copied"] == []
    assert picture(main) == after and main.version() == version


@SETTINGS
@given(side_edits)
def test_a_change_made_on_one_side_only_is_always_applied(theirs: list[tuple[Any, ...]]) -> None:
    main, fork = seeded()
    apply_edits(fork, theirs)
    reply = merge_contexts(main, fork)
    assert reply["status"] in ("merged", "nothing") and not reply["unresolved"]
    assert picture(main) == picture(fork)
    ids = main.backend.read(lambda v: {e.id for e in v.iter_events()})
    assert ids == fork.backend.read(lambda v: {e.id for e in v.iter_events()})


@SETTINGS
@given(side_edits, side_edits)
def test_a_conflict_is_never_resolved_silently_under_fail(
    ours: list[tuple[Any, ...]], theirs: list[tuple[Any, ...]]
) -> None:
    main, fork = seeded()
    apply_edits(main, ours)
    apply_edits(fork, theirs)
    before, version = picture(main), main.version()
    events = main.backend.read(lambda v: v.meta().next_seq)
    reply = merge_contexts(main, fork)
    conflicts = [f["id"] for f in reply["frames"] if f["status"] == "conflict"]
    if conflicts:
        assert reply["status"] == "refused" and reply["unresolved"] == conflicts
        assert picture(main) == before and main.version() == version
        assert main.backend.read(lambda v: v.meta().next_seq) == events
    else:
        assert reply["status"] in ("merged", "nothing")


MIRROR = {"added": "behind", "changed": "behind", "retired": "behind"}


@SETTINGS
@given(side_edits, side_edits)
def test_diff_a_b_and_diff_b_a_mirror_each_other(
    ours: list[tuple[Any, ...]], theirs: list[tuple[Any, ...]]
) -> None:
    main, fork = seeded()
    apply_edits(main, ours)
    apply_edits(fork, theirs)
    ab = {f["id"]: f for f in diff_contexts(main, fork)["frames"]}
    ba = {f["id"]: f for f in diff_contexts(fork, main)["frames"]}
    assert set(ab) == set(ba)
    for fid, x in ab.items():
        y = ba[fid]
        assert (x["ours"], x["theirs"], x["base"]) == (y["theirs"], y["ours"], y["base"])
        if x["status"] == "behind":
            assert y["status"] == x["change"] or (x["change"] == "removed")
        elif x["status"] in MIRROR and not x.get("both"):
            assert y["status"] == "behind" and y["change"] == x["change"]
        else:
            assert y["status"] == x["status"] and y.get("both") == x.get("both")
    rab, rba = diff_contexts(main, fork)["relations"], diff_contexts(fork, main)["relations"]
    assert (rab["added"], rab["removed"]) == (rba["ours_added"], rba["ours_removed"])


# -- examples on LMDB stores ----------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / "store")
    main = s.open("main")
    e = main.observe("tool_result", "the plan was reviewed")
    main.claim()
    main.commit(
        f"(context-tx (base-version 0) (derive plan (from {e.ref}) (status draft) (owner ann))"
        ' (derive notes "free text"))'
    )
    main.close()
    s.fork("main", "alt")
    return s


def test_a_conflict_is_refused_then_resolved_and_history_shows_it(store: Store) -> None:
    alt = store.open("alt")
    alt.commit('(context-tx (base-version 1) (set plan (status ready)) (revise notes "alt"))')
    alt.close()
    main = store.open("main")
    main.commit("(context-tx (base-version 1) (set plan (status blocked)) (set plan (owner bo)))")
    diff = main.diff("alt")
    by_id = {f["id"]: f for f in diff["frames"]}
    assert by_id["plan"]["status"] == "conflict"
    assert by_id["plan"]["fields"] == [
        {"field": "status", "base": "draft", "ours": "blocked", "theirs": "ready"}
    ]
    assert by_id["notes"]["status"] == "changed"
    refused = main.merge("alt")
    assert refused["status"] == "refused" and refused["unresolved"] == ["plan"]
    assert main.version() == 2
    dry = main.merge("alt", dry_run=True, resolutions={"plan": "theirs"})
    assert dry["status"] == "dry_run" and dry["versions"] == [3] and main.version() == 2
    done = main.merge("alt", resolutions={"plan": "theirs"})
    assert done["status"] == "merged" and done["applied"] == ["notes", "plan"]
    assert main.frame("plan")["body"] == "(status ready) (owner bo)"
    assert main.frame("notes")["body"] == '"alt"'
    record = main.txlog(3)["merge"]
    assert (
        record["source"] == "alt" and record["source_version"] == 2 and record["by"] == "embedded"
    )
    assert sorted({r["version"] for r in main.frame_history("plan")}) == [1, 2, 3]
    assert any(a["method"] == "merge" and a["source"] == "alt" for a in main.audit())
    assert main.merge("alt")["status"] == "nothing"
    main.close()


def test_pick_by_frames_and_by_version_range(store: Store) -> None:
    alt = store.open("alt")
    e = alt.observe("tool_result", "found a faster path")
    alt.claim()
    alt.commit(f"(context-tx (base-version 1) (derive fast (from {e.ref}) (speed 2)))")
    alt.commit('(context-tx (base-version 2) (revise notes "rewritten"))')
    alt.close()
    main = store.open("main")
    picked = main.pick("alt", frames=["fast"])
    assert picked["applied"] == ["fast"] and len(picked["copied"]) == 1
    assert main.read_event(main.frame("fast")["sources"][0]).text == "found a faster path"
    assert main.frame("notes")["body"] == '"free text"'
    ranged = main.pick("alt", from_version=3, to_version=3)
    assert ranged["applied"] == ["notes"] and main.frame("notes")["body"] == '"rewritten"'
    with pytest.raises(RequestError):
        main.pick("alt")
    main.close()


def test_tags_and_the_whole_graph_as_of_a_version(store: Store) -> None:
    main = store.open("main")
    assert main.tag("reviewed").version == 1
    main.commit("(context-tx (base-version 1) (derive extra (x)) (relate extra about plan))")
    main.commit("(context-tx (base-version 2) (retire plan) (unrelate extra about plan))")
    past = main.state_at("reviewed")
    assert [f["id"] for f in past["frames"]] == ["notes", "plan"] and past["version"] == 1
    assert main.state_at(2)["relations"] == [["extra", "about", "plan"]]
    assert main.frame_at("plan", "reviewed")["lifecycle"] == "active"
    page = main.recall_at(2, {"frame_id": "extra", "depth": 1})
    assert {n["id"] for n in page.nodes} >= {"extra", "plan"}
    with pytest.raises(RequestError) as exists:
        main.tag("reviewed")
    assert exists.value.code == "tag_exists"
    with pytest.raises(RequestError):
        main.tag("1bad name")
    with pytest.raises(NotFound):
        main.state_at("nope")
    with pytest.raises(OutOfRange):
        main.state_at(99)
    assert [t.name for t in main.tags()] == ["reviewed"]
    assert main.untag("reviewed").version == 1 and main.tags() == []
    main.close()


def test_revert_undoes_a_range_as_new_transactions(store: Store) -> None:
    main = store.open("main")
    main.commit("(context-tx (base-version 1) (set plan (status ready)) (derive later (x 1)))")
    main.commit("(context-tx (base-version 2) (set plan (owner cy)))")
    reply = main.revert(2, 2)
    assert reply["status"] == "merged" and reply["versions"] == [4]
    assert main.frame("plan")["body"] == "(status draft) (owner cy)"
    assert main.frame("later")["lifecycle"] != "active"
    assert main.txlog(4)["merge"]["reverted"] == [2, 2]
    with pytest.raises(OutOfRange):
        main.revert(3, 9)
    main.close()


def test_contexts_without_a_common_history_are_refused(store: Store) -> None:
    other = store.open("other")
    other.close()
    main = store.open("main")
    with pytest.raises(RequestError) as err:
        main.diff("other")
    assert err.value.code == "no_common_base"
    with pytest.raises(NotFound):
        main.merge("missing")
    with pytest.raises(RequestError):
        main.merge("main")
    assert main.version() == 1
    main.close()


def test_same_frame_compares_what_a_merge_compares() -> None:
    main, fork = seeded()
    a = main.backend.read(lambda v: v.frame("a"))
    b = fork.backend.read(lambda v: v.frame("a"))
    assert same_frame(a, b) and not same_frame(a, None)


def test_changes_between_two_versions_of_one_context(store: Store) -> None:
    main = store.open("main")
    main.tag("start")
    e = main.observe("tool_result", "a new fact")
    main.claim()
    main.commit(
        f"(context-tx (base-version 1) (derive fact (from {e.ref}) (x 1)) (set plan (owner bo)))"
    )
    main.commit("(context-tx (base-version 2) (retire notes) (relate fact about plan))")
    d = main.changes("start")
    assert {f["id"]: f["status"] for f in d["frames"]} == {
        "fact": "added",
        "plan": "changed",
        "notes": "retired",
    }
    assert [ev["ref"] for ev in d["events"]] == [e.ref]
    assert d["relations"]["added"] == [["fact", "about", "plan"]]
    assert [f["id"] for f in main.changes(1, 2)["frames"]] == ["fact", "plan"]
    assert main.changes(3)["frames"] == []
    with pytest.raises(OutOfRange):
        main.changes(3, 1)
    main.close()
