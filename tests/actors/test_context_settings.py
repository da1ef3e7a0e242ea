"""What a context actor was started with is part of the context: a restart, a restored copy
of its store and a promoted follower serve it the same (cadence, admission, embedder,
enforcement, window), with no argument given again. Real LMDB files, no Ray; vectors come
from the loopback embedding server (tests/embedding_server.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from actors.client.replies import open_reply
from actors.server.context_actor import ContextActor
from actors.server.guard import issue_capability
from actors.server.settings import ADMISSION_UNAVAILABLE, UnavailablePolicy, settle
from adapters.embeddings import EmbedderConfig
from protocol.capabilities import PermissionDenied
from protocol.errors import RequestError
from protocol.governance import DefaultPolicy
from service.context import Context
from storage import LmdbStore
from tests.embedding_server import EmbeddingServer


class HousePolicy(DefaultPolicy):
    """A custom policy (not the built-in class): it cannot be rebuilt from its name."""


def test_a_restarted_actor_serves_with_what_it_was_started_with(
    tmp_path: Path, embedding_server: EmbeddingServer
) -> None:
    embedder = EmbedderConfig(provider="openai", model="hash-bow", url=embedding_server.url)

    async def first() -> None:
        actor = ContextActor(
            str(tmp_path), "cfg", window=7, governance_every=3600,
            governance_unused_ticks=9, admission=DefaultPolicy("house-v2"),
            embedder=embedder.to_dict(), replication_log=77,
        )  # fmt: skip
        try:
            assert actor._open_error is None
            open_reply(await actor.observe("user_message", "refund the cracked tablet", "s"))
        finally:
            actor.close()

    async def again() -> None:
        actor = ContextActor(str(tmp_path), "cfg")  # nothing given again
        try:
            described = await actor.describe()
            assert described["governance_every"] == 3600
            assert described["admission"] == "house-v2"
            assert actor._unused_ticks == 9
            assert actor.settings["replication_log"] == 77  # what a follower keeps, too
            reply = open_reply(await actor.search({"query": "refund tablet", "limit": 2}))
            assert reply["semantic_lag"] is not None  # hybrid: the embedder came back
            assert open_reply(await actor.meta())["window"] == 7
        finally:
            actor.close()

    asyncio.run(first())
    asyncio.run(again())
    # a value given now replaces the recorded one; the others stay
    actor = ContextActor(str(tmp_path), "cfg", governance_every=60)
    try:
        assert actor.settings["governance_every"] == 60
        assert actor.settings["admission"] == {"name": "house-v2", "builtin": True}
        assert actor.settings["embedder"] == embedder.to_dict()
    finally:
        actor.close()


def test_a_restored_copy_keeps_its_enforcement_scope_and_custom_admission(tmp_path: Path) -> None:
    actor = ContextActor(
        str(tmp_path / "live"), "acme-c", tenant="acme", enforce=True,
        admission=HousePolicy("house-custom"),
    )  # fmt: skip
    assert actor._open_error is None
    restored = tmp_path / "restored"
    (restored / "acme-c").mkdir(parents=True)
    store = actor._context().backend
    assert isinstance(store, LmdbStore)
    store.copy_to(str(restored / "acme-c"), lambda view: None)  # the LMDB file: no scope.json
    admin = issue_capability(
        tmp_path / "live", holder="ops", tenant="acme", grants=[("*", ["admin"])]
    )
    actor.close(capability=admin)

    copy = ContextActor(str(restored), "acme-c")
    admin = issue_capability(restored, holder="ops", tenant="acme", grants=[("*", ["admin"])])
    try:
        assert copy._open_error is None
        assert copy.guard.enforce and copy.guard.tenant == "acme"
        with pytest.raises(PermissionDenied):
            open_reply(asyncio.run(copy.version()))  # no capability: refused, as before
        assert isinstance(copy._policy, UnavailablePolicy)
        with pytest.raises(RequestError) as refused:
            copy._policy.review(None, None)  # type: ignore[arg-type]
        assert refused.value.code == ADMISSION_UNAVAILABLE
    finally:
        copy.close(capability=admin)
    # served with its policy again, it decides admissions with it
    again = ContextActor(str(restored), "acme-c", admission=HousePolicy("house-custom"))
    try:
        assert again._policy.name == "house-custom" and again.guard.enforce
    finally:
        again.close(capability=admin)


def test_a_promoted_follower_serves_with_the_primarys_settings(tmp_path: Path) -> None:
    from actors.cluster.follower import FollowerActor
    from actors.cluster.replication import sign_epoch
    from storage.replication import ReplicatedStore
    from storage.replication.codec import control_mac, replication_key

    member = FollowerActor(str(tmp_path / "follower"), "c")

    def ship(seq: int, data: bytes) -> None:
        open_reply(member.receive(data))

    store = LmdbStore.open(tmp_path / "primary" / "c", sync=False)
    ctx = Context(ReplicatedStore(store, epoch=0, ship=ship), name="c", window=5)
    settings = settle(
        None, governance_every=120, governance_unused_ticks=None,
        admission=DefaultPolicy("house-v3"), embedder=None, enforce=False,
    )  # fmt: skip
    assert ctx.record_settings(settings) and not ctx.record_settings(settings)
    ctx.submit("(context-tx (base-version 0) (derive a (x 1)))", client_id="a")
    acked = ctx.backend.acked  # type: ignore[attr-defined]
    open_reply(member.confirm(0, acked, control_mac(replication_key("c"), "confirm", 0, acked)))
    ctx.close()

    async def promoted() -> None:
        info = await member.become_primary(1, sign_epoch("c", 1))
        assert info["open_error"] is None, info
        described = await member.describe()
        assert described["governance_every"] == 120 and described["admission"] == "house-v3"
        assert open_reply(await member.meta())["window"] == 5
        assert member._worker is not None  # the background governance task runs here too
        member.close()

    asyncio.run(promoted())


def test_bad_settings_are_refused_before_the_store_is_touched(tmp_path: Path) -> None:
    for bad in (
        {"governance_every": -1},
        {"governance_unused_ticks": "x"},
        {"admission": 3},
        {"replication_log": -1},
        {"replication_log": True},
    ):
        actor = ContextActor(str(tmp_path), "bad", **bad)  # type: ignore[arg-type]
        assert actor._open_error is not None and actor._ctx is None
        assert not (tmp_path / "bad").exists()  # nothing created
