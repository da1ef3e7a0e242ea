"""Graph recall (R26, R27) over both backends: the seed's example, directions, cycles, paging.

Every recall runs through ``ctx.backend.read(lambda v: recall(v, …))``, so the
LMDB and in-memory stores answer the same questions; a Hypothesis test
checks paging and traversal against a naive breadth-first model.
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import NotFound, OutOfRange, ParseError, RequestError
from protocol.recall import (
    MAX_BYTES,
    MAX_NODES,
    RecallPage,
    RecallRequest,
    as_recall_observation,
    node_bytes,
    read_recall,
    recall,
)
from service.context import Context
from storage.memory import MemoryBackend
from tests.examples import examples
from tests.seed_texts import CONSOLIDATE_TX

SEED_REQUEST = """{
  "frame_id": "release-procedure",
  "depth": 2,
  "direction": "ancestors",
  "include_bodies": true,
  "include_events": false,
  "max_nodes": 8
}"""


RUN_A_TEST = "> npm test\n" + "  ✓ renders the release page\n" * 40 + "412 passed, 0 failed\n"
RUN_A_BUILD = "> npm run build\nvite v5 building for production...\nartifacts written to dist/\n"
RUN_B_TEST = "> pnpm --filter web test\n" + "  ✓ web package test\n" * 30 + "all passed\n"
RUN_B_BUILD = "> pnpm --filter web build\nartifacts written to apps/web/dist/\n"


# -- helpers -----------------------------------------------------------------------


def rec(
    ctx: Context,
    request: RecallRequest | dict[str, Any] | str,
    cursor: str | None = None,
    view_version: int | None = None,
) -> RecallPage:
    return ctx.backend.read(lambda v: recall(v, request, cursor, view_version))


def commit(ctx: Context, body: str) -> None:
    receipt = ctx.commit(f"(context-tx (base-version {ctx.version()}) {body})")
    assert receipt.status == "committed", receipt.errors


def ids(page: RecallPage) -> list[str]:
    return [n["id"] for n in page.nodes]


def edge_set(page: RecallPage) -> set[tuple[str, str, str]]:
    return {(e["from"], e["to"], e["label"]) for e in page.edges}


def all_pages(ctx: Context, request: dict[str, Any]) -> list[RecallPage]:
    pages = [rec(ctx, request)]
    while pages[-1].next_cursor is not None:
        pages.append(rec(ctx, request, pages[-1].next_cursor))
    return pages


def release_cases(ctx: Context) -> dict[str, str]:
    """The seed's consolidation: two cases with their run logs, then the procedure."""
    logs = ctx.observe_many(
        [
            ("tool_result", RUN_A_TEST, "main"),
            ("tool_result", RUN_A_BUILD, "main"),
            ("tool_result", RUN_B_TEST, "main"),
            ("tool_result", RUN_B_BUILD, "main"),
        ]
    )
    ctx.claim()
    a1, a2, b1, b2 = (e.ref for e in logs)
    commit(
        ctx,
        f"""(derive release-case-a (from {a1} {a2}) (layout single-package)
              (test "npm test") (build "npm run build") (artifact "dist/"))
            (derive release-case-b (from {b1} {b2}) (layout workspace)
              (test "pnpm --filter web test") (artifact "apps/web/dist/"))
            (retire {a1} {a2} {b1} {b2})""",
    )
    text = CONSOLIDATE_TX.replace("(base-version 42)", f"(base-version {ctx.version()})")
    assert ctx.commit(text).status == "committed"
    return {"a1": a1, "a2": a2, "b1": b1, "b2": b2}


def release_story(ctx: Context) -> dict[str, str]:
    """The seed's first transaction: test-result supports release."""
    request = ctx.observe("user_message", "Ship v1 once the regression tests pass.")
    commit(ctx, f"(derive release (from {request.ref}) (goal ship-v1) (stage awaiting-tests))")
    report = ctx.observe("tool_result", "regression suite: 412 passed, 0 failed\n" * 20)
    ctx.claim()
    commit(
        ctx,
        f"""(derive test-result (from {report.ref}) (tests passed))
            (revise release (goal ship-v1) (stage packaging))
            (relate test-result supports release)
            (retire {report.ref})""",
    )
    return {"request": request.ref, "report": report.ref}


def chain(ctx: Context, n: int) -> None:
    """c0 ← c1 ← … : frame c<i+1> cites c<i> as its source."""
    commit(ctx, "(derive c0 (n 0))")
    for i in range(1, n):
        commit(ctx, f"(derive c{i} (from c{i - 1}) (n {i}))")


# -- the seed's example ------------------------------------------------------------


def test_seed_recall_reaches_cases_and_their_original_events(ctx: Context) -> None:
    refs = release_cases(ctx)

    page = rec(ctx, RecallRequest.parse(SEED_REQUEST))

    a1, a2, b1, b2 = refs["a1"], refs["a2"], refs["b1"], refs["b2"]
    assert ids(page) == ["release-procedure", "release-case-a", "release-case-b", a1, a2, b1, b2]
    assert [n["depth"] for n in page.nodes] == [0, 1, 1, 2, 2, 2, 2]
    assert page.next_cursor is None
    assert page.version == ctx.version()
    proc, case_a, case_b = page.nodes[:3]
    assert proc["type"] == "frame" and proc["lifecycle"] == "active"
    assert proc["revision"] == 1
    assert proc["sources"] == ["release-case-a", "release-case-b"]
    assert proc["body"] == ctx.frame("release-procedure")["body"]
    assert proc["protected"] is False
    # Retirement leaves the cases and their logs reachable, with their lifecycle.
    assert case_a["lifecycle"] == case_b["lifecycle"] == "retired"
    assert case_a["sources"] == [a1, a2]
    assert '(artifact "apps/web/dist/")' in case_b["body"]
    for node in page.nodes[3:]:
        assert node["type"] == "event"
        assert node["lifecycle"] == "retired"
        assert node["kind"] == "tool_result"
        assert "text" not in node
        assert node["preview"] == ctx.event(node["id"])["preview"]
    assert page.nodes[3]["preview"].endswith("…")  # a long log appears as a preview
    assert page.nodes[3]["size"] == len(RUN_A_TEST)
    assert edge_set(page) == {
        ("release-procedure", "release-case-a", "source"),
        ("release-procedure", "release-case-b", "source"),
        ("release-procedure", "release-case-a", "supersedes"),
        ("release-procedure", "release-case-b", "supersedes"),
        ("release-case-a", a1, "source"),
        ("release-case-a", a2, "source"),
        ("release-case-b", b1, "source"),
        ("release-case-b", b2, "source"),
    }
    assert len(page.edges) == 8
    # The returned references read the original text in chunks (R28).
    assert ctx.read_event(a1, 0, 10)["text"] == RUN_A_TEST[:10]


def test_seed_recall_with_events_expands_the_original_text(ctx: Context) -> None:
    refs = release_cases(ctx)
    request = json.loads(SEED_REQUEST) | {"include_events": True}

    page = rec(ctx, request)

    texts = {n["id"]: n["text"] for n in page.nodes if n["type"] == "event"}
    assert texts == {
        refs["a1"]: RUN_A_TEST,
        refs["a2"]: RUN_A_BUILD,
        refs["b1"]: RUN_B_TEST,
        refs["b2"]: RUN_B_BUILD,
    }


def test_without_bodies_frame_nodes_carry_no_body(ctx: Context) -> None:
    release_cases(ctx)
    page = rec(ctx, json.loads(SEED_REQUEST) | {"include_bodies": False})
    assert all("body" not in n for n in page.nodes)
    assert page.nodes[0]["revision"] == 1


def test_one_hop_reaches_the_cases_only(ctx: Context) -> None:
    release_cases(ctx)
    page = rec(ctx, json.loads(SEED_REQUEST) | {"depth": 1})
    assert ids(page) == ["release-procedure", "release-case-a", "release-case-b"]
    assert len(page.edges) == 4  # two sources and two supersedes edges


def test_current_revision_is_returned_after_restore_and_revise(ctx: Context) -> None:
    release_cases(ctx)
    commit(ctx, '(restore release-case-b) (revise release-case-b (layout workspace) (note "v2"))')
    page = rec(ctx, SEED_REQUEST)
    case_b = page.nodes[2]
    assert (case_b["id"], case_b["revision"], case_b["lifecycle"]) == (
        "release-case-b",
        2,
        "active",
    )
    assert case_b["body"] == '(layout workspace) (note "v2")'


# -- directions ----------------------------------------------------------------------


def test_supporting_frame_is_found_only_in_reverse(ctx: Context) -> None:
    refs = release_story(ctx)

    up = rec(ctx, {"frame_id": "release", "direction": "ancestors"})
    down = rec(ctx, {"frame_id": "release", "direction": "descendants"})
    both = rec(ctx, {"frame_id": "release", "direction": "both"})

    assert ids(up) == ["release", refs["request"]]
    assert edge_set(up) == {("release", refs["request"], "source")}
    assert ids(down) == ["release", "test-result"]
    assert edge_set(down) == {("test-result", "release", "supports")}
    # both: release's source, then the frame relating to it; then test-result's source.
    assert ids(both) == ["release", refs["request"], "test-result", refs["report"]]
    assert [n["depth"] for n in both.nodes] == [0, 1, 1, 2]
    assert edge_set(both) == {
        ("release", refs["request"], "source"),
        ("test-result", "release", "supports"),
        ("test-result", refs["report"], "source"),
    }
    # From test-result, ancestors follow the relation subject → object.
    forward = rec(ctx, {"frame_id": "test-result"})
    assert ids(forward) == ["test-result", refs["report"], "release", refs["request"]]


def test_descendants_follow_frames_citing_a_source(ctx: Context) -> None:
    chain(ctx, 4)
    page = rec(ctx, {"frame_id": "c0", "direction": "descendants", "depth": 4})
    assert ids(page) == ["c0", "c1", "c2", "c3"]
    assert edge_set(page) == {
        ("c1", "c0", "source"),
        ("c2", "c1", "source"),
        ("c3", "c2", "source"),
    }


def test_order_within_a_level_is_sources_in_stored_order_then_sorted_relations(
    ctx: Context,
) -> None:
    commit(
        ctx, "(derive z (n 1)) (derive y (n 2)) (derive m (n 3)) (derive b (n 4)) (derive a (n 5))"
    )
    commit(ctx, "(derive hub (from z y) (n 0)) (relate hub refines b) (relate hub cites a)")
    commit(ctx, "(relate hub cites m)")
    page = rec(ctx, {"frame_id": "hub", "depth": 1})
    # sources as stored (z, y), then relations sorted by (label, object)
    assert ids(page) == ["hub", "z", "y", "a", "m", "b"]
    assert [e["label"] for e in page.edges] == ["source", "source", "cites", "cites", "refines"]


# -- cycles and depth ------------------------------------------------------------------


def test_cycles_terminate_and_each_node_appears_once(ctx: Context) -> None:
    commit(ctx, "(derive a (n 1))")
    commit(ctx, "(derive b (from a) (n 2)) (relate a needs b) (relate b refines a)")
    commit(ctx, "(relate a loops a)")

    for direction in ("ancestors", "descendants", "both"):
        page = rec(ctx, {"frame_id": "a", "direction": direction, "depth": 4})
        assert ids(page) == ["a", "b"], direction
        assert len(page.edges) == len(edge_set(page))
    page = rec(ctx, {"frame_id": "a", "direction": "both", "depth": 4})
    assert edge_set(page) == {
        ("a", "b", "needs"),
        ("a", "a", "loops"),
        ("b", "a", "source"),
        ("b", "a", "refines"),
    }


def test_depth_limits_hops(ctx: Context) -> None:
    chain(ctx, 7)
    for depth in range(5):
        page = rec(ctx, {"frame_id": "c6", "depth": depth})
        assert ids(page) == [f"c{6 - i}" for i in range(depth + 1)]
        assert [n["depth"] for n in page.nodes] == list(range(depth + 1))
        assert len(page.edges) == depth
    only = rec(ctx, {"frame_id": "c6", "depth": 0})
    assert only.edges == [] and only.next_cursor is None


def test_retired_nodes_are_reachable_with_their_lifecycle(ctx: Context) -> None:
    chain(ctx, 3)
    commit(ctx, "(retire c1)")  # ordinary retirement: retiring through its window
    commit(ctx, "(derive c1b (from c1) (n 9)) (relate c1b supersedes c1)")  # completes it
    commit(ctx, "(retire c0)")
    page = rec(ctx, {"frame_id": "c2", "depth": 2})
    life = {n["id"]: n["lifecycle"] for n in page.nodes}
    assert life == {"c2": "active", "c1": "retired", "c0": "retiring"}
    down = rec(ctx, {"frame_id": "c0", "direction": "descendants", "depth": 4})
    assert ids(down) == ["c0", "c1", "c1b", "c2"]


# -- paging ------------------------------------------------------------------------------


def wide_graph(ctx: Context, width: int = 12) -> None:
    """hub cites leaf0…; each leaf cites two events and relates to the next leaf."""
    events = ctx.observe_many([("tool_result", f"log {i} " * 30, "main") for i in range(2 * width)])
    ctx.claim()
    derive = " ".join(
        f"(derive leaf{i} (from {events[2 * i].ref} {events[2 * i + 1].ref}) (n {i}))"
        for i in range(width)
    )
    commit(ctx, derive)
    leaves = " ".join(f"leaf{i}" for i in range(width))
    relations = " ".join(f"(relate leaf{i} next leaf{(i + 1) % width})" for i in range(width))
    commit(ctx, f"(derive hub (from {leaves}) (n -1)) {relations} (relate leaf3 back hub)")


@pytest.mark.parametrize("direction", ["ancestors", "both"])
def test_pages_split_by_max_nodes_and_add_up_to_the_single_page(
    ctx: Context, direction: str
) -> None:
    wide_graph(ctx)
    whole = rec(ctx, {"frame_id": "hub", "depth": 3, "direction": direction, "max_nodes": 128})
    assert whole.next_cursor is None
    assert len(whole.nodes) == 1 + 12 + 24

    pages = all_pages(ctx, {"frame_id": "hub", "depth": 3, "direction": direction, "max_nodes": 5})

    assert [len(p.nodes) for p in pages] == [5] * 7 + [2]
    assert [n for p in pages for n in p.nodes] == whole.nodes
    edges = [(e["from"], e["to"], e["label"]) for p in pages for e in p.edges]
    assert len(edges) == len(set(edges))  # each edge on exactly one page
    assert set(edges) == edge_set(whole)
    seen: set[str] = set()
    for p in pages:  # an edge comes with the page that returns its later endpoint
        seen.update(ids(p))
        for e in p.edges:
            assert e["from"] in seen and e["to"] in seen
            assert e["from"] in ids(p) or e["to"] in ids(p)
    assert all(p.version == whole.version for p in pages)


def test_pages_split_by_bytes_only_between_whole_nodes(ctx: Context) -> None:
    bodies = " ".join(f'(derive part{i} (text "{chr(97 + i) * 350}"))' for i in range(6))
    commit(ctx, bodies)
    commit(ctx, f'(derive huge (text "{"x" * 3000}"))')
    parts = " ".join(f"part{i}" for i in range(3))
    rest = " ".join(f"part{i}" for i in range(3, 6))
    commit(ctx, f"(derive hub (from {parts} huge {rest}) (n 0))")
    request = {"frame_id": "hub", "depth": 1, "max_bytes": 1024, "max_nodes": 128}

    pages = all_pages(ctx, request)

    whole = rec(ctx, request | {"max_bytes": MAX_BYTES})
    assert [n for p in pages for n in p.nodes] == whole.nodes
    assert [ids(p) for p in pages] == [
        ["hub", "part0"],
        ["part1", "part2"],
        ["huge"],
        ["part3", "part4"],
        ["part5"],
    ]
    for p in pages:
        sizes = [node_bytes(n) for n in p.nodes]
        assert sum(sizes) <= 1024 or len(sizes) == 1
    huge = pages[2].nodes[0]
    assert node_bytes(huge) > 1024 and huge["body"] == f'(text "{"x" * 3000}")'  # never sliced


def test_event_text_counts_against_the_page_budget(ctx: Context) -> None:
    refs = release_cases(ctx)
    request = json.loads(SEED_REQUEST) | {"include_events": True, "max_bytes": 1024}

    pages = all_pages(ctx, request)

    assert [n["id"] for p in pages for n in p.nodes] == ids(rec(ctx, SEED_REQUEST))
    for p in pages:
        sizes = [node_bytes(n) for n in p.nodes]
        assert sum(sizes) <= 1024 or len(sizes) == 1
    (alone,) = [p for p in pages if refs["a1"] in ids(p)]
    assert ids(alone) == [refs["a1"]]  # larger than the budget: a page of its own, whole
    assert alone.nodes[0]["text"] == RUN_A_TEST and node_bytes(alone.nodes[0]) > 1024


def test_next_page_is_refused_after_a_concurrent_commit(ctx: Context) -> None:
    wide_graph(ctx)
    request = {"frame_id": "hub", "max_nodes": 4}
    first = rec(ctx, request)
    assert first.next_cursor is not None
    ctx.observe("tool_result", "observations do not change the graph's version")
    assert ids(rec(ctx, request, first.next_cursor))  # still the same version

    commit(ctx, "(derive elsewhere (n 1))")  # another thread commits

    with pytest.raises(RequestError) as info:
        rec(ctx, request, first.next_cursor)
    assert info.value.code == "stale_cursor"
    assert "restart recall" in info.value.message
    restarted = rec(ctx, request)  # restarting works, at the new version
    assert restarted.version == first.version + 1


def test_cursor_of_other_parameters_is_refused(ctx: Context) -> None:
    wide_graph(ctx)
    first = rec(ctx, {"frame_id": "hub", "max_nodes": 4})
    assert first.next_cursor is not None
    for other in (
        {"frame_id": "hub", "max_nodes": 5},
        {"frame_id": "leaf0", "max_nodes": 4},
        {"frame_id": "hub", "max_nodes": 4, "include_bodies": False},
    ):
        with pytest.raises(RequestError) as info:
            rec(ctx, other, first.next_cursor)
        assert info.value.code == "cursor_mismatch"


@pytest.mark.parametrize(
    "cursor", ["", "garbage!", "A" * 300, "AAAAAAAAAAAA", "bm90IGEgY3Vyc29y", "===="]
)
def test_garbage_cursor_is_refused(ctx: Context, cursor: str) -> None:
    chain(ctx, 2)
    with pytest.raises(RequestError) as info:
        rec(ctx, {"frame_id": "c1"}, cursor)
    assert info.value.code == "bad_cursor"


def test_tampered_cursor_is_refused(ctx: Context) -> None:
    wide_graph(ctx)
    first = rec(ctx, {"frame_id": "hub", "max_nodes": 4})
    cursor = first.next_cursor
    assert cursor is not None and cursor.replace("-", "").replace("_", "").isalnum()
    flipped = cursor[:-3] + ("A" if cursor[-3] != "A" else "B") + cursor[-2:]
    with pytest.raises(RequestError) as info:
        rec(ctx, {"frame_id": "hub", "max_nodes": 4}, flipped)
    assert info.value.code == "bad_cursor"


def test_model_facing_recall_checks_the_view_version(ctx: Context) -> None:
    chain(ctx, 3)
    seen = ctx.version()
    assert ids(rec(ctx, {"frame_id": "c2"}, view_version=seen)) == ["c2", "c1", "c0"]
    commit(ctx, "(derive other (n 1))")
    with pytest.raises(RequestError) as info:
        rec(ctx, {"frame_id": "c2"}, view_version=seen)
    assert info.value.code == "stale_view"


# -- refusals --------------------------------------------------------------------------------


def test_unknown_frame_is_not_found(ctx: Context) -> None:
    with pytest.raises(NotFound):
        rec(ctx, {"frame_id": "release-procedure"})


@pytest.mark.parametrize(
    "field, value",
    [
        ("depth", 5),
        ("depth", -1),
        ("max_nodes", 129),
        ("max_nodes", 0),
        ("max_bytes", 0),
        ("max_bytes", 1023),
        ("max_bytes", MAX_BYTES + 1),
    ],
)
def test_out_of_range_is_refused_never_clamped(ctx: Context, field: str, value: int) -> None:
    chain(ctx, 1)
    request = {"frame_id": "c0", field: value}
    with pytest.raises(OutOfRange) as info:
        rec(ctx, request)
    assert field in info.value.message and str(value) in info.value.message
    with pytest.raises(OutOfRange):
        RecallRequest.parse(json.dumps(request))
    with pytest.raises(OutOfRange):
        RecallRequest(**request)  # type: ignore[arg-type]


def test_bounds_are_inclusive() -> None:
    low = RecallRequest(frame_id="x", depth=0, max_nodes=1, max_bytes=1024)
    high = RecallRequest(frame_id="x", depth=4, max_nodes=MAX_NODES, max_bytes=MAX_BYTES)
    assert (low.depth, high.depth, high.max_nodes) == (0, 4, 128)
    default = RecallRequest.parse({"frame_id": "x"})
    assert (default.depth, default.direction, default.include_bodies) == (2, "ancestors", True)
    assert (default.include_events, default.max_nodes, default.max_bytes) == (False, 32, 256 << 10)


@pytest.mark.parametrize(
    "request_obj",
    [
        {},
        {"frame_id": ""},
        {"frame_id": "@e1"},
        {"frame_id": 7},
        {"frame_id": "x", "depth": "2"},
        {"frame_id": "x", "depth": 2.0},
        {"frame_id": "x", "depth": True},
        {"frame_id": "x", "direction": "up"},
        {"frame_id": "x", "include_events": "yes"},
        {"frame_id": "x", "cursor": "abc"},
        [1, 2],
        "just text",
    ],
)
def test_invalid_requests_raise_bad_request(request_obj: Any) -> None:
    with pytest.raises(RequestError) as info:
        RecallRequest.parse(json.dumps(request_obj))
    assert info.value.code == "bad_request"
    if isinstance(request_obj, dict):
        with pytest.raises(RequestError):
            RecallRequest.parse(request_obj)


@pytest.mark.parametrize("text", ["{", '{"frame_id": "x",}', '{"frame_id": NaN}', "", "\xff"])
def test_malformed_json_is_a_parse_error(text: str) -> None:
    with pytest.raises(ParseError):
        RecallRequest.parse(text)
    with pytest.raises(ParseError):
        RecallRequest.parse(b"\xff\xfe")


def test_duplicate_keys_are_refused() -> None:
    with pytest.raises(ParseError):
        RecallRequest.parse('{"frame_id": "a", "frame_id": "b"}')


# -- recall results as observations ------------------------------------------------------------


def test_recall_result_enters_as_an_observation_and_changes_no_lifecycle(ctx: Context) -> None:
    release_cases(ctx)
    request = RecallRequest.parse(SEED_REQUEST)
    page = read_recall(ctx.backend, request)
    before = ctx.state()

    e = ctx.observe("recall_result", as_recall_observation(page, request))
    claimed = ctx.claim()

    assert claimed.claimed == [e.ref] and not claimed.advanced  # tool output, no tick
    after = ctx.state()
    assert after["frames"] == before["frames"]
    assert after["version"] == before["version"]
    doc = json.loads(ctx.read_event(e.ref)["text"])
    assert doc["request"]["frame_id"] == "release-procedure"
    assert doc["nodes"] == page.nodes and doc["edges"] == page.edges
    assert doc["version"] == page.version and doc["next_cursor"] is None
    assert ctx.event(e.ref)["kind"] == "recall_result"


def test_page_to_dict_is_the_json_contract(ctx: Context) -> None:
    chain(ctx, 2)
    doc = rec(ctx, {"frame_id": "c1"}).to_dict()
    assert list(doc) == ["nodes", "edges", "next_cursor", "version"]
    assert json.loads(json.dumps(doc)) == doc


# -- against a naive model --------------------------------------------------------------------


def naive(ctx: Context, start: str, depth: int, direction: str) -> tuple[list[str], set[Any]]:
    """Breadth-first recall straight from the spec, over the context's full state."""
    state = ctx.state()
    sources = {f["id"]: ctx.frame(f["id"])["sources"] for f in state["frames"]}
    relations = [tuple(r) for r in state["relations"]]
    up, down = direction != "descendants", direction != "ancestors"
    order, level, edges = [start], {start: 0}, set()
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if node.startswith("@") or level[node] == depth:
            continue
        found = []
        if up:
            for s in sources[node]:
                edges.add((node, s, "source"))
                found.append(s)
            for _, label, o in sorted(r for r in relations if r[0] == node):
                edges.add((node, o, label))
                found.append(o)
        if down:
            for c in sorted(f for f, srcs in sources.items() if node in srcs):
                edges.add((c, node, "source"))
                found.append(c)
            for s, label, _ in sorted(r for r in relations if r[2] == node):
                edges.add((s, node, label))
                found.append(s)
        for n in found:
            if n not in level:
                level[n] = level[node] + 1
                order.append(n)
                queue.append(n)
    return order, edges


@st.composite
def graphs(draw: st.DrawFn) -> tuple[list[tuple[int, list[int], int]], list[tuple[int, str, int]]]:
    """Frames f0…fn-1 (each citing earlier frames and events) and arbitrary relations."""
    n = draw(st.integers(1, 9))
    frames = []
    for i in range(n):
        cited = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
        frames.append((i, cited, draw(st.integers(0, 2))))
    relations = draw(
        st.lists(
            st.tuples(st.integers(0, n - 1), st.sampled_from(["r", "s"]), st.integers(0, n - 1)),
            max_size=8,
            unique=True,
        )
    )
    return frames, relations


@settings(max_examples=examples(60), deadline=None)
@given(
    graph=graphs(),
    start=st.integers(0, 8),
    depth=st.integers(0, 4),
    direction=st.sampled_from(["ancestors", "descendants", "both"]),
    max_nodes=st.integers(1, 6),
    max_bytes=st.sampled_from([1024, 2048, MAX_BYTES]),
)
def test_pages_match_a_naive_breadth_first_model(
    graph: tuple[list[tuple[int, list[int], int]], list[tuple[int, str, int]]],
    start: int,
    depth: int,
    direction: str,
    max_nodes: int,
    max_bytes: int,
) -> None:
    frames, relations = graph
    with Context(MemoryBackend()) as ctx:
        for i, cited, n_events in frames:
            events = ctx.observe_many(
                [("tool_result", f"f{i} log {k} " * 50, "main") for k in range(n_events)]
            )
            refs = [f"f{j}" for j in cited] + [e.ref for e in events]
            src = f"(from {' '.join(refs)}) " if refs else ""
            body = f'(text "{"y" * (i * 150)}")'
            commit(ctx, f"(derive f{i} {src}{body})")
        for s, label, o in relations:
            commit(ctx, f"(relate f{s} {label} f{o})")
        start_id = f"f{min(start, len(frames) - 1)}"
        request = {
            "frame_id": start_id,
            "depth": depth,
            "direction": direction,
            "max_nodes": max_nodes,
            "max_bytes": max_bytes,
            "include_events": True,
        }

        pages = all_pages(ctx, request)

        order, edges = naive(ctx, start_id, depth, direction)
        nodes = [n for p in pages for n in p.nodes]
        assert [n["id"] for n in nodes] == order
        depths = [n["depth"] for n in nodes]
        assert depths == sorted(depths) and depths[0] == 0
        paged = [(e["from"], e["to"], e["label"]) for p in pages for e in p.edges]
        assert len(paged) == len(set(paged)) and set(paged) == edges
        for p in pages:
            assert 1 <= len(p.nodes) <= max_nodes
            sizes = [node_bytes(n) for n in p.nodes]
            assert sum(sizes) <= max_bytes or len(sizes) == 1
        assert pages[-1].next_cursor is None
        assert all(p.next_cursor is not None for p in pages[:-1])
