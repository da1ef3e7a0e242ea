"""The follower actor's class without Ray: envelopes, reads at the applied state, bad input,
snapshots from an older epoch refused, sealing for promotion, the member promoted in place."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.client.replies import open_reply
from actors.cluster.follower_role import READS, FollowerRead, FollowerRole
from actors.cluster.replication import sign_epoch
from protocol.errors import MorphzError, RequestError, WireError
from service.context import Context
from storage import LmdbStore
from storage.replication import ReplicatedStore, epochs, snapshot
from storage.replication.codec import control_mac, install_mac, replication_key


def KEY() -> bytes:  # noqa: N802 - reads as the constant it is
    """The replication key of context ``c`` (the test session's key directory)."""
    return replication_key("c")


def _confirm(epoch: int, acked: int) -> bytes:
    return control_mac(KEY(), "confirm", epoch, acked)


def _primary(tmp_path: Path, ship: object) -> tuple[LmdbStore, Context]:
    store = LmdbStore.open(tmp_path / "primary" / "c", sync=False)
    return store, Context(ReplicatedStore(store, epoch=0, ship=ship), name="c")  # type: ignore[arg-type]


def test_follower_actor_serves_acknowledged_reads_and_refuses_bad_input(tmp_path: Path) -> None:
    follower = FollowerRole(str(tmp_path / "follower"), "c")

    def ship(seq: int, data: bytes) -> None:
        open_reply(follower.receive(data))

    store, ctx = _primary(tmp_path, ship)
    try:
        ctx.submit("(context-tx (base-version 0) (derive a (x 1)))", client_id="a")
        ctx.submit("(context-tx (base-version 0) (derive b (x 2)))", client_id="b")
        acked = ctx.backend.acked  # type: ignore[attr-defined]
        open_reply(follower.confirm(0, acked, _confirm(0, acked)))
        read = FollowerRead.model_validate(open_reply(follower.read("frame", ["b"])))
        assert read.served_by == "follower" and read.applied_version == 2
        assert read.reply["id"] == "b"
        status = open_reply(follower.status())
        assert status["held_seq"] == status["applied_seq"] == store_seq(ctx)
        with pytest.raises(RequestError):
            open_reply(follower.read("submit", ["(context-tx)"]))
        with pytest.raises(RequestError) as bad:
            open_reply(follower.read("frame", [1, 2, 3]))
        assert bad.value.code == "bad_argument"
        with pytest.raises(WireError):
            open_reply(follower.receive(b"\x01garbage"))
        assert "frame" in READS and open_reply(follower.status()) == status
        # a snapshot from an older epoch than the follower's fence is refused
        open_reply(follower.fence(2, sign_epoch("c", 2)))
        data, _ = snapshot(store)
        with pytest.raises(RequestError) as old:
            open_reply(follower.install(data, 1, sign_epoch("c", 1), install_mac(KEY(), 1, data)))
        assert old.value.code == "stale_epoch"
        # sealed for promotion: everything applied, the store released, no more calls
        sealed = open_reply(follower.seal(3, sign_epoch("c", 3, "seal")))
        assert sealed["epoch"] == 3 and sealed["applied_seq"] == sealed["held_seq"]
        with pytest.raises(MorphzError) as after:
            open_reply(follower.status())
        assert after.value.code == "fenced"
        LmdbStore.open(tmp_path / "follower" / "c").close()  # its lock was released
    finally:
        ctx.close()


def store_seq(ctx: Context) -> int:
    return int(ctx.backend.state.seq)  # type: ignore[attr-defined]


def test_member_promoted_in_place_serves_as_primary_and_refuses_old_batches(
    tmp_path: Path,
) -> None:
    """A follower member fed by a primary becomes the primary in its own process, over the
    store it holds: every acknowledged commit is there, it commits, and a batch of the old
    primary is refused (``stale_epoch``)."""
    import asyncio

    from actors.client.handle import ContextHandle, decode_receipt
    from actors.cluster.follower import FollowerActor

    member = FollowerActor(str(tmp_path / "follower"), "c")
    shipped: list[bytes] = []

    def ship(seq: int, data: bytes) -> None:
        shipped.append(data)
        open_reply(member.receive(data))

    store, ctx = _primary(tmp_path, ship)
    ctx.submit("(context-tx (base-version 0) (derive a (x 1)))", client_id="a")
    acked = ctx.backend.acked  # type: ignore[attr-defined]
    open_reply(member.confirm(0, acked, _confirm(0, acked)))
    ctx.close()

    async def promoted() -> None:
        # named the primary by the directory, not promoted yet: every primary call that
        # reaches it first answers ``promoting`` (the caller calls again), none fails
        for early in (member.replicate(), member.follower_denials(b"x")):
            with pytest.raises(RequestError) as promoting:
                open_reply(await early)
            assert promoting.value.code == "promoting"
        with pytest.raises(RequestError) as promoting:
            await member.handshake()
        assert promoting.value.code == "promoting"
        info = await member.become_primary(1, sign_epoch("c", 1))
        assert info["open_error"] is None, info
        assert open_reply(await member.frame("a"))["id"] == "a"
        _, payload = ContextHandle.prepare("(context-tx (base-version 1) (derive b))", "b")
        receipt = decode_receipt(await member.submit(payload))
        assert receipt.committed and receipt.version == 2, receipt
        _, again = ContextHandle.prepare("(context-tx (base-version 0) (derive a (x 1)))", "a")
        assert decode_receipt(await member.submit(again)).duplicate  # acknowledged before
        twice = await member.become_primary(1, sign_epoch("c", 1))
        assert twice == await member.handshake()  # idempotent
        with pytest.raises(RequestError) as old:
            open_reply(member.receive(shipped[-1]))
        assert old.value.code == "stale_epoch"
        member.close()

    asyncio.run(promoted())


def test_control_messages_without_the_directorys_or_primarys_mac_change_nothing(
    tmp_path: Path,
) -> None:
    """The cluster-inside findings: ``fence(2**62)`` from any caller fenced a follower for
    good; ``seal``, ``install``, ``confirm`` and ``become_primary`` took any epoch and any
    snapshot. Unsigned, signed for another epoch, context, purpose or member, with the
    retired shared-key MAC or by another key: refused (``bad_signature``, ``bad_mac``),
    nothing changed; the real messages still work."""
    import asyncio

    from actors.cluster.follower import FollowerActor

    member = FollowerActor(str(tmp_path / "follower"), "c")
    follower = member._role
    assert follower is not None

    def ship(seq: int, data: bytes) -> None:
        open_reply(member.receive(data))

    store, ctx = _primary(tmp_path, ship)
    try:
        ctx.submit("(context-tx (base-version 0) (derive a (x 1)))", client_id="a")
        before = open_reply(follower.status())
        retired = control_mac(KEY(), "epoch", 2**62)  # the old scheme: the shared key's MAC
        foreign = epochs.sign(b"s" * 32, "c", 2**62)  # signed by another Ed25519 key
        for bad in (b"", retired, foreign, sign_epoch("c", 2**62 - 1), sign_epoch("d", 2**62),
                    b"\x00" * 64, None):  # fmt: skip
            with pytest.raises(WireError) as e:
                open_reply(member.fence(2**62, bad))  # type: ignore[arg-type]
            assert e.value.code == "bad_signature"
            with pytest.raises(WireError):
                open_reply(member.seal(2**62, bad))  # type: ignore[arg-type]
        with pytest.raises(WireError) as old:
            open_reply(member.fence(2**62, retired))
        assert "retired scheme" in old.value.message and "MORPHZ_DIRECTORY_PUBLIC_KEYS" in (
            old.value.message
        )
        # the directory's public certificate of an epoch cannot seal (disable) a follower,
        # nor can a seal made for another member
        for cert in (sign_epoch("c", 7), sign_epoch("c", 7, "fence"),
                     sign_epoch("c", 7, "seal", "morphz:c#f1@e0")):  # fmt: skip
            with pytest.raises(WireError) as e:
                open_reply(member.seal(7, cert))
            assert e.value.code == "bad_signature"
        with pytest.raises(WireError):  # a negative or non-integer epoch
            open_reply(member.fence(-1, sign_epoch("c", 0)))
        data, _ = snapshot(store)
        with pytest.raises(WireError) as inst:  # signed epoch, snapshot not MACed
            open_reply(member.install(data, 5, sign_epoch("c", 5), b"\x00" * 32))
        assert inst.value.code == "bad_mac"
        with pytest.raises(WireError):  # a fence certificate installs nothing
            open_reply(member.install(data, 5, sign_epoch("c", 5, "fence"),
                                      install_mac(KEY(), 5, data)))  # fmt: skip
        with pytest.raises(WireError):  # the MAC of another snapshot
            open_reply(
                member.install(data + b"x", 5, sign_epoch("c", 5), install_mac(KEY(), 5, data))
            )
        with pytest.raises(WireError):  # a forged watermark: nothing applied
            open_reply(member.confirm(0, 1, control_mac(b"k" * 32, "confirm", 0, 1)))
        for cert in (b"x" * 32, sign_epoch("c", 9, "epoch", "morphz:c#f1@e0"),
                     sign_epoch("c", 9, "seal")):  # fmt: skip
            with pytest.raises(WireError) as promo:  # another member's, or not a promotion
                asyncio.run(member.become_primary(9, cert))
            assert promo.value.code == "bad_signature" and member._role is follower
        assert open_reply(follower.status()) == before  # epoch 0, nothing applied
        # the real ones: the primary's watermark, the directory's fence
        acked = ctx.backend.acked  # type: ignore[attr-defined]
        open_reply(member.confirm(0, acked, _confirm(0, acked)))
        assert open_reply(follower.status())["applied_seq"] == acked
        assert open_reply(member.fence(4, sign_epoch("c", 4)))["epoch"] == 4
        with pytest.raises(RequestError) as stale:  # a watermark of the replaced epoch
            open_reply(member.confirm(0, acked, _confirm(0, acked)))
        assert stale.value.code == "stale_epoch"
    finally:
        ctx.close()
        follower._close()


def test_a_follower_of_an_enforcing_context_serves_reads_only_with_a_read_grant(
    tmp_path: Path,
) -> None:
    """The cluster-inside finding: a follower served an enforced context's frames and log
    to any caller. Now it checks the caller's token as the primary does (the tenant and the
    enforcement come from the context's meta, replicated with it)."""
    from actors.server.guard import issue_capability
    from actors.server.settings import settle
    from protocol.governance import DefaultPolicy

    root = tmp_path / "follower"
    follower = FollowerRole(str(root), "c")

    def ship(seq: int, data: bytes) -> None:
        open_reply(follower.receive(data))

    store = LmdbStore.open(tmp_path / "primary" / "c", sync=False)
    ctx = Context(ReplicatedStore(store, epoch=0, ship=ship), name="c", tenant="acme")
    try:
        ctx.record_settings(
            settle(None, governance_every=None, governance_unused_ticks=None,
                   admission=DefaultPolicy(), embedder=None, enforce=True)
        )  # fmt: skip
        ctx.submit("(context-tx (base-version 0) (derive secret (x 1)))", client_id="s")
        acked = ctx.backend.acked  # type: ignore[attr-defined]
        open_reply(follower.confirm(0, acked, _confirm(0, acked)))
        reader = issue_capability(root, holder="r", tenant="acme", grants=[("c", ["read"])])
        writer = issue_capability(root, holder="w", tenant="acme", grants=[("c", ["commit"])])
        other = issue_capability(root, holder="o", tenant="beta", grants=[("*", ["read"])])
        for method, args in (("frame", ["secret"]), ("txlog", []), ("state", [])):
            for token in (None, writer, other, b"forged"):
                with pytest.raises(MorphzError) as denied:
                    open_reply(follower.read(method, args, token))
                assert denied.value.code == "permission_denied", (method, token)
        read = FollowerRead.model_validate(open_reply(follower.read("frame", ["secret"], reader)))
        assert read.reply["id"] == "secret"
        message = follower.take_denials("morphz:c#f0@e0", "node-\n1")
        assert message is not None and follower.take_denials("x", "y") is None
    finally:
        ctx.close()
        follower._close()
    _the_primary_chains_a_followers_denials(tmp_path / "audited", message)


def _the_primary_chains_a_followers_denials(root: Path, message: bytes) -> None:
    """Denied follower reads reach the context's audit log: the primary writes the
    follower's message into its chained log (``morphz audit --verify`` passes), one row per
    denial with the follower's name; a message not MACed under the replication key, or
    malformed, writes nothing. (Before, a follower only logged its denials.)"""
    import asyncio
    import json

    from click.testing import CliRunner

    from actors.server.context_actor import ContextActor
    from morphz.cli import cli as morphz_cli
    from storage.replication.codec import seal_denials

    primary = ContextActor(str(root), "c", tenant="acme")
    forged = seal_denials(b"k" * 32, "morphz:c#f9@e0", "n", [
        {"method": "frame", "op": "read", "holder": "mallory", "claimed": None, "why": "x",
         "at": 1.0, "count": 1}])  # fmt: skip
    bad_shape = seal_denials(KEY(), "f", "n", [{"method": "frame"}])

    async def deliver() -> None:
        for bad, code in ((forged, "bad_mac"), (bad_shape, "bad_argument"), (b"\x02" * 40,
                          "bad_mac"), (b"x" * (300 << 10), "bad_argument")):  # fmt: skip
            with pytest.raises(MorphzError) as e:
                open_reply(await primary.follower_denials(bad))
            assert e.value.code == code
        assert open_reply(await primary.follower_denials(message)) == 12

    try:
        asyncio.run(deliver())
    finally:
        primary.close()
    store = LmdbStore.open(root / "c", readonly=True)
    try:
        rows = [r for _, r in store.audit_read(0, 100)]
    finally:
        store.close()
    mine = [r for r in rows if r.get("served_by") == "follower"]
    assert sum(r["count"] for r in mine) == 12 and all(not r["allowed"] for r in mine)
    assert {(r["method"], r["holder"]) for r in mine} == {
        (m, h) for m in ("frame", "txlog", "state") for h in (None, "w", "o")
    }
    assert all(r["follower"] == "morphz:c#f0@e0" and r["node"] == "node-\\n1" for r in mine)
    assert not any(r.get("holder") == "mallory" for r in rows)
    done = CliRunner().invoke(
        morphz_cli, ["--store", str(root), "--json", "audit", "c", "--verify"]
    )
    assert done.exit_code == 0 and json.loads(done.output)["ok"], done.output


def test_a_follower_behind_is_caught_up_from_the_log_within_its_length_else_by_snapshot(
    tmp_path: Path,
) -> None:
    """The primary's catch-up of a follower that answered ``replica_gap``, through the
    follower's own calls: 20 commits behind a log of 30, from the log (nothing sent as a
    snapshot); 40 behind, the log does not reach: nothing sent, a snapshot needed; every
    acknowledged commit is on the follower after each."""
    from actors.cluster.replication import catch_up_member

    follower = FollowerRole(str(tmp_path / "follower"), "c")
    cut = [False]
    calls: list[str] = []

    def ship(seq: int, data: bytes) -> None:
        if not cut[0]:
            open_reply(follower.receive(data))

    def call(method: str, *args: object) -> object:
        calls.append(method)
        return open_reply(getattr(follower, method)(*args))

    store = LmdbStore.open(tmp_path / "primary" / "c", sync=False)
    replicated = ReplicatedStore(store, epoch=0, ship=ship, retain=30)
    data, _ = snapshot(store)  # a follower starts from the primary's snapshot, as placed
    open_reply(follower.install(data, 0, sign_epoch("c", 0), install_mac(KEY(), 0, data)))
    ctx = Context(replicated, name="c")
    try:
        for i in range(5):
            ctx.submit(f"(context-tx (base-version 0) (derive a{i} (x {i})))", client_id=f"a{i}")
        cut[0] = True
        for i in range(20):
            ctx.observe("tool_result", f"missed {i}")
        assert open_reply(follower.status())["held_seq"] == replicated.state.seq - 20
        assert catch_up_member(replicated, KEY(), 0, call) == 20
        assert calls == ["status", "catch_up"]
        acked = replicated.acked
        open_reply(follower.confirm(0, acked, _confirm(0, acked)))
        read = FollowerRead.model_validate(open_reply(follower.read("version", [])))
        assert read.applied_version == ctx.version() and read.applied_seq == acked
        for i in range(40):
            ctx.observe("tool_result", f"missed longer {i}")
        calls.clear()
        assert catch_up_member(replicated, KEY(), 0, call) is None
        assert calls == ["status"]  # nothing sent: the snapshot path takes it
        data, _ = snapshot(store)
        open_reply(follower.install(data, 0, sign_epoch("c", 0), install_mac(KEY(), 0, data)))
        read = FollowerRead.model_validate(open_reply(follower.read("version", [])))
        assert read.applied_version == ctx.version()
    finally:
        ctx.close()
        follower._close()


def test_spare_assignments_act_only_when_the_directory_signed_them() -> None:
    """A spare's assignment is the directory's signed record: it opens under the directory's
    public keys for that spare and namespace only; unsigned, forged, another key's, another
    spare's or namespace's, and malformed records are refused with ``bad_signature``."""
    import json

    from actors.cluster.spares import (
        KV_NAMESPACE,
        assignment_record,
        check_assignment,
        open_assignment,
        sign_assignment,
    )
    from protocol.capabilities import public_key
    from protocol.epochs import sign_record

    spare = "spare:node1:abc"
    record = sign_assignment("ns", spare, "/srv/morphz", "c")
    assert check_assignment("ns", spare, record) == ("/srv/morphz", "c")

    other_seed = b"o" * 32
    doc = json.dumps({"store_dir": "/tmp/evil", "name": "c"})
    refused = {
        "unsigned": doc.encode(),
        "forged": record.replace(b"/srv/morphz", b"/tmp/evilzz"),
        "another key": assignment_record(other_seed, "ns", spare, "/tmp/evil", "c"),
        "another spare": sign_assignment("ns", "spare:node1:xyz", "/srv/morphz", "c"),
        "another namespace": sign_assignment("other", spare, "/srv/morphz", "c"),
        "empty": b"",
        "garbage": b"\xff" * 100_000,
    }
    for why, raw in refused.items():
        with pytest.raises(RequestError) as e:
            check_assignment("ns", spare, raw)
        assert e.value.code == "bad_signature", why

    # The other key's record opens under that key only, and a signed record whose value is
    # not an assignment is refused too.
    mine = public_key(other_seed)
    assert open_assignment([mine], "ns", spare, refused["another key"]) == ("/tmp/evil", "c")
    for value in ("[1, 2]", '{"store_dir": 1, "name": "c"}', "not json"):
        bad = sign_record(other_seed, KV_NAMESPACE + "ns", spare, value)
        with pytest.raises(RequestError) as e:
            open_assignment([mine], "ns", spare, bad)
        assert e.value.code == "bad_signature", value


def test_a_follower_records_when_it_last_vouched_for_its_primary(tmp_path: Path) -> None:
    """The grants a promoted follower counts the replaced lease from: every batch taken and
    every status answered as a follower of that primary's epoch; nothing once it is fenced
    at a newer one, nor a refused batch."""
    import time

    follower = FollowerRole(str(tmp_path / "follower"), "c")
    assert follower.grants.at is None  # new: it vouched for nobody yet
    shipped: list[bytes] = []

    def ship(seq: int, data: bytes) -> None:
        shipped.append(data)
        open_reply(follower.receive(data))

    store, ctx = _primary(tmp_path, ship)
    try:
        ctx.submit("(context-tx (base-version 0) (derive a (x 1)))", client_id="a")
        first = follower.grants.at
        assert follower.grants.epoch == 0 and first is not None
        open_reply(follower.status())
        after_status = follower.grants.at
        assert after_status is not None and after_status > first
        open_reply(follower.fence(1, sign_epoch("c", 1)))
        open_reply(follower.status())  # answered at epoch 1: no grant to the primary of 0
        with pytest.raises(MorphzError) as refused:  # the old primary's batch is refused
            ctx.submit("(context-tx (base-version 1) (derive b))", client_id="b")
        assert refused.value.code in ("stale_epoch", "fenced")
        assert (follower.grants.epoch, follower.grants.at) == (0, after_status)
        assert after_status <= time.monotonic()
    finally:
        ctx.close()
        follower._close()


def test_spares_cover_what_one_lost_node_needs_replaced() -> None:
    from actors.cluster.spares import MAX_SPARES_PER_NODE, SPARES_PER_NODE, spares_wanted

    assert spares_wanted({}) == 0  # no replicated context: no spare at all
    assert spares_wanted({"a": 1, "b": 1}) == SPARES_PER_NODE
    # two primaries on one node: its loss needs two replacements on another node at once
    assert spares_wanted({"a": 2, "b": 1, "c": 1}) == 2
    assert spares_wanted({"a": 40}) == MAX_SPARES_PER_NODE


def test_a_follower_serves_reads_only_once_it_holds_a_copy(tmp_path: Path) -> None:
    """A new follower's store is empty until its primary's snapshot or first batch lands: it
    answers ``replica_gap`` (read from the primary) rather than an empty state, at epoch 0
    too (an ``acks = 0`` follower's valid copy is at epoch 0, so the epoch cannot tell). A
    sealed follower's store, opened as a follower again (a deposed primary's disk), is no
    copy either until a snapshot replaces it."""
    follower = FollowerRole(str(tmp_path / "follower"), "c")

    def refused(role: FollowerRole) -> str:
        with pytest.raises(RequestError) as e:
            open_reply(role.read("version", []))
        return e.value.code

    assert refused(follower) == "replica_gap"
    store, ctx = _primary(tmp_path, lambda seq, data: open_reply(follower.receive(data)))
    try:
        ctx.submit("(context-tx (base-version 0) (derive a (x 1)))", client_id="a")
        acked = ctx.backend.acked  # type: ignore[attr-defined]
        open_reply(follower.confirm(0, acked, _confirm(0, acked)))
        read = FollowerRead.model_validate(open_reply(follower.read("version", [])))
        assert read.epoch == 0 and read.applied_version == 1  # a copy at epoch 0
        open_reply(follower.seal(1, sign_epoch("c", 1, "seal")))
        deposed = FollowerRole(str(tmp_path / "follower"), "c")
        try:
            assert refused(deposed) == "replica_gap"
            data, _ = snapshot(store)
            open_reply(deposed.install(data, 1, sign_epoch("c", 1), install_mac(KEY(), 1, data)))
            read = FollowerRead.model_validate(open_reply(deposed.read("version", [])))
            assert read.applied_version == 1
        finally:
            deposed._close()
        fresh = FollowerRole(str(tmp_path / "other"), "c")
        try:
            data, _ = snapshot(store)
            open_reply(fresh.install(data, 0, sign_epoch("c", 0), install_mac(KEY(), 0, data)))
            assert FollowerRead.model_validate(open_reply(fresh.read("version", []))).epoch == 0
        finally:
            fresh._close()
    finally:
        ctx.close()
