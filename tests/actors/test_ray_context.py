"""Context actors on the session's Ray cluster: rebase or reject, the seed's story, hostile
payloads, typed errors across the actor boundary, group commit."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgpack
import pytest

from actors import ContextHandle, RetryPolicy, connect, lookup
from protocol.errors import (
    NotFound,
    OutOfRange,
    ParseError,
    RequestError,
    StoreError,
    TransportError,
)
from protocol.receipts import Conflict, Receipt
from protocol.replies import ClaimReply, EventPage, FrameReply, ObserveReply, StateReply
from protocol.txlang import parse_tx, print_tx
from protocol.txwire import tx_from_dict, tx_to_msgpack
from protocol.wire import MAX_PAYLOAD_BYTES, WIRE_VERSION, pack, unpack
from tests.actors.cluster import RayCluster

pytestmark = pytest.mark.ray


async def together(h: ContextHandle, *texts: str) -> list[Receipt]:
    """Submit transactions concurrently, as separate threads would."""
    return list(await asyncio.gather(*(h.submit_async(t) for t in texts)))


def test_same_base_independent_frames_both_commit_same_frame_one_is_rejected(
    handle: ContextHandle,
) -> None:
    base = handle.version()
    first, second = asyncio.run(
        together(
            handle,
            f"(context-tx (base-version {base}) (derive alpha (by t1)))",
            f"(context-tx (base-version {base}) (derive beta (by t2)))",
        )
    )
    assert first.committed and second.committed
    assert sorted([first.version, second.version]) == [base + 1, base + 2]
    assert sorted([first.rebased, second.rebased]) == [False, True]

    base = handle.version()
    a, b = asyncio.run(
        together(
            handle,
            f"(context-tx (base-version {base}) (revise alpha (by t1) (round 2)))",
            f"(context-tx (base-version {base}) (revise alpha (by t2) (round 2)))",
        )
    )
    winner, loser = (a, b) if a.committed else (b, a)
    assert winner.committed and loser.status == "rejected"
    assert [e.code for e in loser.errors] == ["conflict"]
    assert "alpha" in loser.errors[0].message
    assert loser.conflicts == (Conflict(id="alpha", version=winner.version),)

    # the loser re-reads and rebuilds: now it is based on the winner's write
    snap = handle.snapshot(["alpha"])
    assert snap["frames"]["alpha"]["revision"] == 2
    again = handle.submit(
        f"(context-tx (base-version {snap['version']}) (revise alpha (by t1 t2) (round 3)))"
    )
    assert again.committed and again.version == winner.version + 1
    assert handle.frame("alpha")["revision"] == 3


@pytest.mark.parametrize("first", ["testing", "pausing"])
def test_seed_story_tests_passed_and_release_paused_are_both_held(
    handle: ContextHandle, first: str
) -> None:
    ask = handle.observe("user_message", "Ship v1 once the regression tests pass.")
    handle.claim()
    start = handle.submit(
        f"(context-tx (base-version 0) (derive release (from {ask['ref']}) "
        "(goal ship-v1) (stage awaiting-tests)))"
    )
    assert start.committed
    tests = handle.observe("tool_result", "regression suite: 412 passed, 0 failed")
    pause = handle.observe("user_message", "Pause the release, legal wants a look.")
    assert handle.claim()["claimed"] == [tests["ref"], pause["ref"]]
    base = handle.version()

    def testing(base: int, stage: str) -> str:
        return (
            f'(context-tx (base-version {base}) (reason "tests passed; prepare to package")'
            f" (derive test-result (from {tests['ref']}) (tests passed))"
            f" (revise release (from test-result) (goal ship-v1) {stage})"
            f" (relate test-result supports release) (retire {tests['ref']}))"
        )

    pausing = (
        f'(context-tx (base-version {base}) (reason "the user paused the release")'
        f" (revise release (from {pause['ref']}) (goal ship-v1) (stage paused)))"
    )
    # both threads read version `base`; one of them reaches the actor first
    order = [testing(base, "(stage packaging)"), pausing]
    if first == "pausing":
        order.reverse()
    winner, loser = handle.submit(order[0]), handle.submit(order[1])
    assert winner.committed and loser.status == "rejected"
    assert loser.conflicts == (Conflict(id="release", version=winner.version),)

    # the loser re-reads the release and writes a state that holds both facts
    seen = handle.frame("release")
    base = handle.version()
    if first == "pausing":  # the testing thread must not un-pause the release
        assert "(stage paused)" in seen["body"]
        rebuilt = testing(base, "(stage paused) (tests passed)")
    else:  # the pausing thread keeps the test result it now sees
        assert "(stage packaging)" in seen["body"]
        rebuilt = (
            f'(context-tx (base-version {base}) (reason "the user paused the release")'
            f" (derive pause-request (from {pause['ref']}) (user-asked pause))"
            " (revise release (from pause-request) (goal ship-v1) (stage paused) (tests passed))"
            " (relate pause-request blocks release))"
        )
    final = handle.submit(rebuilt)
    assert final.committed, final.errors
    release = handle.frame("release")
    assert release["body"] == "(goal ship-v1) (stage paused) (tests passed)"
    assert handle.frame("test-result")["body"] == "(tests passed)"
    assert ["test-result", "supports", "release"] in release["relations_in"]
    writes = [h for h in handle.history("release") if h["op"] in ("derive", "revise")]
    assert [h["revision"] for h in writes] == [1, 2, 3]
    assert handle.read_event(pause["ref"])["text"] == "Pause the release, legal wants a look."
    assert handle.event(tests["ref"])["lifecycle"] == "retired"


HOSTILE: dict[str, Any] = {
    "garbage": b"\x01\xc1\xff\x00garbage",
    "truncated": tx_to_msgpack(parse_tx("(context-tx (base-version 0) (derive a (x 1)))"))[:-4],
    "oversize": bytes((WIRE_VERSION,)) + b"\xc0" * (MAX_PAYLOAD_BYTES + 16),
    "wrong version": bytes((9,)) + msgpack.packb({"base_version": 0, "ops": []}),
    "not a transaction": pack({"base_version": "zero", "ops": [{"op": "explode"}]}),
    "not bytes": {"base_version": 0},
}


def test_hostile_payloads_are_rejected_and_the_actor_stays_up(handle: ContextHandle) -> None:
    import ray

    assert handle.submit("(context-tx (base-version 0) (derive keep (x 1)))").committed
    pid, version = handle.pid(), handle.version()
    for name, payload in HOSTILE.items():
        receipt = Receipt.from_dict(unpack(ray.get(handle.actor.submit.remote(payload))))
        assert receipt.status == "rejected", name
        assert [(e.op, e.code) for e in receipt.errors] == [(None, "wire_error")], name
        assert receipt.version == version, name
    assert handle.pid() == pid and handle.version() == version
    assert handle.stats()["wire_rejections"] == len(HOSTILE)
    assert handle.frame("keep")["body"] == "(x 1)"
    assert handle.submit_payload(b"").status == "rejected"


def test_typed_errors_cross_the_actor_boundary(
    handle: ContextHandle, tmp_path: Path, namespace: str
) -> None:
    with pytest.raises(NotFound, match="no frame"):
        handle.frame("nope")
    with pytest.raises(NotFound):
        handle.history("nope")
    with pytest.raises(OutOfRange):
        handle.read_event("@e1", 0, 1 << 30)
    with pytest.raises(NotFound):
        handle.read_event("@e1")
    with pytest.raises(ParseError):
        handle.submit("(context-tx (base-version 0) (derive")
    with pytest.raises(RequestError) as bad:
        handle.observe("gossip", "psst")
    assert bad.value.code == "bad_kind"
    with pytest.raises(NotFound):
        lookup("no-such-context", namespace)
    with pytest.raises(NotFound):
        connect("never-made", store_dir=tmp_path, namespace=namespace, create=False)
    made = connect("never-made", store_dir=tmp_path, namespace=namespace)  # the name is free
    made.shutdown()
    with pytest.raises(RequestError) as elsewhere:
        connect(handle.name, store_dir=tmp_path / "other", namespace=namespace)
    assert elsewhere.value.code == "context_elsewhere"
    with pytest.raises(RequestError) as name:
        connect("../escape", store_dir=tmp_path, namespace=namespace)
    assert name.value.code == "bad_context_name"
    with pytest.raises(NotFound):
        connect("x", store_dir=tmp_path, namespace=namespace, node_id="ff" * 28)


def test_an_unreachable_actor_raises_store_error_after_the_retries(
    ray_cluster: RayCluster, tmp_path: Path, context_name: str, namespace: str
) -> None:
    handle = connect(
        context_name,
        store_dir=tmp_path,
        namespace=namespace,
        retry=RetryPolicy(attempts=2, initial=0.01),
    )
    assert handle.submit("(context-tx (base-version 0) (derive a))").committed
    handle.shutdown()
    with pytest.raises(StoreError) as gone:
        handle.version()
    assert gone.value.code == "actor_unavailable" and isinstance(gone.value, TransportError)
    with pytest.raises(TransportError):
        asyncio.run(handle.version_async())
    with pytest.raises(StoreError):
        handle.submit("(context-tx (base-version 1) (derive b))")
    # the store survives its actor: a new actor serves it under the same name
    back = connect(context_name, store_dir=tmp_path, namespace=namespace)
    try:
        assert back.version() == 1 and back.frame("a")["revision"] == 1
    finally:
        back.shutdown()


def test_concurrent_submissions_are_group_committed(handle: ContextHandle) -> None:
    before = handle.stats()
    n = 120
    texts = [f"(context-tx (base-version 0) (derive load/n{i} (i {i})))" for i in range(n)]
    receipts = asyncio.run(together(handle, *texts))
    assert all(r.committed for r in receipts)
    assert sorted(r.version for r in receipts) == list(range(1, n + 1))
    after = handle.stats()
    transactions = after["transactions"] - before["transactions"]
    batches = after["batches"] - before["batches"]
    assert transactions == n
    assert batches < transactions
    assert after["largest_batch"] > 1
    same = lookup(handle.name, handle.namespace)
    assert same.version() == n


def test_model_search_and_recall_through_the_actor_record_what_they_retrieved(
    handle: ContextHandle,
) -> None:
    e = handle.observe("tool_result", "production config: region=cn-shanghai")
    handle.claim()
    base = handle.version()
    assert handle.submit(
        f"(context-tx (base-version {base}) (derive target (from {e['ref']}) (region cn-shanghai))"
        " (derive release (from target) (goal ship)) (derive notes (from target) (region note)))"
    ).committed
    found = handle.search({"query": "region", "kinds": ["frame"], "limit": 5}, "main")
    assert sorted(found["recalled"]) == ["notes", "target"] and found["hits"] == 2
    assert handle.read_event(found["ref"])["text"].startswith("search 'region': 2 hits")
    page = handle.recall_observation(
        {"frame_id": "target", "direction": "descendants", "max_nodes": 2}
    )
    assert page["recalled"] == ["target", "notes"] or page["recalled"] == ["target", "release"]
    rest = handle.recall_observation(
        {"frame_id": "target", "direction": "descendants", "max_nodes": 2},
        session="main",
        cursor=page["next_cursor"],
    )
    assert {*page["recalled"], *rest["recalled"]} == {"target", "notes", "release"}
    with pytest.raises(RequestError) as err:
        handle.search({"query": "region", "trust": ["quarantined"]}, "main")
    assert err.value.code == "not_permitted"
    with pytest.raises(OutOfRange):
        handle.search({"query": "region", "limit": 10_000}, "main")


def test_text_submitted_through_the_handle_is_logged_as_embedded(
    handle: ContextHandle, tmp_path: Path
) -> None:
    """One log shape whichever port committed: the handle parses once and ships the text."""
    from service.store import open_context

    texts = [
        '(context-tx (base-version 0) (reason "kept as  written")\n  (derive a (x 1)))',
        "(context-tx (base-version 1)   (revise a (x 2)) (derive b (from a) (y 1)))",
    ]
    embedded = open_context(tmp_path / "embedded", "twin")
    try:
        for i, text in enumerate(texts):
            assert handle.submit(text, client_id=f"c-{i}").committed
            assert asyncio.run(handle.submit_async(text, client_id=f"c-{i}")).duplicate
            assert embedded.commit(text, client_id=f"c-{i}").committed
            remote, local = handle.txlog(i + 1), embedded.txlog(i + 1)
            # the actor logs the operations applied (printed from them), not the client's text
            assert remote["text"] == print_tx(tx_from_dict(remote["tx"]))
            assert tx_from_dict(remote["tx"]).ops == parse_tx(text).ops
            assert remote.pop("time") > 0 and local.pop("time") > 0
            assert {k: v for k, v in remote.items() if k not in ("text", "tx")} == {
                k: v for k, v in local.items() if k not in ("text", "tx")
            }
    finally:
        embedded.close()


def test_fixed_shape_replies_are_typed_and_read_like_the_dicts_they_were(
    handle: ContextHandle,
) -> None:
    seen = handle.observe("tool_result", "regression suite: 412 passed")
    assert isinstance(seen, ObserveReply) and seen["ref"] == seen.ref == "@e1"
    claim = handle.claim()
    assert isinstance(claim, ClaimReply) and claim == {
        "tick": 1,
        "advanced": True,
        "claimed": ["@e1"],
        "finalized": [],
        "version": 0,
    }
    assert handle.submit("(context-tx (base-version 0) (derive r (from @e1) (ok)))").committed
    frame = handle.frame("r")
    assert isinstance(frame, FrameReply) and frame.sources == frame["sources"] == ["@e1"]
    assert "as_of" not in frame and frame.get("due_tick") is None
    page = asyncio.run(handle.read_event_async("@e1", 0, 10))
    assert isinstance(page, EventPage) and page.text == "regression" and page["more"]
    state = handle.state()
    assert isinstance(state, StateReply) and [f["id"] for f in state.frames] == ["r"]
    assert handle.meta()["version"] == handle.snapshot(["r"])["version"] == 1
