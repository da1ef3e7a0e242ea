"""The inspector's reads (service/inspection.py) on a real LMDB store: the graph as of
every version against the state recorded right after each commit, transaction pages,
revisions, diffs, the read-only search, and refusals that change nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import morphz
from protocol.errors import NotFound, OutOfRange, RequestError
from service import inspection
from tests.examples import examples

IDS = ["a", "b", "c", "d"]


def _commit(ctx: Any, ops: str, reason: str | None = None) -> int:
    why = f' (reason "{reason}")' if reason else ""
    r = ctx.submit(f"(context-tx (base-version {ctx.version()}){why} {ops})")
    assert r.committed, r
    return int(r.version)


def _truth(ctx: Any) -> tuple[set[str], set[tuple[str, str, str]]]:
    state = ctx.state()
    frames = {f["id"] for f in state.frames}
    return frames, {tuple(r) for r in state.relations}


def _drawn(g: dict[str, Any]) -> tuple[set[str], set[tuple[str, str, str]]]:
    return {n["id"] for n in g["nodes"]}, {tuple(e) for e in g["edges"]}


@settings(max_examples=examples(25), deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["relate", "unrelate", "derive", "toggle"]),
            st.sampled_from(IDS),
            st.sampled_from(["supports", "blocks"]),
            st.sampled_from(IDS),
        ),
        min_size=1,
        max_size=14,
    )
)
def test_the_graph_as_of_every_version_is_the_state_after_that_commit(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, str, str, str]]
) -> None:
    store = tmp_path_factory.mktemp("asof")
    with morphz.open_context(store, "g") as ctx:
        truth = {0: (set(), set())}
        for fid in IDS[:2]:
            _commit(ctx, f"(derive {fid} (note (first {fid})))")
            truth[ctx.version()] = _truth(ctx)
        for op, s, label, o in steps:
            have = {f["id"] for f in ctx.state().frames}
            if op == "derive":
                if s in have:
                    _commit(ctx, f"(revise {s} (note (again {s})))")
                else:
                    _commit(ctx, f"(derive {s} (note (new {s})))")
            elif op == "toggle" and s in have and o in have:
                # one transaction that touches an edge twice and leaves it as it was
                present = (s, label, o) in _truth(ctx)[1]
                first, second = ("unrelate", "relate") if present else ("relate", "unrelate")
                _commit(ctx, f"({first} {s} {label} {o}) ({second} {s} {label} {o})")
            elif s in have and o in have:
                present = (s, label, o) in _truth(ctx)[1]
                if op == "relate" and not present:
                    _commit(ctx, f"(relate {s} {label} {o})")
                elif op == "unrelate" and present:
                    _commit(ctx, f"(unrelate {s} {label} {o})")
            truth[ctx.version()] = _truth(ctx)
        for version, expected in truth.items():
            g = inspection.graph(ctx, version=version, radius=4, limit=400)
            assert g["as_of"] == version and g["relations_exact"]
            assert _drawn(g) == expected, version


def test_a_neighbourhood_is_bounded_and_centred(tmp_path: Path) -> None:
    with morphz.open_context(tmp_path, "big") as ctx:
        ops = " ".join(f"(derive n{i} (note (n {i})))" for i in range(60))
        _commit(ctx, ops)
        rel = " ".join(f"(relate n{i} next n{i + 1})" for i in range(59))
        _commit(ctx, rel)
        g = inspection.graph(ctx, center="n30", radius=2, limit=400)
        assert _drawn(g)[0] == {"n28", "n29", "n30", "n31", "n32"}
        assert [n["id"] for n in g["nodes"] if n["center"]] == ["n30"]
        small = inspection.graph(ctx, center="n30", radius=4, limit=3)
        assert len(small["nodes"]) == 3 and small["truncated"]
        assert all(e[0] in _drawn(small)[0] and e[2] in _drawn(small)[0] for e in small["edges"])


def test_far_from_both_ends_relations_are_marked_inexact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with morphz.open_context(tmp_path, "far") as ctx:
        _commit(ctx, "(derive a (note (a))) (derive b (note (b)))")
        for _ in range(3):
            _commit(ctx, "(relate a x b)")
            _commit(ctx, "(unrelate a x b)")
        monkeypatch.setattr(inspection, "MAX_LOG_WALK", 1)
        g = inspection.graph(ctx, version=3, radius=2)
        assert not g["relations_exact"]
        assert _drawn(g)[0] == {"a", "b"}  # the frames are still as of version 3


def test_refusals_name_the_bad_argument_and_change_nothing(tmp_path: Path) -> None:
    with morphz.open_context(tmp_path, "bad") as ctx:
        _commit(ctx, "(derive a (note (a)))")
        before = ctx.version()
        cases = [
            (lambda: inspection.graph(ctx, version=before + 1), OutOfRange, "future_version"),
            (lambda: inspection.graph(ctx, version=-1), OutOfRange, "out_of_range"),
            (lambda: inspection.graph(ctx, limit=0), OutOfRange, "out_of_range"),
            (lambda: inspection.graph(ctx, radius=9), OutOfRange, "out_of_range"),
            (lambda: inspection.graph(ctx, center="ghost"), NotFound, "not_found"),
            (lambda: inspection.graph(ctx, center="a", version=0), NotFound, "not_found"),
            (lambda: inspection.diff(ctx, "a", 0, 1), NotFound, "not_found"),
            (lambda: inspection.revisions(ctx, "ghost"), NotFound, "not_found"),
            (lambda: inspection.transactions(ctx, limit=10_000), OutOfRange, "out_of_range"),
            (lambda: inspection.inspect(ctx, "drop", {}), RequestError, "bad_argument"),
            (lambda: inspection.inspect(ctx, "graph", {"evil": 1}), RequestError, "bad_argument"),
            (
                lambda: inspection.inspect(ctx, "graph", {"version": "1"}),
                RequestError,
                "bad_argument",
            ),
            (lambda: ctx.inspect_search("x" * 2000), OutOfRange, "out_of_range"),
        ]
        for call, kind, code in cases:
            with pytest.raises(kind) as raised:
                call()
            assert raised.value.code == code
        assert ctx.version() == before


def test_transactions_revisions_and_a_diff(tmp_path: Path) -> None:
    with morphz.open_context(tmp_path, "tx") as ctx:
        e = ctx.observe("user_message", "ship it", session="alice").ref
        ctx.claim()
        _commit(ctx, f"(derive release (from {e}) (goal ship) (stage tests))", "asked")
        _commit(ctx, "(revise release (goal ship) (stage packaging))", "tests passed")
        _commit(ctx, "(derive other (note (x)))")
        page = inspection.transactions(ctx, limit=2)
        assert [t["version"] for t in page["transactions"]] == [3, 2]
        older = inspection.transactions(ctx, before=2, limit=2)
        assert [t["version"] for t in older["transactions"]] == [1]
        live = inspection.transactions(ctx, after=1)
        assert [t["version"] for t in live["transactions"]] == [2, 3]
        assert live["agents"] == {"alice": 1, "unknown": 1}  # no source: no session
        assert page["transactions"][1]["reason"] == "tests passed"
        revs = inspection.revisions(ctx, "release")
        assert [(r["version"], r["op"], r["agent"]) for r in revs["revisions"]] == [
            (2, "revise", "alice"),
            (1, "derive", "alice"),
        ]
        assert "(stage packaging)" in revs["revisions"][0]["text"]
        d = inspection.diff(ctx, "release", 1, 2)
        assert "-(stage tests)" in d["diff"] and "+(stage packaging)" in d["diff"]
        assert d["from"]["revision"] == 1 and d["to"]["revision"] == 2 and not d["cut"]
        big = "w" * (inspection.MAX_DIFF_CHARS + 10)
        _commit(ctx, f'(revise release (goal ship) (note "{big}"))')
        assert inspection.diff(ctx, "release", 2, ctx.version())["cut"]


def test_the_search_reads_and_records_nothing(tmp_path: Path) -> None:
    with morphz.open_context(tmp_path, "s") as ctx:
        _commit(ctx, "(derive release (note (regression suite passed)))")
        version, events = ctx.version(), len(ctx.state().events)
        found = ctx.inspect_search("regression", limit=5)
        assert [h["id"] for h in found["hits"]] == ["release"]
        assert "«regression»" in found["hits"][0]["snippet"]
        assert ctx.version() == version and len(ctx.state().events) == events
