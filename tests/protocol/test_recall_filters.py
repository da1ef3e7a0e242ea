"""Recall filtered by validity and trust (R41), over both backends.

Frames failing a filter are neither returned nor walked through; events always
pass; cursors bind the filters; model-facing recall (``Context.recall_observation``)
reads only candidate and accepted frames unless told a narrower set, and records
the frame ids it returned in the observation's ``extra["recalled"]``.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import deque
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import OutOfRange, RequestError
from protocol.recall import (
    MODEL_TRUST,
    RecallPage,
    RecallRequest,
    for_model,
    recall,
    trust_filter,
    valid_at_seconds,
)
from protocol.state import Event
from service.context import Context
from storage.memory import MemoryBackend
from tests.examples import examples

Y2025 = 1735689600.0  # 2025-01-01T00:00:00Z
Y2026 = 1767225600.0
Y2027 = 1798761600.0


def rec(ctx: Context, request: dict[str, Any], cursor: str | None = None) -> RecallPage:
    return ctx.backend.read(lambda v: recall(v, request, cursor))


def commit(ctx: Context, body: str) -> None:
    receipt = ctx.commit(f"(context-tx (base-version {ctx.version()}) {body})")
    assert receipt.status == "committed", receipt.errors


def ids(page: RecallPage) -> list[str]:
    return [n["id"] for n in page.nodes]


def all_pages(ctx: Context, request: dict[str, Any]) -> list[RecallPage]:
    pages = [rec(ctx, request)]
    while pages[-1].next_cursor is not None:
        pages.append(rec(ctx, request, pages[-1].next_cursor))
    return pages


def seqs(ctx: Context) -> tuple[int, int]:
    meta = ctx.meta()
    return meta.version, meta.next_seq


def policies(ctx: Context) -> str:
    """hub cites three policies: 2025 only (citing a log), 2026 only, and open-ended."""
    log = ctx.observe("tool_result", "the 2025 release checklist")
    ctx.claim()
    commit(
        ctx,
        f"""(derive p2025 (from {log.ref}) (rule "sign with the 2025 key"))
            (derive p2026 (rule "sign with the 2026 key"))
            (derive popen (rule "run the tests"))
            (envelope p2025 (valid-from "2025-01-01") (valid-to "2026-01-01"))
            (envelope p2026 (valid-from "2026-01-01") (valid-to "2027-01-01"))""",
    )
    commit(ctx, "(derive hub (from p2025 p2026 popen) (goal release))")
    return log.ref


def governed(ctx: Context) -> dict[str, str]:
    """top cites q (quarantined, citing deep), r (rejected), cand (a candidate) and ok."""
    risky = ctx.observe("tool_result", "pasted from an unknown wiki", risky=True)
    other = ctx.observe("tool_result", "another unreviewed paste", risky=True)
    ctx.claim()
    commit(
        ctx,
        f"""(derive deep (fact 1))
            (derive q (from deep) (fact 2))
            (derive ok (fact 3))
            (derive cand (from {risky.ref}) (fact 4))
            (derive r (from {other.ref}) (fact 5))""",
    )
    commit(ctx, "(derive top (from q r cand ok) (goal answer))")
    assert ctx.quarantine(["q"]) == ["q"]
    ctx.review("r", "reject", "alice")
    trust = {f: ctx.frame(f)["envelope"]["trust"] for f in ("deep", "q", "ok", "cand", "r", "top")}
    assert trust == {
        "deep": "accepted",
        "q": "quarantined",
        "ok": "accepted",
        "cand": "candidate",
        "r": "rejected",
        "top": "candidate",  # it cites unreviewed frames
    }
    return {"risky": risky.ref, "other": other.ref}


# -- request fields ----------------------------------------------------------------------


def test_filters_are_normalized() -> None:
    iso = RecallRequest.parse({"frame_id": "x", "valid_at": "2026-01-01"})
    epoch = RecallRequest.parse({"frame_id": "x", "valid_at": 1767225600})
    offset = RecallRequest.parse({"frame_id": "x", "valid_at": "2026-01-01T08:00:00+08:00"})
    assert iso.valid_at == epoch.valid_at == offset.valid_at == Y2026
    assert isinstance(epoch.valid_at, float)
    assert iso.digest() == epoch.digest()
    a = RecallRequest.parse({"frame_id": "x", "trust": ["accepted", "candidate", "accepted"]})
    b = RecallRequest.parse('{"frame_id": "x", "trust": ["candidate", "accepted"]}')
    assert a.trust == b.trust == ("candidate", "accepted") == MODEL_TRUST
    assert a.digest() == b.digest()


def test_a_request_without_filters_binds_cursors_as_before() -> None:
    request = RecallRequest.parse({"frame_id": "x", "depth": 3})
    legacy = {
        "frame_id": "x",
        "depth": 3,
        "direction": "ancestors",
        "include_bodies": True,
        "include_events": False,
        "max_nodes": 32,
        "max_bytes": 256 << 10,
    }
    text = json.dumps(legacy, sort_keys=True, ensure_ascii=False)
    assert request.digest() == hashlib.blake2b(text.encode(), digest_size=8).digest()


@pytest.mark.parametrize(
    "fields, error",
    [
        ({"valid_at": "yesterday"}, RequestError),
        ({"valid_at": "2026-13-01"}, RequestError),
        ({"valid_at": True}, RequestError),
        ({"valid_at": [2026]}, RequestError),
        ({"valid_at": 1e13}, OutOfRange),
        ({"valid_at": -1e13}, OutOfRange),
        ({"valid_at": math.inf}, OutOfRange),
        ({"valid_at": math.nan}, OutOfRange),
        ({"trust": []}, RequestError),
        ({"trust": "accepted"}, RequestError),
        ({"trust": ["trusted"]}, RequestError),
        ({"trust": ["accepted", 1]}, RequestError),
        ({"trust": {"accepted": True}}, RequestError),
    ],
)
def test_bad_filters_are_typed_errors_and_change_nothing(
    ctx: Context, fields: dict[str, Any], error: type[RequestError]
) -> None:
    commit(ctx, "(derive x (n 1))")
    before = seqs(ctx)
    request = {"frame_id": "x", **fields}
    with pytest.raises(error) as info:
        RecallRequest.parse(request)
    if error is RequestError:
        assert info.value.code == "bad_request"
    assert next(iter(fields)) in info.value.message
    with pytest.raises(error):
        rec(ctx, request)
    with pytest.raises(error):
        ctx.recall_observation(request)
    assert seqs(ctx) == before  # nothing recorded
    if not any(isinstance(v, float) and not math.isfinite(v) for v in fields.values()):
        with pytest.raises(error):  # the same from JSON text
            RecallRequest.parse(json.dumps(request))


def test_shared_parsers_give_their_own_codes() -> None:
    assert valid_at_seconds("2026-01-01") == Y2026
    with pytest.raises(RequestError) as info:
        valid_at_seconds("soon")
    assert info.value.code == "bad_time" and "e.g. 2026-01-01" in info.value.message
    with pytest.raises(OutOfRange):
        valid_at_seconds(2e12)
    assert trust_filter("accepted") == ("accepted",)
    with pytest.raises(RequestError) as info:
        trust_filter(["accepted", "sure"])
    assert info.value.code == "bad_trust" and "sure" in info.value.message


# -- valid time ---------------------------------------------------------------------------


def test_valid_at_keeps_frames_whose_valid_time_covers_it(ctx: Context) -> None:
    log = policies(ctx)
    assert ids(rec(ctx, {"frame_id": "hub"})) == ["hub", "p2025", "p2026", "popen", log]

    in_2025 = rec(ctx, {"frame_id": "hub", "valid_at": "2025-06-01"})
    assert ids(in_2025) == ["hub", "p2025", "popen", log]  # the event passes: no envelope
    assert {(e["from"], e["to"]) for e in in_2025.edges} == {
        ("hub", "p2025"),
        ("hub", "popen"),
        ("p2025", log),
    }
    # valid_to is exclusive, valid_from inclusive: on 2026-01-01 only the 2026 rule holds.
    assert ids(rec(ctx, {"frame_id": "hub", "valid_at": "2026-01-01"})) == ["hub", "p2026", "popen"]
    assert ids(rec(ctx, {"frame_id": "hub", "valid_at": Y2026 - 0.5})) == [
        "hub",
        "p2025",
        "popen",
        log,
    ]
    assert ids(rec(ctx, {"frame_id": "hub", "valid_at": Y2027})) == ["hub", "popen"]
    assert ids(rec(ctx, {"frame_id": "hub", "valid_at": 0})) == ["hub", "popen"]


def test_start_frame_failing_a_filter_is_refused(ctx: Context) -> None:
    policies(ctx)
    with pytest.raises(RequestError) as info:
        rec(ctx, {"frame_id": "p2025", "valid_at": "2026-06-01"})
    assert info.value.code == "filtered_out" and "p2025" in info.value.message
    assert ids(rec(ctx, {"frame_id": "p2025", "valid_at": "2025-06-01", "depth": 0})) == ["p2025"]


# -- trust -------------------------------------------------------------------------------


def test_trust_filter_drops_frames_and_does_not_walk_through_them(ctx: Context) -> None:
    refs = governed(ctx)
    everything = rec(ctx, {"frame_id": "top"})
    assert ids(everything) == ["top", "q", "r", "cand", "ok", "deep", refs["other"], refs["risky"]]

    shown = rec(ctx, {"frame_id": "top", "trust": ["candidate", "accepted"]})
    # deep is accepted, but only reachable through the quarantined q: not a bridge.
    assert ids(shown) == ["top", "cand", "ok", refs["risky"]]
    assert {(e["from"], e["to"]) for e in shown.edges} == {
        ("top", "cand"),
        ("top", "ok"),
        ("cand", refs["risky"]),
    }
    assert ids(rec(ctx, {"frame_id": "q", "trust": ["quarantined"]})) == ["q"]
    assert ids(
        rec(ctx, {"frame_id": "deep", "direction": "descendants", "trust": ["accepted"]})
    ) == ["deep"]
    with pytest.raises(RequestError) as info:
        rec(ctx, {"frame_id": "top", "trust": ["accepted"]})
    assert info.value.code == "filtered_out" and "candidate" in info.value.message


def test_both_filters_together(ctx: Context) -> None:
    policies(ctx)
    commit(ctx, "(envelope popen (trust candidate))")
    request = {"frame_id": "hub", "valid_at": "2026-03-01", "trust": ["accepted"]}
    assert ids(rec(ctx, request)) == ["hub", "p2026"]


def test_cursor_binds_the_filters(ctx: Context) -> None:
    events = ctx.observe_many([("tool_result", f"log {i}", "main") for i in range(6)])
    ctx.claim()
    commit(ctx, " ".join(f"(derive leaf{i} (from {e.ref}) (n {i}))" for i, e in enumerate(events)))
    commit(ctx, "(derive hub (from leaf0 leaf1 leaf2 leaf3 leaf4 leaf5) (n -1))")
    commit(ctx, "(envelope leaf1 (valid-from 100) (valid-to 200))")
    base = {"frame_id": "hub", "max_nodes": 3, "valid_at": 150, "trust": ["accepted"]}
    first = rec(ctx, base)
    assert first.next_cursor is not None
    same = {**base, "valid_at": 150.0, "trust": ["accepted", "accepted"]}
    assert rec(ctx, same, first.next_cursor).nodes  # equal after normalization
    for other in (
        {**base, "valid_at": 151},
        {**base, "trust": ["accepted", "candidate"]},
        {k: v for k, v in base.items() if k != "trust"},
        {k: v for k, v in base.items() if k != "valid_at"},
    ):
        with pytest.raises(RequestError) as info:
            rec(ctx, other, first.next_cursor)
        assert info.value.code == "cursor_mismatch"
    unfiltered = rec(ctx, {"frame_id": "hub", "max_nodes": 3})
    assert unfiltered.next_cursor is not None
    with pytest.raises(RequestError) as info:
        rec(ctx, base, unfiltered.next_cursor)
    assert info.value.code == "cursor_mismatch"
    # The pages of a filtered recall add up to its single page.
    pages = all_pages(ctx, base)
    whole = rec(ctx, {**base, "max_nodes": 128})
    assert [n for p in pages for n in p.nodes] == whole.nodes
    commit(ctx, "(envelope leaf2 (valid-from 300))")  # the graph changed: the cursor is stale
    with pytest.raises(RequestError) as info:
        rec(ctx, base, first.next_cursor)
    assert info.value.code == "stale_cursor"


# -- model-facing recall ------------------------------------------------------------------


def stored(ctx: Context, e: Event) -> Event:
    found = ctx.backend.read(lambda v: v.event(e.seq))
    assert found is not None
    return found


def test_model_facing_recall_hides_quarantined_and_rejected_frames(ctx: Context) -> None:
    refs = governed(ctx)

    page, e = ctx.recall_recorded({"frame_id": "top"})

    assert ids(page) == ["top", "cand", "ok", refs["risky"]]
    assert e.extra == {"recalled": ["top", "cand", "ok"]}
    assert stored(ctx, e).extra == {"recalled": ["top", "cand", "ok"]}  # round-trips the store
    assert Event.from_record(e.to_record()) == e
    text = json.loads(ctx.read_event(e.ref)["text"])
    assert text["request"]["trust"] == ["candidate", "accepted"]
    assert [n["id"] for n in text["nodes"]] == ids(page)

    narrower, e2 = ctx.recall_recorded({"frame_id": "ok", "trust": ["accepted"]})
    assert ids(narrower) == ["ok"] and e2.extra["recalled"] == ["ok"]


def test_model_facing_recall_refuses_hidden_trust_and_hidden_starts(ctx: Context) -> None:
    governed(ctx)
    before = seqs(ctx)
    for request, code in (
        ({"frame_id": "q", "trust": ["quarantined"]}, "not_permitted"),
        ({"frame_id": "top", "trust": ["accepted", "rejected"]}, "not_permitted"),
        ({"frame_id": "q"}, "filtered_out"),
        ({"frame_id": "r"}, "filtered_out"),
    ):
        with pytest.raises(RequestError) as info:
            ctx.recall_observation(request)
        assert info.value.code == code
    assert seqs(ctx) == before
    with pytest.raises(RequestError):
        for_model(RecallRequest.parse({"frame_id": "q", "trust": ["quarantined"]}))
    # A reviewer reads them through plain recall.
    assert ids(ctx.recall({"frame_id": "q", "trust": ["quarantined"]})) == ["q"]
    assert ids(ctx.recall({"frame_id": "q"}))[:2] == ["q", "deep"]


def test_model_facing_cursors_continue_and_bind_the_default(ctx: Context) -> None:
    refs = governed(ctx)
    first, e1 = ctx.recall_recorded({"frame_id": "top", "max_nodes": 2})
    assert ids(first) == ["top", "cand"] and first.next_cursor is not None
    second, e2 = ctx.recall_recorded({"frame_id": "top", "max_nodes": 2}, first.next_cursor)
    assert ids(second) == ["ok", refs["risky"]] and second.next_cursor is None
    assert (e1.extra["recalled"], e2.extra["recalled"]) == (["top", "cand"], ["ok"])
    with pytest.raises(RequestError) as info:  # the plain request has no trust filter
        ctx.recall({"frame_id": "top", "max_nodes": 2}, first.next_cursor)
    assert info.value.code == "cursor_mismatch"
    page = ctx.recall(
        {"frame_id": "top", "max_nodes": 2, "trust": list(MODEL_TRUST)}, first.next_cursor
    )
    assert page.nodes == second.nodes


def test_events_and_missing_nodes_are_not_in_recalled(ctx: Context) -> None:
    log = policies(ctx)
    page, e = ctx.recall_recorded({"frame_id": "hub", "valid_at": "2025-02-01"})
    assert ids(page) == ["hub", "p2025", "popen", log]
    assert e.extra["recalled"] == ["hub", "p2025", "popen"]
    assert all(isinstance(x, str) for x in stored(ctx, e).extra["recalled"])


# -- against a naive model ----------------------------------------------------------------

WINDOWS: list[tuple[float | None, float | None]] = [(None, None), (0, 100), (100, 200), (50, None)]
TRUSTS = ["accepted", "candidate", "quarantined"]


def naive(
    ctx: Context, start: str, depth: int, direction: str, keep: set[str]
) -> tuple[list[str], set[tuple[str, str, str]]]:
    """Breadth-first recall straight from the spec, skipping frames not in *keep*."""
    state = ctx.state()
    sources = {f["id"]: ctx.frame(f["id"])["sources"] for f in state["frames"]}
    relations = [tuple(r) for r in state["relations"]]
    up, down = direction != "descendants", direction != "ancestors"
    order, level = [start], {start: 0}
    edges: set[tuple[str, str, str]] = set()
    queue = deque([start])

    def ok(node: str) -> bool:
        return node.startswith("@") or node in keep

    while queue:
        node = queue.popleft()
        if node.startswith("@") or level[node] == depth:
            continue
        found: list[tuple[str, tuple[str, str, str]]] = []
        if up:
            found += [(s, (node, s, "source")) for s in sources[node]]
            found += [
                (o, (node, o, lab)) for _, lab, o in sorted(r for r in relations if r[0] == node)
            ]
        if down:
            found += [
                (c, (c, node, "source")) for c in sorted(f for f, s in sources.items() if node in s)
            ]
            found += [
                (s, (s, node, lab)) for s, lab, _ in sorted(r for r in relations if r[2] == node)
            ]
        for n, edge in found:
            if not ok(n):
                continue
            edges.add(edge)
            if n not in level:
                level[n] = level[node] + 1
                order.append(n)
                queue.append(n)
    return order, edges


@settings(max_examples=examples(50), deadline=None)
@given(
    data=st.data(),
    n=st.integers(1, 8),
    depth=st.integers(0, 4),
    direction=st.sampled_from(["ancestors", "descendants", "both"]),
    max_nodes=st.integers(1, 5),
    valid_at=st.sampled_from([None, 0, 99.5, 100, 150, 250]),
    trust=st.one_of(st.none(), st.lists(st.sampled_from(TRUSTS), min_size=1, max_size=3)),
)
def test_filtered_pages_match_a_naive_model(
    data: st.DataObject,
    n: int,
    depth: int,
    direction: str,
    max_nodes: int,
    valid_at: float | None,
    trust: list[str] | None,
) -> None:
    with Context(MemoryBackend()) as ctx:
        frames = []
        for i in range(n):
            cited = data.draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
            events = ctx.observe_many(
                [("tool_result", f"f{i} log", "main")] * data.draw(st.integers(0, 1))
            )
            refs = [f"f{j}" for j in cited] + [e.ref for e in events]
            src = f"(from {' '.join(refs)}) " if refs else ""
            commit(ctx, f"(derive f{i} {src}(n {i}))")
            window = data.draw(st.sampled_from(WINDOWS))
            clauses = "".join(
                f"({name} {value})"
                for name, value in zip(("valid-from", "valid-to"), window, strict=True)
                if value is not None
            )
            if clauses:
                commit(ctx, f"(envelope f{i} {clauses})")
            frames.append((f"f{i}", window, data.draw(st.sampled_from(TRUSTS))))
        relations = data.draw(
            st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=6)
        )
        for s, o in set(relations):
            commit(ctx, f"(relate f{s} r f{o})")
        for fid, _, wanted in frames:
            if wanted == "candidate" and ctx.frame(fid)["envelope"]["trust"] == "accepted":
                commit(ctx, f"(envelope {fid} (trust candidate))")
        ctx.quarantine([fid for fid, _, wanted in frames if wanted == "quarantined"])

        keep = set()
        for fid, (lo, hi), _ in frames:
            actual = ctx.frame(fid)["envelope"]["trust"]
            in_time = valid_at is None or (
                (lo is None or lo <= valid_at) and (hi is None or valid_at < hi)
            )
            if in_time and (trust is None or actual in trust):
                keep.add(fid)
        start = f"f{data.draw(st.integers(0, n - 1))}"
        request: dict[str, Any] = {
            "frame_id": start,
            "depth": depth,
            "direction": direction,
            "max_nodes": max_nodes,
        }
        if valid_at is not None:
            request["valid_at"] = valid_at
        if trust is not None:
            request["trust"] = trust

        if start not in keep:
            with pytest.raises(RequestError) as info:
                rec(ctx, request)
            assert info.value.code == "filtered_out"
            return
        pages = all_pages(ctx, request)
        order, edges = naive(ctx, start, depth, direction, keep)
        assert [n["id"] for p in pages for n in p.nodes] == order
        paged = [(e["from"], e["to"], e["label"]) for p in pages for e in p.edges]
        assert len(paged) == len(set(paged)) and set(paged) == edges
