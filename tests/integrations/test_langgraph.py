"""MorphzStore: LangGraph's store contract on a real context, conditional puts, and the
lost-update workload (several writers read-modify-writing one key) losing nothing."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchItem,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore

from morphz.integrations.langgraph import MorphzStore, StoreConflict, frame_id_for
from protocol.errors import MorphzError, OutOfRange, RequestError
from protocol.ids import is_frame_id
from service.context import Context
from service.store import open_context
from tests.actors.cluster import RayCluster

NS = ("agents", "shared")
KEY = "notes"


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[Context]:
    context = open_context(tmp_path / "store", "lg", sync=False)
    yield context
    context.close()


@pytest.fixture
def store(ctx: Context) -> MorphzStore:
    return MorphzStore(ctx)


# -- the store contract (what LangGraph's own stores do) -------------------------------


def test_put_get_round_trips_the_value_exactly(store: MorphzStore) -> None:
    value = {
        "text": 'héllo "wörld"\n\t中文 \\ (paren) ; semi',
        "n": 1.5,
        "big": 10**30,
        "neg": -3,
        "flag": True,
        "none": None,
        "nested": {"list": [1, "two", {"three": [3.25e-7]}], "empty": {}},
    }
    store.put(("users", "u1"), "prefs", value)
    item = store.get(("users", "u1"), "prefs")
    assert item is not None
    assert item.value == value and list(item.value) == list(value)
    assert (item.namespace, item.key) == (("users", "u1"), "prefs")
    assert item.created_at == item.updated_at
    assert store.get(("users", "u1"), "other") is None
    assert store.get(("users",), "prefs") is None


def test_a_second_put_replaces_the_value_and_keeps_created_at(store: MorphzStore) -> None:
    store.put(NS, KEY, {"v": 1})
    first = store.get(NS, KEY)
    store.put(NS, KEY, {"w": 2})
    second = store.get(NS, KEY)
    assert first is not None and second is not None
    assert second.value == {"w": 2}
    assert second.created_at == first.created_at and second.updated_at >= first.updated_at


def test_delete_retires_the_frame_and_its_history_stays(ctx: Context, store: MorphzStore) -> None:
    store.put(NS, KEY, {"v": 1})
    store.delete(NS, KEY)
    assert store.get(NS, KEY) is None
    assert store.search(NS) == []
    fid = frame_id_for(NS, KEY)
    assert ctx.frame(fid).lifecycle in ("retiring", "retired")
    assert [h.op for h in ctx.history(fid)][:2] == ["derive", "lifecycle"]
    store.delete(NS, "never-there")  # deleting what is absent is a no-op, as in LangGraph
    store.put(NS, KEY, {"v": 2})  # a put after a delete brings the key back
    item = store.get(NS, KEY)
    assert item is not None and item.value == {"v": 2}
    assert ctx.frame(fid).lifecycle == "active"


def test_batch_runs_ops_in_order(store: MorphzStore) -> None:
    results = store.batch(
        [
            PutOp(NS, "a", {"n": 1}),
            GetOp(NS, "a"),
            PutOp(NS, "a", None),
            GetOp(NS, "a"),
            ListNamespacesOp(),
        ]
    )
    assert results[0] is None and results[2] is None and results[3] is None
    assert results[1] is not None and results[1].value == {"n": 1}  # type: ignore[union-attr]
    assert results[4] == []


def test_search_by_namespace_prefix_filter_and_paging(store: MorphzStore) -> None:
    store.put(("docs", "a"), "d1", {"text": "python tutorial", "type": "report", "score": 3})
    store.put(("docs", "a"), "d2", {"text": "typescript guide", "type": "memo", "score": 7})
    store.put(("docs", "b"), "d3", {"text": "rust book", "type": "report", "score": 9})
    store.put(("other",), "d4", {"text": "python snake", "type": "report"})

    def keys(items: list[SearchItem]) -> list[str]:
        return sorted(i.key for i in items)

    assert keys(store.search(("docs",))) == ["d1", "d2", "d3"]
    assert keys(store.search(("docs", "a"))) == ["d1", "d2"]
    assert keys(store.search(())) == ["d1", "d2", "d3", "d4"]
    assert keys(store.search(("docs",), filter={"type": "report"})) == ["d1", "d3"]
    assert keys(store.search(("docs",), filter={"score": {"$gt": 5}})) == ["d2", "d3"]
    assert keys(store.search(("docs",), filter={"type": {"$ne": "memo"}})) == ["d1", "d3"]
    assert len(store.search(("docs",), limit=2)) == 2
    paged = store.search(("docs",), limit=2) + store.search(("docs",), limit=2, offset=2)
    assert keys(paged) == ["d1", "d2", "d3"]
    hits = store.search(("docs",), query="python")  # the context's lexical search
    assert [(i.namespace, i.key) for i in hits] == [(("docs", "a"), "d1")]
    assert keys(store.search((), query="python")) == ["d1", "d4"]
    assert store.search(("docs",), query="python", filter={"type": "memo"}) == []
    assert store.search(("nothing",)) == []


def test_list_namespaces_with_conditions_depth_and_paging(store: MorphzStore) -> None:
    for ns in [("a", "b", "c"), ("a", "b", "d"), ("a", "x"), ("z", "b"), ("z", "y", "d")]:
        store.put(ns, "k", {"v": 1})
    assert store.list_namespaces() == [
        ("a", "b", "c"),
        ("a", "b", "d"),
        ("a", "x"),
        ("z", "b"),
        ("z", "y", "d"),
    ]
    assert store.list_namespaces(prefix=("a",)) == [("a", "b", "c"), ("a", "b", "d"), ("a", "x")]
    assert store.list_namespaces(suffix=("d",)) == [("a", "b", "d"), ("z", "y", "d")]
    assert store.list_namespaces(prefix=("*", "b")) == [
        ("a", "b", "c"),
        ("a", "b", "d"),
        ("z", "b"),
    ]
    assert store.list_namespaces(max_depth=1) == [("a",), ("z",)]
    assert store.list_namespaces(limit=2, offset=1) == [("a", "b", "d"), ("a", "x")]
    ops = [ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("z",)),), max_depth=2)]
    assert store.batch(ops) == [[("z", "b"), ("z", "y")]]
    assert store.batch([SearchOp(("a",), limit=0)]) == [[]]
    store.delete(("a", "x"), "k")
    assert ("a", "x") not in store.list_namespaces()


def test_the_same_contract_as_langgraphs_in_memory_store(store: MorphzStore) -> None:
    """One script on both stores gives the same answers (ordering aside)."""

    def script(s: BaseStore) -> list[Any]:
        out: list[Any] = []
        s.put(("u", "1"), "a", {"x": 1, "tags": ["p", "q"]})
        s.put(("u", "1"), "b", {"x": 2})
        s.put(("u", "2"), "a", {"x": 3})
        s.put(("u", "1"), "b", {"x": 4})
        s.delete(("u", "2"), "a")
        item = s.get(("u", "1"), "b")
        out.append(item.value if item else None)
        out.append(s.get(("u", "2"), "a"))
        out.append(sorted((i.namespace, i.key, str(i.value)) for i in s.search(("u",))))
        out.append(sorted(i.key for i in s.search(("u",), filter={"tags": ["p", "q"]})))
        out.append(sorted(s.list_namespaces(prefix=("u",))))
        return out

    memory = script(InMemoryStore())
    memory[4] = [ns for ns in memory[4] if ns != ("u", "2")]  # it keeps emptied namespaces
    assert script(store) == memory


def test_async_forms(store: MorphzStore) -> None:
    async def run() -> None:
        await store.aput(NS, KEY, {"v": 1})
        item = await store.aget(NS, KEY)
        assert item is not None and item.value == {"v": 1}
        await store.aput(NS, KEY, {"v": 2})  # based on the read made in this task
        assert [i.key for i in await store.asearch(NS)] == [KEY]
        assert await store.alist_namespaces() == [NS]
        await store.adelete(NS, KEY)
        assert await store.aget(NS, KEY) is None

    asyncio.run(run())


def test_import_morphz_does_not_need_langgraph() -> None:
    code = (
        "import sys, morphz, morphz.cli, morphz.integrations;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'langgraph'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- ids ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("namespace", "key"),
    [
        (("users", "u1"), "prefs"),
        (("a b", "c/d", "e:f g"), "k:1 @e1 (x) a.b"),
        (("中文",), "发布"),
        (("x",), ""),
        (("x" * 100, "y" * 60, "z"), "k" * 300),
        (("u",) * 5, "ключ"),
        (("a-b_c",), "-"),
    ],
)
def test_every_item_gets_a_valid_frame_id_and_round_trips(
    store: MorphzStore, namespace: tuple[str, ...], key: str
) -> None:
    fid = frame_id_for(namespace, key)
    assert is_frame_id(fid) and fid.startswith("lg/")
    store.put(namespace, key, {"k": key})
    item = store.get(namespace, key)
    assert item is not None and (item.namespace, item.key, item.value) == (
        namespace,
        key,
        {"k": key},
    )
    assert namespace in store.list_namespaces()
    assert [i.key for i in store.search(namespace)] == [key]


def test_ids_are_distinct_and_prefixes_stay_prefixes() -> None:
    pairs = [
        (("a",), "b/c"),
        (("a", "b"), "c"),
        (("a.2fb",), "c"),
        (("a",), "b.2fc"),
        (("A",), "b"),
    ]
    ids = [frame_id_for(ns, k) for ns, k in pairs]
    assert len(set(ids)) == len(ids)
    long = ("l" * 90, "m" * 45, "n")
    assert frame_id_for(long, "k").startswith(frame_id_for(long[:2], "k").rsplit("/", 1)[0] + "/")


# -- bad input: a typed error and nothing written ------------------------------------


@pytest.mark.parametrize(
    ("namespace", "key", "value", "error"),
    [
        (NS, KEY, {"x": float("nan")}, RequestError),
        (NS, KEY, {"x": float("inf")}, RequestError),
        (NS, KEY, {1: "int key"}, RequestError),
        (NS, KEY, {"x": object()}, RequestError),
        (NS, KEY, {"x": {"y": {2: 3}}}, RequestError),
        (NS, KEY, "not a dict", RequestError),
        (NS, KEY, {"x": "a" * (1 << 20)}, OutOfRange),
        (NS, KEY, {"x": "\ud800 lone surrogate"}, None),  # escaped, accepted
        (NS, "\udc00", {"x": 1}, RequestError),
        (tuple("abcdefghij"), "k", {"x": 1}, None),
        (tuple("x" * 41 for _ in range(6)), "k", {"x": 1}, OutOfRange),
    ],
)
def test_bad_input_is_refused_and_writes_nothing(
    ctx: Context, store: MorphzStore, namespace: Any, key: Any, value: Any, error: type | None
) -> None:
    before = ctx.version()
    if error is None:
        store.put(namespace, key, value)
        item = store.get(namespace, key)
        assert item is not None and item.value == value
        return
    with pytest.raises(error) as info:
        store.put(namespace, key, value)
    assert isinstance(info.value, MorphzError) and info.value.message
    assert ctx.version() == before


@pytest.mark.parametrize(
    "namespace", [("a.b",), ("",), ("langgraph", "x"), (), ("ok", 3), ("nul\x00",)]
)
def test_invalid_namespaces_are_langgraphs_error(
    ctx: Context, store: MorphzStore, namespace: Any
) -> None:
    with pytest.raises((InvalidNamespaceError, ValueError)):
        store.put(namespace, "k", {"v": 1})
    with pytest.raises((InvalidNamespaceError, ValueError)):
        store.batch([PutOp(namespace, "k", {"v": 1})])
    assert ctx.version() == 0


def test_ttl_and_bad_arguments_are_refused(ctx: Context, store: MorphzStore) -> None:
    assert store.supports_ttl is False
    with pytest.raises(NotImplementedError):
        store.put(NS, KEY, {"v": 1}, ttl=5)
    with pytest.raises(NotImplementedError):
        store.batch([PutOp(NS, KEY, {"v": 1}, ttl=5.0)])
    with pytest.raises(OutOfRange):
        store.batch([SearchOp(NS, limit=-1)])
    with pytest.raises(OutOfRange):
        store.batch([ListNamespacesOp(max_depth=0)])
    with pytest.raises(RequestError):
        store.batch([PutOp(NS, 42, {"v": 1})])  # type: ignore[arg-type]
    store.put(NS, "n", {"n": 1})
    with pytest.raises(RequestError):
        store.search(NS, filter={"n": {"$regex": "x"}})
    with pytest.raises(RequestError):
        MorphzStore(ctx, root="9bad")
    with pytest.raises(RequestError):
        MorphzStore(ctx, merge="not callable")  # type: ignore[arg-type]
    with pytest.raises(OutOfRange):
        MorphzStore(ctx, max_attempts=0)


def test_a_foreign_frame_under_the_root_is_not_an_item(ctx: Context, store: MorphzStore) -> None:
    ctx.submit(f"(context-tx (base-version {ctx.version()}) (derive lg/notes/k (free text)))")
    with pytest.raises(RequestError) as info:
        store.get(("notes",), "k")
    assert info.value.code == "not_an_item"
    with pytest.raises(RequestError):
        store.put(("notes",), "k", {"v": 1})


# -- conditional puts -----------------------------------------------------------------


def test_a_put_based_on_a_stale_read_is_a_conflict(ctx: Context) -> None:
    mine, theirs = MorphzStore(ctx), MorphzStore(ctx)
    mine.put(NS, KEY, {"v": 0})
    assert theirs.get(NS, KEY) is not None
    theirs.put(NS, KEY, {"v": "theirs"})
    version = ctx.version()
    with pytest.raises(StoreConflict) as info:
        mine.put(NS, KEY, {"v": "mine"})
    err = info.value
    assert err.code == "conflict" and (err.namespace, err.key) == (NS, KEY)
    assert err.frame_id == frame_id_for(NS, KEY) and err.base_version < version
    assert err.conflicts == ((err.frame_id, version),)
    assert err.to_dict()["conflicts"] == [[err.frame_id, version]]
    assert ctx.version() == version  # nothing written
    item = mine.get(NS, KEY)  # read again, then the put goes through
    assert item is not None and item.value == {"v": "theirs"}
    mine.put(NS, KEY, {"v": "mine"})
    assert theirs.get(NS, KEY).value == {"v": "mine"}  # type: ignore[union-attr]


def test_puts_of_different_keys_of_one_item_both_commit(ctx: Context) -> None:
    mine, theirs = MorphzStore(ctx), MorphzStore(ctx)
    mine.put(NS, KEY, {"status": "open", "owner": "ana", "tags": ["a"]})
    seen_mine, seen_theirs = mine.get(NS, KEY), theirs.get(NS, KEY)
    assert seen_mine is not None and seen_theirs is not None
    theirs.put(NS, KEY, {**seen_theirs.value, "status": "blocked"})
    mine.put(NS, KEY, {**seen_mine.value, "owner": "bo", "tags": ["a", "b"]})  # stale: merges
    item = theirs.get(NS, KEY)
    assert item is not None
    assert item.value == {"status": "blocked", "owner": "bo", "tags": ["a", "b"]}
    assert item.updated_at >= item.created_at
    # The same key from a stale read still collides, and names the item's frame.
    assert mine.get(NS, KEY) is not None and theirs.get(NS, KEY) is not None
    theirs.put(NS, KEY, {**item.value, "status": "done"})
    with pytest.raises(StoreConflict) as info:
        mine.put(NS, KEY, {**item.value, "status": "shipped"})
    assert info.value.conflicts[0][0] == frame_id_for(NS, KEY)
    # A key dropped from the value is removed; the frame holds one field per key.
    got = mine.get(NS, KEY)
    assert got is not None
    mine.put(NS, KEY, {"status": got.value["status"]})
    assert theirs.get(NS, KEY).value == {"status": "done"}  # type: ignore[union-attr]
    body = ctx.frame(frame_id_for(NS, KEY)).body
    assert '(v:status "status"' in body and "v:owner" not in body


def test_an_item_in_the_whole_value_layout_reads_and_is_rewritten(ctx: Context) -> None:
    fid = frame_id_for(NS, KEY)
    old = (
        f'(derive {fid} (item (namespace "agents" "shared") (key "notes")'
        ' (created-at "2026-01-01T00:00:00+00:00") (updated-at "2026-01-02T00:00:00+00:00"))'
        ' (value "{\\"v\\": 1}"))'
    )
    assert ctx.commit(f"(context-tx (base-version {ctx.version()}) {old})").committed
    store = MorphzStore(ctx)
    item = store.get(NS, KEY)
    assert item is not None and item.value == {"v": 1}
    store.put(NS, KEY, {"v": 2, "w": 3})
    again = MorphzStore(ctx).get(NS, KEY)
    assert again is not None and again.value == {"v": 2, "w": 3}
    assert again.created_at == item.created_at
    assert "(v:w" in ctx.frame(fid).body


def test_a_put_of_a_key_never_read_is_a_create(ctx: Context) -> None:
    first, second = MorphzStore(ctx), MorphzStore(ctx)
    first.put(NS, KEY, {"v": 1})
    with pytest.raises(StoreConflict) as info:
        second.put(NS, KEY, {"v": 2})
    assert "already exists" in info.value.message
    assert first.get(NS, KEY).value == {"v": 1}  # type: ignore[union-attr]
    assert second.seen_version(NS, KEY) is None


def test_a_read_that_saw_nothing_makes_the_put_conditional_too(ctx: Context) -> None:
    mine, theirs = MorphzStore(ctx), MorphzStore(ctx)
    assert mine.get(NS, KEY) is None
    theirs.put(NS, KEY, {"v": "theirs"})
    with pytest.raises(StoreConflict):
        mine.put(NS, KEY, {"v": "mine"})


def test_a_delete_based_on_a_stale_read_is_a_conflict(ctx: Context) -> None:
    mine, theirs = MorphzStore(ctx), MorphzStore(ctx)
    mine.put(NS, KEY, {"v": 0})
    theirs.get(NS, KEY)
    theirs.put(NS, KEY, {"v": 1})
    with pytest.raises(StoreConflict):
        mine.delete(NS, KEY)
    assert theirs.get(NS, KEY).value == {"v": 1}  # type: ignore[union-attr]


def test_a_read_older_than_the_history_kept_is_rebased_when_nothing_changed(
    tmp_path: Path,
) -> None:
    ctx = open_context(tmp_path / "short", "lg", sync=False, history_keep=2)
    try:
        mine, theirs = MorphzStore(ctx), MorphzStore(ctx)
        mine.put(NS, KEY, {"v": 0})
        mine.put(NS, "other", {"v": 0})
        for i in range(5):  # other keys move the version far past the read
            theirs.get(NS, f"k{i}")
            theirs.put(NS, f"k{i}", {"v": i})
        mine.put(NS, KEY, {"v": 1})  # too_old, unchanged since the read: re-based
        assert theirs.get(NS, KEY).value == {"v": 1}  # type: ignore[union-attr]
        theirs.get(NS, "other")
        theirs.put(NS, "other", {"v": "theirs"})
        for i in range(5):
            theirs.put(NS, f"k{i}", {"v": -i})
        with pytest.raises(StoreConflict):  # too_old and changed: a conflict
            mine.put(NS, "other", {"v": "mine"})
        assert theirs.get(NS, "other").value == {"v": "theirs"}  # type: ignore[union-attr]
    finally:
        ctx.close()


def test_merge_resolves_a_lost_race(ctx: Context) -> None:
    def merge(current: dict[str, Any] | None, mine: dict[str, Any]) -> dict[str, Any]:
        return {"tokens": (current or {"tokens": []})["tokens"] + mine["tokens"][-1:]}

    mine, theirs = MorphzStore(ctx, merge=merge), MorphzStore(ctx)
    mine.put(NS, KEY, {"tokens": ["a"]})
    theirs.get(NS, KEY)
    theirs.put(NS, KEY, {"tokens": ["a", "b"]})
    mine.put(NS, KEY, {"tokens": ["a", "c"]})  # based on ["a"]: merged onto ["a", "b"]
    assert theirs.get(NS, KEY).value == {"tokens": ["a", "b", "c"]}  # type: ignore[union-attr]


def test_the_read_a_put_is_based_on_belongs_to_its_thread(ctx: Context) -> None:
    """Two threads sharing one store: each one's put is based on its own read."""
    store = MorphzStore(ctx)
    store.put(NS, KEY, {"v": 0})
    read = threading.Barrier(2)
    outcomes: list[str] = []

    def writer(name: str) -> None:
        store.get(NS, KEY)
        read.wait()
        try:
            store.put(NS, KEY, {"v": name})
            outcomes.append("committed")
        except StoreConflict:
            outcomes.append("conflict")

    threads = [threading.Thread(target=writer, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["committed", "conflict"]


# -- the lost-update workload --------------------------------------------------------


def read_modify_write(store: BaseStore, writer: int, rounds: int) -> int:
    """*rounds* times: read the shared item, append a token, put it back, retry on a
    conflict. Answers the number of conflicts met."""
    conflicts = 0
    for i in range(rounds):
        while True:
            item = store.get(NS, KEY)
            tokens = list(item.value["tokens"]) if item is not None else []
            time.sleep(0)  # the agent's work between its read and its write
            try:
                store.put(NS, KEY, {"tokens": [*tokens, f"w{writer}-{i}"]})
                break
            except StoreConflict:
                conflicts += 1
    return conflicts


def run_workload(
    stores: Callable[[int], BaseStore], writers: int, rounds: int
) -> tuple[list[str], int]:
    """Every writer on its own thread with ``stores(writer)``; the tokens at the end and
    the conflicts the writers met (each one a lost race the store refused)."""
    stores(-1).put(NS, KEY, {"tokens": []})
    conflicts = [0] * writers

    def write(w: int) -> None:
        conflicts[w] = read_modify_write(stores(w), w, rounds)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    item = stores(-1).get(NS, KEY)
    assert item is not None
    return list(item.value["tokens"]), sum(conflicts)


def expected_tokens(writers: int, rounds: int) -> list[str]:
    return sorted(f"w{w}-{i}" for w in range(writers) for i in range(rounds))


def assert_nothing_lost(tokens: list[str], writers: int, rounds: int) -> None:
    """Every writer's every token is in the item, once, in the order that writer wrote."""
    assert sorted(tokens) == expected_tokens(writers, rounds)
    for w in range(writers):
        mine = [t for t in tokens if t.startswith(f"w{w}-")]
        assert mine == [f"w{w}-{i}" for i in range(rounds)]


def test_eight_writers_lose_no_update_sharing_one_store(ctx: Context) -> None:
    store = MorphzStore(ctx)
    tokens, conflicts = run_workload(lambda _: store, 8, 60)
    assert_nothing_lost(tokens, 8, 60)
    assert conflicts > 0  # the writers did race: the store refused stale writes


@pytest.mark.slow
def test_eight_writers_lose_no_update_with_a_store_each(ctx: Context) -> None:
    stores = {w: MorphzStore(ctx) for w in range(-1, 8)}
    tokens, conflicts = run_workload(stores.__getitem__, 8, 60)
    assert_nothing_lost(tokens, 8, 60)
    assert conflicts > 0


def test_eight_writers_with_merge_lose_no_update(ctx: Context) -> None:
    def merge(current: dict[str, Any] | None, mine: dict[str, Any]) -> dict[str, Any]:
        return {"tokens": [*(current or {"tokens": []})["tokens"], mine["tokens"][-1]]}

    store = MorphzStore(ctx, merge=merge, max_attempts=10_000)
    tokens, conflicts = run_workload(lambda _: store, 8, 30)
    assert_nothing_lost(tokens, 8, 30)
    assert conflicts == 0  # every lost race was merged, none raised


@pytest.mark.ray
def test_writers_through_a_context_actor_lose_no_update(
    ray_cluster: RayCluster, tmp_path: Path, context_name: str, namespace: str
) -> None:
    from actors import connect

    handle = connect(context_name, store_dir=tmp_path / "ray", namespace=namespace)
    try:
        stores = {w: MorphzStore(handle) for w in range(-1, 4)}
        tokens, _ = run_workload(stores.__getitem__, 4, 15)
        assert_nothing_lost(tokens, 4, 15)
        store = stores[-1]
        assert [i.key for i in store.search(NS, query="w0")] == [KEY]
        assert store.list_namespaces() == [NS]
        store.delete(NS, KEY)
        assert store.get(NS, KEY) is None
    finally:
        handle.shutdown()
