"""Replication without Ray, on real LMDB files: the batch codec, the recording store,
the follower's ordering, gap and epoch rules, acknowledged-only reads, snapshots."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.errors import MorphzError, RequestError, StoreError, WireError
from protocol.forget import Rewrite
from protocol.view import Changeset, ReadView
from service.context import Context
from storage import LmdbStore
from storage.replication import (
    FENCED,
    REPLICA_GAP,
    STALE_EPOCH,
    Follower,
    ReplicatedStore,
    ReplicationState,
    decode_batch,
    encode_batch,
    install,
    snapshot,
    store_state,
)
from storage.replication.codec import (
    CHAIN_START,
    FORMAT,
    OutboxAck,
    control_mac,
    encode_op,
    opened,
    seal,
)
from storage.replication.fence import COPY_KEY, HELD_PREFIX, STATE_KEY, kept_range
from tests.examples import examples

TABLES_COMPARED = (
    "frames events event_ids contents rel_fwd rel_rev cites lastmod clients txlog history"
    " due inbox outbox traces".split()
)


def dump(store: LmdbStore) -> dict[str, list[tuple[bytes, bytes]]]:
    """Every row of the compared tables, and the engine's own meta rows (not the
    replication record, the batches kept or a follower's copy marker)."""

    def run(view: ReadView) -> dict[str, list[tuple[bytes, bytes]]]:
        out = {}
        for name in TABLES_COMPARED:
            out[name] = list(view._txn.cursor(db=view._db[name]))  # type: ignore[attr-defined]
        meta = view._txn.cursor(db=view._db["meta"])  # type: ignore[attr-defined]
        out["meta"] = [
            (k, v)
            for k, v in meta
            if k not in (STATE_KEY, COPY_KEY) and not k.startswith(HELD_PREFIX)
        ]
        # The Meta record and the outbox counter (in LMDB's main database since format 4).
        main = view._txn.cursor(db=view._db["main"])  # type: ignore[attr-defined]
        out["main"] = [(k, v) for k, v in main if k.startswith(b"\x00")]
        return out

    return store.read(run)


KEY = bytes(range(32))
"""The replication key both sides of a :class:`Pair` hold."""


class Pair:
    """A primary store wrapped for replication and one follower, shipping in-process.
    ``sealed`` keeps what was shipped, ``batches`` the format-1 batches inside."""

    def __init__(self, root: Path, *, epoch: int = 0, retain: int = 4096) -> None:
        self.primary = LmdbStore.open(root / "primary", sync=False)
        self.replica = LmdbStore.open(root / "follower", sync=False)
        self.follower = Follower(self.replica, key=KEY)
        self.batches: list[bytes] = []
        self.sealed: list[bytes] = []
        self.fail: Callable[[int, bytes], None] | None = None
        self.cut = False
        """True: batches are dropped on the way (the follower falls behind unnoticed)."""
        self.store = ReplicatedStore(
            self.primary, epoch=epoch, ship=self.ship, key=KEY, retain=retain
        )

    def ship(self, seq: int, data: bytes) -> None:
        if self.fail is not None:
            self.fail(seq, data)
        if self.cut:
            return
        self.sealed.append(data)
        self.batches.append(opened(data)[1])
        self.follower.receive(data)

    def close(self) -> None:
        self.primary.close()
        self.replica.close()


@pytest.fixture
def pair(tmp_path: Path) -> Any:
    p = Pair(tmp_path)
    yield p
    p.close()


def _tx(i: int, base: int = 0) -> str:
    return f"(context-tx (base-version {base}) (derive note/{i} (i {i})))"


def _work(ctx: Context, steps: list[tuple[str, int]]) -> None:
    for kind, i in steps:
        if kind == "observe":
            ctx.observe("tool_result", f"observation {i} " + "x" * (i * 37 % 5000))
        elif kind == "claim":
            ctx.claim()
        elif kind == "derive":
            ctx.submit(_tx(i), client_id=f"c-{i}")
        elif kind == "revise":
            ctx.submit(
                f"(context-tx (base-version {ctx.version()}) (revise note/{i} (i {i} again)))",
                client_id=f"r-{i}-{ctx.version()}",
            )
        elif kind == "relate":
            ctx.submit(
                f"(context-tx (base-version 0) (relate note/{i} supports note/{i + 1}))",
                client_id=f"rel-{i}",
            )


STEPS = st.lists(
    st.tuples(
        st.sampled_from(["observe", "claim", "derive", "revise", "relate"]), st.integers(0, 6)
    ),
    min_size=1,
    max_size=25,
)


@settings(
    max_examples=examples(25),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(steps=STEPS)
def test_a_follower_applying_every_batch_holds_the_primarys_store(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, int]]
) -> None:
    p = Pair(tmp_path_factory.mktemp("pair"))
    try:
        ctx = Context(p.store, name="c")
        _work(ctx, steps)
        for data in p.batches:  # the codec round-trips every batch byte for byte
            assert encode_batch(decode_batch(data)) == data
        p.follower.drain()
        assert dump(p.replica) == dump(p.primary)
        assert p.follower.state == store_state(p.primary) == p.store.state
    finally:
        p.close()


def _without_empty(payload: Any) -> Any:
    """An operation's payload without the fields that say nothing (an empty list or
    ``lastmod``): the encoder leaves them out, and leaving them out changes nothing."""
    if not isinstance(payload, dict):
        return payload
    return {k: v for k, v in payload.items() if v != [] and not (k == "lastmod" and v == {})}


KINDS = {Changeset: "apply", Rewrite: "rewrite", OutboxAck: "outbox_ack"}


def assert_refused_or_faithful(data: bytes) -> bool:
    """*data* is refused with WireError, or decodes into exactly the batch it holds:
    the same counters, one operation per operation of the bytes, of the same kind, each
    holding what the bytes hold (nothing dropped, coerced or added). True if it decoded."""
    try:
        batch = decode_batch(data)
    except WireError:
        return False
    body = msgpack.unpackb(data[1:], raw=False, strict_map_key=False)
    header = [batch.epoch, batch.seq, batch.version, batch.acked]
    assert [type(n) for n in header] == [int] * 4 and header == body[:4]
    assert len(batch.ops) == len(body[4])
    for op, (kind, payload) in zip(batch.ops, body[4], strict=True):
        assert KINDS[type(op)] == kind
        again = msgpack.unpackb(encode_op(op), raw=False, strict_map_key=False)[1]
        assert _without_empty(again) == _without_empty(payload), kind
    return True


@settings(max_examples=examples(200), deadline=None)
@given(data=st.binary(max_size=200))
def test_random_bytes_never_decode_into_a_batch_silently(data: bytes) -> None:
    assert_refused_or_faithful(data)
    assert_refused_or_faithful(bytes([FORMAT]) + data)


@pytest.fixture(scope="module")
def real_batches(tmp_path_factory: pytest.TempPathFactory) -> list[bytes]:
    """The batches a primary shipped for a little of everything (observations, claims,
    derives, revisions, relations)."""
    p = Pair(tmp_path_factory.mktemp("real"))
    try:
        ctx = Context(p.store, name="c")
        _work(ctx, [("observe", 1), ("derive", 1), ("derive", 2), ("relate", 1)])
        _work(ctx, [("claim", 0), ("revise", 2), ("observe", 3)])
        ctx.forget("@e1", reason="leak")
        p.store.outbox_ack(p.store.outbox_last())
        return list(p.batches)
    finally:
        p.close()


# What a hostile or corrupt sender might put where a value belongs.
WRONG_VALUES: list[Any] = [None, True, -1, 2**64 - 1, 1.5, "x", b"x", [], [1], {}, {"x": 1}]

Place = tuple[Any, ...]


def _paths(value: Any, path: Place = ()) -> list[Place]:
    """Every place in a decoded msgpack document: list indexes and map keys, depth first."""
    places = [path]
    if isinstance(value, list):
        for i, item in enumerate(value):
            places += _paths(item, (*path, i))
    elif isinstance(value, dict):
        for key, item in value.items():
            places += _paths(item, (*path, key))
    return places


def _damaged(value: Any, path: Place, how: Any) -> Any:
    """A copy of *value* with the place *path* replaced by *how*, or dropped (``"drop"``),
    doubled (``"double"``, in a list) or given an unknown sibling field (``"unknown"``)."""
    if not path:
        return how
    head, rest = path[0], path[1:]
    if isinstance(value, list):
        out = list(value)
        if not rest and how == "drop":
            del out[head]
        elif not rest and how == "double":
            out.insert(head, out[head])
        else:
            out[head] = _damaged(value[head], rest, how)
        return out
    out_map = dict(value)
    if not rest and how == "drop":
        del out_map[head]
    elif not rest and how == "unknown":
        out_map["unknown_field"] = 1
    else:
        out_map[head] = _damaged(value[head], rest, how)
    return out_map


def test_every_damage_to_a_real_batch_is_refused_or_decoded_faithfully(
    real_batches: list[bytes],
) -> None:
    """Each place of each real batch, in turn: replaced by a value of a wrong type, dropped,
    doubled or given an unknown sibling. Every result is refused or decodes into exactly
    what its bytes hold; none is lost silently."""
    refused = decoded = 0
    for original in real_batches:
        assert assert_refused_or_faithful(original)  # the undamaged batch decodes
        body = msgpack.unpackb(original[1:], raw=False, strict_map_key=False)
        for path in _paths(body)[1:]:
            for how in [*WRONG_VALUES, "drop", "double", "unknown"]:
                if how in ("double",) and not isinstance(path[-1], int):
                    continue
                damaged = msgpack.packb(_damaged(body, path, how), use_bin_type=True)
                if assert_refused_or_faithful(bytes([FORMAT]) + damaged):
                    decoded += 1
                else:
                    refused += 1
    assert refused > 0 and decoded > 0  # both outcomes were exercised


def test_the_damage_reaches_every_kind_of_operation(real_batches: list[bytes]) -> None:
    kinds = {op[0] for b in real_batches for op in msgpack.unpackb(b[1:], raw=False)[4]}
    assert kinds == {"apply", "rewrite", "outbox_ack"}


def test_malformed_batches_are_refused_and_change_nothing(pair: Pair) -> None:
    Context(pair.store, name="c").submit(_tx(1), client_id="a")
    before = dump(pair.replica), pair.follower.held_seq
    for bad in (b"", b"\x02abc", b"\x01\x95\x00\x03\x00\x00\x91\x92\xa5apply\x01"):
        with pytest.raises(WireError):
            pair.follower.receive(bad)
    assert (dump(pair.replica), pair.follower.held_seq) == before


def test_follower_refuses_gaps_and_older_epochs_and_acks_duplicates(pair: Pair) -> None:
    ctx = Context(pair.store, name="c")
    pair.fail = lambda seq, data: None
    ctx.submit(_tx(1), client_id="a")
    ctx.submit(_tx(2), client_id="b")
    first, second = pair.batches[-2], pair.batches[-1]
    held = pair.follower.held_seq
    # a retried ship of a batch it holds: acknowledged again, nothing changes
    assert pair.follower.receive(pair.sealed[-1]) == held
    # a gap: refused, the follower asks for catching up
    later = decode_batch(second)
    later.seq += 2
    with pytest.raises(RequestError) as gap:
        pair.follower.receive(seal(encode_batch(later), KEY))
    assert gap.value.code == REPLICA_GAP
    # an older epoch than the fence: refused
    pair.follower.fence(3)
    newer = decode_batch(second)
    newer.seq = held + 1
    with pytest.raises(RequestError) as stale:
        pair.follower.receive(seal(encode_batch(newer), KEY))
    assert stale.value.code == STALE_EPOCH
    assert pair.follower.held_seq == held and first


def test_follower_shows_only_acknowledged_commits(pair: Pair) -> None:
    ctx = Context(pair.store, name="c")
    for i in range(5):
        ctx.submit(_tx(i), client_id=f"c{i}")
        version = ctx.version()
        # the batch just received was not acknowledged when it was sent: held, not shown
        shown = Context(LmdbStore.open(pair.replica.path, readonly=True), name="c")
        try:
            assert shown.version() < version
            assert pair.follower.state.version == shown.version()
        finally:
            shown.backend.close()
        assert pair.follower.held_seq == pair.store.state.seq
    pair.follower.confirm(pair.store.acked)  # the watermark arrives: now shown
    assert pair.follower.state.version == ctx.version()


def test_a_failed_ship_is_not_acknowledged_and_is_shipped_before_the_next_write(
    pair: Pair,
) -> None:
    ctx = Context(pair.store, name="c")

    def down(seq: int, data: bytes) -> None:
        raise StoreError("followers unreachable", code="replicas_unavailable")

    pair.fail = down
    with pytest.raises(StoreError):
        ctx.submit(_tx(1), client_id="once")
    assert pair.store.acked < pair.store.state.seq  # durable here, not acknowledged
    pair.fail = None
    again = ctx.submit(_tx(1), client_id="once")  # the client's retry
    assert again.duplicate and pair.store.acked == pair.store.state.seq
    pair.follower.drain()
    assert dump(pair.replica) == dump(pair.primary)


def test_a_stale_epoch_answer_fences_the_primary_for_good(pair: Pair) -> None:
    ctx = Context(pair.store, name="c")
    ctx.submit(_tx(1), client_id="a")
    pair.follower.fence(1)  # a newer primary was promoted
    with pytest.raises(RequestError) as first:
        ctx.submit(_tx(2), client_id="b")
    assert first.value.code == FENCED and pair.store.fenced
    with pytest.raises(RequestError) as later:
        ctx.observe("tool_result", "after the fence")
    assert later.value.code == FENCED
    assert pair.follower.state.version == 0 or pair.follower.held_seq < pair.store.state.seq


def test_opening_under_an_older_epoch_than_the_store_has_seen_is_refused(tmp_path: Path) -> None:
    store = LmdbStore.open(tmp_path / "s", sync=False)
    try:
        ReplicatedStore(store, epoch=4, ship=lambda seq, data: None)
        assert store_state(store) == ReplicationState(4, 0, 0)
        with pytest.raises(RequestError) as e:
            ReplicatedStore(store, epoch=3, ship=lambda seq, data: None)
        assert e.value.code == STALE_EPOCH
    finally:
        store.close()


def test_exactly_once_survives_promotion_of_the_follower(pair: Pair) -> None:
    ctx = Context(pair.store, name="c")
    receipts = [ctx.submit(_tx(i), client_id=f"k{i}") for i in range(6)]
    pair.follower.drain()
    pair.follower.fence(1)
    promoted = Context(ReplicatedStore(pair.replica, epoch=1, ship=lambda s, d: None), name="c")
    for r in receipts:
        again = promoted.submit(_tx(r.version - 1), client_id=r.client_id)
        assert again.duplicate and again.version == r.version
    assert promoted.version() == ctx.version()


def test_a_snapshot_installed_replaces_a_diverged_store(tmp_path: Path) -> None:
    p = Pair(tmp_path)
    try:
        ctx = Context(p.store, name="c")
        for i in range(4):
            ctx.submit(_tx(i), client_id=f"s{i}")
        data, state = snapshot(p.primary)
        assert state == p.store.state
        # an old primary's store holding a commit nobody acknowledged
        old = LmdbStore.open(tmp_path / "old", sync=False)
        Context(old, name="c").submit(_tx(99), client_id="never-acked")
        old.close()
        install(str(tmp_path / "old"), data)
        back = LmdbStore.open(tmp_path / "old", sync=False)
        try:
            assert dump(back) == dump(p.primary)
            rejoined = Follower(back, key=KEY)
            assert rejoined.state == state
            ctx.submit(_tx(10), client_id="after")
            rejoined.receive(p.sealed[-1])
            rejoined.drain()
            assert dump(back) == dump(p.primary)
        finally:
            back.close()
    finally:
        p.close()


def test_bad_snapshot_data_is_a_store_error(tmp_path: Path) -> None:
    target = tmp_path / "t"
    install(str(target), b"not an lmdb file")
    with pytest.raises(MorphzError):
        LmdbStore.open(target).close()


def test_a_batch_from_a_newer_epoch_needs_a_snapshot_first(pair: Pair) -> None:
    ctx = Context(pair.store, name="c")
    ctx.submit(_tx(1), client_id="a")
    newer = decode_batch(pair.batches[-1])
    newer.epoch, newer.seq = 1, pair.follower.held_seq + 1
    before = dump(pair.replica)
    with pytest.raises(RequestError) as e:
        pair.follower.receive(seal(encode_batch(newer), KEY))
    assert e.value.code == REPLICA_GAP and dump(pair.replica) == before


def test_a_batch_without_the_key_is_refused_and_the_real_one_still_lands(pair: Pair) -> None:
    """The attack: a process that can call the follower sends an empty batch with the next
    sequence number, so the primary's real batch would be taken for a duplicate and an
    acknowledged commit lost at the next failover. Unsealed, sealed with another key, with
    a byte changed under a good seal, sealed with the key but not chained to the batch the
    follower holds, an earlier real batch replayed, or a "duplicate" that is not the batch
    held: refused ``bad_mac``, nothing held; the real batch lands."""
    ctx = Context(pair.store, name="c")
    ctx.submit(_tx(1), client_id="a")
    ctx.submit(_tx(2), client_id="a2")
    held, before = pair.follower.held_seq, dump(pair.replica)
    head = decode_batch(pair.batches[-1])
    forged = encode_batch(type(head)(epoch=head.epoch, seq=held + 1, version=head.version, acked=0))
    sealed = pair.sealed[-1]
    tampered = sealed[:-1] + bytes([sealed[-1] ^ 1])
    unchained = seal(forged, KEY)  # the right key, the chain's start: not after batch `held`
    first = decode_batch(pair.batches[0])
    first.seq = held + 1
    replayed = seal(encode_batch(first), KEY, opened(pair.sealed[0])[0])  # chained elsewhere
    not_held = seal(pair.batches[-1], KEY, opened(pair.sealed[0])[0])  # seq held, other bytes
    for bad in (forged, seal(forged, b"x" * 32), tampered, b"\x02" + b"\x00" * 40, unchained,
                replayed, not_held):  # fmt: skip
        with pytest.raises(WireError) as e:
            pair.follower.receive(bad)
        assert e.value.code == "bad_mac"
    assert pair.follower.held_seq == held and dump(pair.replica) == before
    pair.fail = None
    ctx.submit(_tx(3), client_id="b")  # the primary's next batch: held, not a duplicate
    assert pair.follower.held_seq == held + 1
    pair.follower.drain()
    assert dump(pair.replica) == dump(pair.primary)


def _catch_up(p: Pair, epoch: int | None = None) -> bool:
    """What the primary does for a follower that answered ``replica_gap``: the retained
    log's tail after the batch the follower holds, if it reaches and the histories agree
    (True), sent in one MACed message; else False (a snapshot is needed)."""
    batches = p.store.tail(p.follower.held_seq, p.follower.head)
    if batches is None:
        return False
    if batches:
        epoch = p.store.state.epoch if epoch is None else epoch
        mac = control_mac(KEY, "catch_up", epoch, p.store.acked, opened(batches[-1])[0])
        p.follower.catch_up(epoch, p.store.acked, batches, mac)
    return True


def test_a_follower_behind_within_the_retained_log_catches_up_from_it(tmp_path: Path) -> None:
    """A follower 30 batches behind a primary keeping 50: caught up from the log in one
    message, every acknowledged commit there; 60 behind: the log does not reach, a snapshot
    is needed; the primary keeps exactly its retained length."""
    p = Pair(tmp_path, retain=50)
    try:
        ctx = Context(p.store, name="c")
        for i in range(10):
            ctx.submit(_tx(i), client_id=f"a{i}")
        p.cut = True
        for i in range(30):
            ctx.observe("tool_result", f"while cut off {i}")
        n = p.store.state.seq
        assert p.follower.held_seq == n - 30
        assert _catch_up(p) and p.follower.held_seq == n
        p.follower.drain()
        assert dump(p.replica) == dump(p.primary)
        assert p.store.retained() == (1, n)
        for i in range(60):
            ctx.observe("tool_result", f"cut off longer {i}")
        assert p.store.retained() == (n + 11, n + 60)  # the last 50 batches
        assert not _catch_up(p) and p.follower.held_seq == n  # beyond the log: snapshot
        data, _ = snapshot(p.primary)
        p.follower.store.close()
        install(p.replica.path, data)
        p.replica = LmdbStore.open(tmp_path / "follower", sync=False)
        p.follower = Follower(p.replica, key=KEY)
        assert p.follower.held_seq == n + 60 and p.follower.head == p.store.state.digest
        p.cut = False
        ctx.submit(_tx(99), client_id="after")  # the chain goes on from the snapshot
        p.follower.drain()
        assert dump(p.replica) == dump(p.primary)
    finally:
        p.close()


def test_a_catch_up_takes_only_the_continuation_of_the_followers_own_history(
    tmp_path: Path,
) -> None:
    """Forged, reordered, truncated or foreign catch-up messages hold nothing; one from an
    older epoch than the follower's fence is stale; a follower whose held batch the primary
    never wrote (a deposed primary's unacknowledged tail), one holding nothing, and any
    follower of a primary opened again are not caught up from the log: a snapshot."""
    p = Pair(tmp_path, retain=100)
    try:
        ctx = Context(p.store, name="c")
        ctx.submit(_tx(0), client_id="a0")
        p.cut = True
        for i in range(5):
            ctx.submit(_tx(i + 1), client_id=f"b{i}")
        batches = p.store.tail(p.follower.held_seq, p.follower.head)
        assert batches is not None and len(batches) == 5
        before = dump(p.replica), p.follower.held_seq
        acked = p.store.acked
        good = control_mac(KEY, "catch_up", 0, acked, opened(batches[-1])[0])
        for bad_batches, mac in (
            (batches, b"\x00" * 32),  # no MAC
            (batches, control_mac(KEY, "catch_up", 0, acked + 9, opened(batches[-1])[0])),
            (batches[1:], control_mac(KEY, "catch_up", 0, acked, opened(batches[-1])[0])),
            (batches[::-1], control_mac(KEY, "catch_up", 0, acked, opened(batches[0])[0])),
            ([*batches[:2], p.sealed[0], *batches[2:]], good),
        ):
            with pytest.raises(WireError) as e:
                p.follower.catch_up(0, acked, bad_batches, mac)
            assert e.value.code == "bad_mac"
        with pytest.raises(WireError):
            p.follower.catch_up(0, acked, [], good)
        assert (dump(p.replica), p.follower.held_seq) == before
        assert _catch_up(p) and p.follower.held_seq == p.store.state.seq  # the real one
        p.follower.drain()
        assert dump(p.replica) == dump(p.primary)
        # a newer primary exists (the follower is fenced at 1): the old one's catch-up is stale
        ctx.submit(_tx(50), client_id="later")
        p.follower.fence(1)
        late = p.store.tail(p.follower.held_seq, p.follower.head)
        assert late is not None and len(late) == 1
        with pytest.raises(RequestError) as stale:
            p.follower.catch_up(0, p.store.acked, late, control_mac(
                KEY, "catch_up", 0, p.store.acked, opened(late[-1])[0]))  # fmt: skip
        assert stale.value.code == STALE_EPOCH
        # a primary opened again after a write outside any batch (changed settings) starts
        # a new chain: the follower is not caught up from the log, it gets a snapshot
        Context(p.primary, name="c").record_settings({"replication_log": 100})
        p.store = ReplicatedStore(p.primary, epoch=1, ship=p.ship, key=KEY, retain=100)
        assert not p.store.continued and p.store.retained() is None
        assert p.store.tail(p.follower.held_seq, p.follower.head) is None
        assert p.store.tail(0, b"\x00" * 32) is None  # holding nothing: always a snapshot
        # a follower that holds a batch this primary never wrote: a snapshot, never the log
        lone = Pair(tmp_path / "lone", retain=100)
        Context(lone.store, name="c").submit(_tx(7), client_id="elsewhere")
        assert lone.store.tail(lone.follower.held_seq, lone.follower.head) == []
        assert p.store.tail(lone.follower.held_seq, lone.follower.head) is None
        lone.close()
    finally:
        p.close()


def test_the_retained_length_recorded_in_the_settings_bounds_the_followers_log(
    tmp_path: Path,
) -> None:
    p = Pair(tmp_path, retain=8)
    try:
        ctx = Context(p.store, name="c")
        ctx.record_settings({"replication_log": 8})
        for i in range(20):
            ctx.observe("tool_result", f"o{i}")
        p.follower.drain()
        kept = p.replica.read(kept_range)
        n = p.store.state.seq
        assert kept == p.store.retained() == (n - 7, n), kept
    finally:
        p.close()


def test_a_promoted_follower_goes_on_with_the_chain_and_catches_the_others_up_from_the_log(
    tmp_path: Path,
) -> None:
    """Two followers, one of them 3 batches behind; the other is promoted (drained, every
    follower fenced, its store opened as the primary of epoch 1, its settings recorded
    unchanged): it goes on with the old chain and keeps the retained log, so the one behind
    is caught up from the log, not by a snapshot, and takes the new primary's batches
    directly. Opening a store written
    outside any batch since its last batch starts a new chain instead."""
    p = Pair(tmp_path, retain=100)
    other = LmdbStore.open(tmp_path / "other", sync=False)
    behind = Follower(other, key=KEY)
    try:
        ctx = Context(p.store, name="c")
        ctx.record_settings({"replication_log": 100})
        for i in range(4):
            ctx.submit(_tx(i), client_id=f"a{i}")
        for data in p.sealed:
            behind.receive(data)
        for i in range(3):
            ctx.observe("tool_result", f"not at the other follower {i}")
        assert behind.held_seq == p.follower.held_seq - 3
        p.follower.drain()
        p.follower.fence(1)
        behind.fence(1)
        settings = Context(p.replica, name="c").settings()
        assert Context(p.replica, name="c").record_settings(settings or {}) is False
        shipped: list[bytes] = []
        promoted = ReplicatedStore(
            p.replica, epoch=1, ship=lambda seq, data: shipped.append(data), key=KEY, retain=100
        )
        assert promoted.continued and promoted.state.digest == p.follower.head
        assert promoted.retained() == (1, p.follower.held_seq)
        batches = promoted.tail(behind.held_seq, behind.head)
        assert batches is not None and len(batches) == 3
        mac = control_mac(KEY, "catch_up", 1, promoted.acked, opened(batches[-1])[0])
        behind.catch_up(1, promoted.acked, batches, mac)
        Context(promoted, name="c").submit(_tx(10), client_id="after")
        behind.receive(shipped[-1])  # the new primary's batch follows at once
        behind.drain()
        assert dump(other) == dump(p.replica)
        # the log reaches back to the store's creation (batch 1, chained to the chain's
        # start): even a follower holding nothing can take it; another history cannot
        full = promoted.tail(0, CHAIN_START)
        assert full is not None and len(full) == promoted.state.seq
        assert promoted.tail(0, b"\x01" * 32) is None
        # written outside any batch since: a new chain, the log dropped
        Context(p.replica, name="c").record_settings({"replication_log": 99})
        again = ReplicatedStore(p.replica, epoch=1, ship=lambda s, d: None, key=KEY)
        assert not again.continued and again.retained() is None
        assert again.tail(behind.held_seq, behind.head) is None
    finally:
        other.close()
        p.close()
