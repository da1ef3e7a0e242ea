"""The follower actor's class without Ray: envelopes, reads at the applied state, bad input,
snapshots from an older epoch refused, sealing for promotion, the member promoted in place."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.client.replies import open_reply
from actors.cluster.replication import READS, FollowerRead, FollowerRole
from protocol.errors import MorphzError, RequestError, WireError
from service.context import Context
from storage import LmdbStore
from storage.replication import ReplicatedStore, snapshot


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
        open_reply(follower.confirm(ctx.backend.acked))  # type: ignore[attr-defined]
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
        open_reply(follower.fence(2))
        data, _ = snapshot(store)
        with pytest.raises(RequestError) as old:
            open_reply(follower.install(data, 1))
        assert old.value.code == "stale_epoch"
        # sealed for promotion: everything applied, the store released, no more calls
        sealed = open_reply(follower.seal(3))
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
    open_reply(member.confirm(ctx.backend.acked))  # type: ignore[attr-defined]
    ctx.close()

    async def promoted() -> None:
        info = await member.become_primary(1)
        assert info["open_error"] is None, info
        assert open_reply(await member.frame("a"))["id"] == "a"
        _, payload = ContextHandle.prepare("(context-tx (base-version 1) (derive b))", "b")
        receipt = decode_receipt(await member.submit(payload))
        assert receipt.committed and receipt.version == 2, receipt
        _, again = ContextHandle.prepare("(context-tx (base-version 0) (derive a (x 1)))", "a")
        assert decode_receipt(await member.submit(again)).duplicate  # acknowledged before
        assert await member.become_primary(1) == await member.handshake()  # idempotent
        with pytest.raises(RequestError) as old:
            open_reply(member.receive(shipped[-1]))
        assert old.value.code == "stale_epoch"
        member.close()

    asyncio.run(promoted())
