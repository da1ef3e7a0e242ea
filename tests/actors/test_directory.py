"""The context directory: the placement rule (pure), the directory on the session's
two-node cluster, and three-node scenarios in a child process (``tests/actors/multinode.py``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from actors.client.lookup import lookup
from actors.client.names import ContextEntry, Member, follower_actor, primary_actor
from actors.client.replies import open_reply
from actors.cluster.directory_handle import DirectoryHandle, directory, existing_directory
from actors.cluster.placement import check_policy, choose_nodes
from actors.cluster.placing import place
from actors.server.connect import connect
from morphz.cli.main import cli
from protocol.errors import MorphzError, NotFound, RequestError
from tests.actors.cluster import NODE2, RayCluster, placed_directory
from tests.actors.multinode import run_scenario
from tests.actors.test_failover import _until

LIVE = {"a": {"CPU": 1.0}, "b": {"CPU": 1.0, "gpu": 1.0}, "c": {"CPU": 1.0}}


# -- the placement rule, no Ray ----------------------------------------------------


def test_spread_takes_the_least_loaded_node_ties_by_id() -> None:
    assert choose_nodes("spread", 0, LIVE, {}) == ["a"]
    assert choose_nodes("spread", 0, LIVE, {"a": 1}) == ["b"]
    assert choose_nodes("spread", 0, LIVE, {"a": 2, "b": 1, "c": 1}) == ["b"]


def test_followers_are_distinct_and_least_loaded() -> None:
    assert choose_nodes("spread", 2, LIVE, {"a": 3}) == ["b", "c", "a"]
    assert choose_nodes("node:c", 1, LIVE, {"a": 1}) == ["c", "b"]
    assert choose_nodes("resource:gpu", 1, LIVE, {}) == ["b", "a"]


@pytest.mark.parametrize(
    ("policy", "followers", "code"),
    [
        ("node:zz", 0, "not_found"),
        ("resource:tpu", 0, "not_found"),
        ("spread", 3, "not_enough_nodes"),
        ("node:a", 5, "not_enough_nodes"),
        ("spread", -1, "bad_argument"),
        ("nearest", 0, "bad_placement"),
        ("node:", 0, "bad_placement"),
        ("node: a", 0, "bad_placement"),
        ("resource", 0, "bad_placement"),
    ],
)
def test_bad_placements_are_typed(policy: str, followers: int, code: str) -> None:
    with pytest.raises(RequestError) as e:
        choose_nodes(policy, followers, LIVE, {})
    assert e.value.code == code


def test_check_policy_refuses_non_strings() -> None:
    for bad in (None, 3, b"spread", ["spread"]):
        with pytest.raises(RequestError) as e:
            check_policy(bad)
        assert e.value.code == "bad_placement"


def test_member_names() -> None:
    assert primary_actor("ctx1", 0) == "ctx:ctx1"  # the single-node name
    assert primary_actor("ctx1", 2) == "ctx:ctx1@e2"
    assert follower_actor("ctx1", 1, 0) == "ctx:ctx1#f1@e0"
    entry = ContextEntry(
        name="n",
        epoch=0,
        follower_count=0,
        acks=0,
        primary=Member(node_id="a", actor="ctx:n", store_dir="/s"),
        followers=(),
        policy="spread",
    )
    assert ContextEntry.model_validate_json(entry.model_dump_json()) == entry
    assert not entry.replicated
    # an entry recorded under the count's earlier name reads the same
    earlier = {**entry.model_dump(exclude={"follower_count"}), "replicas": 0}
    assert ContextEntry.model_validate(earlier) == entry


# -- on the session's two-node cluster ---------------------------------------------


@pytest.fixture
def placed(ray_cluster: RayCluster, namespace: str, tmp_path: Path) -> Iterator[DirectoryHandle]:
    """This test's directory (its own namespace), node roots under tmp_path; all stopped after."""
    with placed_directory(ray_cluster, namespace, tmp_path) as d:
        yield d


def test_place_spreads_and_lookup_resolves_through_the_directory(
    placed: DirectoryHandle, ray_cluster: RayCluster, namespace: str, tmp_path: Path
) -> None:
    first = place("p-one", namespace=namespace)
    second = place("p-two", namespace=namespace)
    nodes = {first.describe()["node_id"], second.describe()["node_id"]}
    assert nodes == {ray_cluster.head_node_id, ray_cluster.node2_id}
    one = placed.get("p-one")
    assert one.primary.node_id == min(nodes)  # both empty: the tie goes to the smaller id
    assert first.describe()["store_dir"] == one.primary.store_dir
    assert one.primary.store_dir in (str(tmp_path / "head"), str(tmp_path / "node2"))
    found = lookup("p-two", namespace)
    assert found.describe()["node_id"] == placed.get("p-two").primary.node_id
    again = place("p-one", namespace=namespace, placement=f"node:{ray_cluster.node2_id}")
    assert again.describe()["node_id"] == one.primary.node_id  # idempotent: stays where it is
    assert [e.name for e in placed.list()] == ["p-one", "p-two"]


def test_place_by_node_and_by_resource(
    placed: DirectoryHandle, ray_cluster: RayCluster, namespace: str, tmp_path: Path
) -> None:
    h = place("by-res", namespace=namespace, placement=f"resource:{NODE2}")
    assert h.describe()["node_id"] == ray_cluster.node2_id
    assert os.path.isdir(tmp_path / "node2" / "by-res")
    h = place("by-node", namespace=namespace, placement=f"node:{ray_cluster.head_node_id}")
    assert h.describe()["store_dir"] == str(tmp_path / "head")
    h = place("own-dir", namespace=namespace, store_dir=tmp_path / "elsewhere")
    assert placed.get("own-dir").primary.store_dir == str(tmp_path / "elsewhere")
    assert h.describe()["store_dir"] == str(tmp_path / "elsewhere")


def test_bad_placements_change_nothing(
    placed: DirectoryHandle, ray_cluster: RayCluster, namespace: str
) -> None:
    place("kept", namespace=namespace)
    before = placed.list()
    for kwargs, code in [
        ({"placement": "node:" + "ff" * 28}, "not_found"),
        ({"placement": "resource:nowhere"}, "not_found"),
        ({"followers": 2}, "not_enough_nodes"),
        ({"placement": "closest"}, "bad_placement"),
        ({"followers": True}, "bad_argument"),
        ({"acks": -1}, "bad_argument"),
        ({"lifetime": "forever"}, "bad_argument"),
        ({"node_id": ray_cluster.node2_id}, "bad_argument"),
        ({"store_dir": 42}, "bad_argument"),
    ]:
        with pytest.raises(RequestError) as e:
            place("never", namespace=namespace, **kwargs)  # type: ignore[arg-type]
        assert e.value.code == code, kwargs
    with pytest.raises(RequestError) as e:
        place("../up", namespace=namespace)
    assert e.value.code == "bad_context_name"
    with pytest.raises(RequestError) as e:
        placed.register_node(ray_cluster.node2_id, "relative/root")
    assert e.value.code == "bad_argument"
    with pytest.raises(NotFound):
        placed.get("never")
    assert placed.list() == before
    entry = placed.get("kept")
    with pytest.raises(RequestError) as e:
        placed.promote("kept", expected_epoch=1, primary=entry.primary, followers=[])
    assert e.value.code == "stale_epoch"
    with pytest.raises(RequestError) as e:
        placed.set_primary("kept", epoch=1, primary=entry.primary)
    assert e.value.code == "stale_epoch"
    with pytest.raises(NotFound):
        placed.set_primary("never", epoch=0, primary=entry.primary)
    assert placed.get("kept") == entry


def test_a_directory_with_admin_keys_takes_writes_only_from_an_admin(
    placed: DirectoryHandle, ray_cluster: RayCluster, namespace: str, tmp_path: Path
) -> None:
    """The cluster-inside finding: the directory's promote/set_primary/remove were open to
    any Ray caller. Once it has admin keys, a write without an admin capability (none, a
    read grant, a token signed by another key) is refused and changes nothing; an admin's
    write goes through; every entry carries the directory's signature of its epoch.

    Tenants: an entry records the tenant of the admin who placed it; an admin of another
    tenant can change nothing of it, a tenant's admin nothing cluster-wide (nodes, keys,
    host reports), and an unsigned host report or rehost is refused."""
    from functools import partial

    from actors.cluster.replication import sign_epoch
    from actors.server.guard import grant_key, issue_capability
    from protocol import capabilities

    place("kept", namespace=namespace)
    entry, before = placed.get("kept"), placed.list()
    assert entry.epoch_signature == sign_epoch("kept", 0, "epoch", entry.primary.actor).hex()
    assert entry.tenant is None and placed.ping()["admin"] == "open"
    issuer = tmp_path / "issuer"
    public = capabilities.public_key(grant_key(issuer)).hex()

    def token(tenant: str, ops: list[str], glob: str = "*") -> bytes:
        return issue_capability(issuer, holder=f"{tenant}-{ops[0]}", tenant=tenant,
                                grants=[(glob, ops)])  # fmt: skip

    operator, acme, globex = (
        token("*", ["admin"]),
        token("acme", ["admin"]),
        token("globex", ["admin"]),
    )
    reader = token("acme", ["read"])
    stranger = capabilities.issue(b"s" * 32, holder="x", tenant="*", issued_by="x",
                                  grants=[("*", ["admin"])], now=0, ttl=None)  # fmt: skip
    assert placed.require_admin([public])  # the first keys close it; nothing needed
    assert placed.ping()["admin"] == "closed"
    for tok in (None, reader, stranger, acme):  # acme's admin: not the operator's entry
        d = directory(namespace, capability=tok)
        for write in (
            partial(d.promote, "kept", expected_epoch=0, primary=entry.primary, followers=[]),
            partial(d.set_primary, "kept", epoch=0, primary=entry.primary),
            partial(d.set_followers, "kept", epoch=0, followers=[]),
            partial(d.remove, "kept"),
            partial(d.register_node, ray_cluster.node2_id, str(tmp_path / "elsewhere")),
            partial(d.require_admin, [public]),
            partial(d.rebalance),
        ):
            with pytest.raises(RequestError) as denied:
                write()
            assert denied.value.code == "permission_denied", (tok, write)
        assert d.get("kept") == entry  # reads stay open; an existing context is found
    for tok in (None, reader, stranger):
        with pytest.raises(RequestError) as denied:
            place("fresh", namespace=namespace, capability=tok)
        assert denied.value.code == "permission_denied"
    assert placed.list() == before and placed.node_roots()[ray_cluster.node2_id] == str(
        tmp_path / "node2"
    )
    # a tenant's admin places a context of its own; another tenant's admin cannot touch it
    mine = directory(namespace, capability=acme).place("acme-notes")
    assert mine.tenant == "acme"
    other = directory(namespace, capability=globex)
    for write in (
        partial(other.promote, "acme-notes", expected_epoch=0, primary=mine.primary, followers=[]),
        partial(other.set_followers, "acme-notes", epoch=0, followers=[]),
        partial(other.set_primary, "acme-notes", epoch=0, primary=mine.primary),
        partial(other.remove, "acme-notes"),
    ):
        with pytest.raises(RequestError) as denied:
            write()
        assert denied.value.code == "permission_denied" and "tenant 'acme'" in str(denied.value)
    assert placed.get("acme-notes") == mine
    moved = directory(namespace, capability=acme).set_followers("acme-notes", epoch=0, followers=[])
    assert moved.tenant == "acme"
    # host reports and rehost: unsigned ones are refused, the operator's host is heard
    import ray

    report = {"actor": "host:forged", "node_id": ray_cluster.node2_id, "store_dir": "/x"}
    for tok in (None, acme, stranger):
        with pytest.raises(RequestError) as denied:
            open_reply(ray.get(placed.actor.report_host.remote(report, tok)))
        assert denied.value.code == "permission_denied"
    assert placed.hosts() == []
    open_reply(ray.get(placed.actor.report_host.remote({**report, "actor": "host:real"}, operator)))
    assert [h["actor"] for h in placed.hosts()] == ["host:real"]
    for tok in (None, globex, token("globex", ["read"])):
        with pytest.raises(RequestError) as denied:
            open_reply(ray.get(placed.actor.rehost.remote("acme-notes", "host:x", tok)))
        assert denied.value.code == "permission_denied"
    kept = open_reply(ray.get(placed.actor.rehost.remote("acme-notes", "host:x", reader)))
    assert kept["primary"] == mine.primary.model_dump()  # heard; nothing to move
    ops = directory(namespace, capability=operator)
    promoted = ops.promote("kept", expected_epoch=0, primary=entry.primary, followers=[])
    assert promoted.epoch == 1
    assert promoted.epoch_signature == sign_epoch("kept", 1, "epoch", entry.primary.actor).hex()
    lookup("kept", namespace).shutdown()
    ops.remove("kept")
    ops.remove("acme-notes")
    assert [e.name for e in placed.list()] == []


def test_the_directory_refuses_state_it_did_not_sign(
    ray_cluster: RayCluster, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any Ray process can write the GCS key-value store the directory keeps its state in.
    A record written there by another process — an entry at a forged epoch, the retired
    unsigned form, a record signed by another key, a signed record moved to another
    context's key, admin keys of the forger's — is refused when the directory loads (the
    call on it says why), and a directory whose admin-key record was tampered with stays
    closed; the records it signed itself load."""
    import asyncio

    from ray.experimental import internal_kv

    from actors.cluster.directory import KV_NAMESPACE, DirectoryActor
    from protocol import capabilities
    from protocol.epochs import sign_record

    kv = KV_NAMESPACE + namespace
    first = DirectoryActor(namespace)
    node = ray_cluster.node2_id
    member = Member(node_id=node, actor=primary_actor("kept", 0), store_dir=str(tmp_path))
    kept = ContextEntry(name="kept", epoch=0, follower_count=0, acks=0, primary=member,
                        followers=(), policy="spread")  # fmt: skip
    first._save_entry(kept)
    first._put("node/" + node, str(tmp_path))
    forged = kept.model_copy(update={"name": "evil", "epoch": 99}).model_dump_json()
    put = internal_kv._internal_kv_put
    put("ctx/evil", forged, True, namespace=kv)  # the unsigned (old) form
    other = sign_record(b"o" * 32, namespace, "ctx/other", forged.replace("evil", "other"))
    put("ctx/other", other, True, namespace=kv)
    moved = internal_kv._internal_kv_get("ctx/kept", namespace=kv)
    put("ctx/moved", moved, True, namespace=kv)  # a real signed record under another key
    put("conf/admin_keys", capabilities.public_key(b"a" * 32).hex(), True, namespace=kv)
    again = DirectoryActor(namespace)
    assert set(again.entries) == {"kept"} and again.entries["kept"].epoch == 0
    assert again.roots == {node: str(tmp_path)}
    assert set(again.refused) == {"ctx/evil", "ctx/other", "ctx/moved", "conf/admin_keys"}
    for name in ("evil", "other", "moved"):
        with pytest.raises(RequestError) as e:
            open_reply(asyncio.run(again.get(name)))
        assert e.value.code == "bad_signature" and "place it again" in e.value.message
    with pytest.raises(RequestError) as closed:  # the forger's admin keys opened nothing
        open_reply(asyncio.run(again.remove("evil")))
    assert closed.value.code == "permission_denied" and "admin keys were refused" in (
        closed.value.message
    )
    # the operator of the environment's keys (out of the GCS's reach) sets them again
    import time

    seed = b"p" * 32
    monkeypatch.setenv("MORPHZ_DIRECTORY_ADMIN_KEYS", capabilities.public_key(seed).hex())
    third = DirectoryActor(namespace)
    for tenant in ("acme", "*"):
        token = capabilities.issue(seed if tenant == "*" else b"a" * 32, holder="ops",
                                   tenant=tenant, issued_by="ops", grants=[("*", ["admin"])],
                                   now=time.time())  # fmt: skip
        keys = [capabilities.public_key(seed).hex()]
        if tenant == "acme":  # the forger's key, its own tenant: refused
            with pytest.raises(RequestError) as denied:
                open_reply(asyncio.run(third.require_admin(keys, token)))
            assert denied.value.code == "permission_denied"
        else:
            open_reply(asyncio.run(third.require_admin(keys, token)))
    assert "conf/admin_keys" not in third.refused and "conf/admin_keys" not in (
        DirectoryActor(namespace).refused
    )
    for key in ("ctx/kept", "ctx/evil", "ctx/other", "ctx/moved", "conf/admin_keys"):
        internal_kv._internal_kv_del(key, namespace=kv)
    internal_kv._internal_kv_del("node/" + node, namespace=kv)


def test_a_denied_follower_read_is_written_to_the_primarys_chained_audit_log(
    placed: DirectoryHandle, ray_cluster: RayCluster, namespace: str, tmp_path: Path
) -> None:
    """A follower of an enforcing context (on the second node) refuses a read without a
    grant; within a second the refusal is a row of the context's audit log on the primary,
    chained (``morphz audit --verify`` passes) and naming the follower. Before, a follower
    only logged it."""
    import time

    from actors.cluster.follower_role import follower_handle
    from actors.server.guard import grant_key
    from storage import LmdbStore

    for root in ("head", "node2"):  # both nodes' roots verify the tokens
        grant_key(tmp_path / root)
    h = place("watched", followers=1, namespace=namespace, tenant="acme", enforce=True)
    try:
        entry = placed.get("watched")
        follower = follower_handle(entry.followers[0], namespace)
        # the primary's snapshot is not waited for: until it lands, the follower holds no
        # copy and refuses every read (replica_gap); from then on reads are guarded
        deadline = time.monotonic() + 20
        while True:
            try:
                follower.read("state")
            except RequestError as e:
                if e.code != "replica_gap":
                    denied = e
                    break
            assert time.monotonic() < deadline, "the follower never enforced its copy's grants"
            time.sleep(0.1)
        assert denied.code == "permission_denied"
        path = Path(entry.primary.store_dir) / "watched"
        deadline = time.monotonic() + 20
        while True:
            store = LmdbStore.open(path, readonly=True)
            try:
                rows = [r for _, r in store.audit_read(0, 1000)]
            finally:
                store.close()
            mine = [r for r in rows if r.get("served_by") == "follower"]
            if mine or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert [(r["method"], r["follower"], r["allowed"]) for r in mine] == [
            ("state", entry.followers[0].actor, False)
        ]
        done = CliRunner().invoke(
            cli, ["--store", entry.primary.store_dir, "--json", "audit", "watched", "--verify"]
        )
        assert done.exit_code == 0 and json.loads(done.stdout)["ok"], done.output
    finally:
        import ray

        members = placed.get("watched").followers
        placed.remove("watched")  # the supervisor replaces nothing from here on
        h.shutdown()
        for m in members:
            ray.kill(ray.get_actor(m.actor, namespace=namespace), no_restart=True)


def test_connect_alone_creates_no_directory(
    ray_cluster: RayCluster, namespace: str, context_name: str, tmp_path: Path
) -> None:
    h = connect(context_name, store_dir=tmp_path, namespace=namespace)
    try:
        assert existing_directory(namespace) is None
        assert lookup(context_name, namespace).version() == 0
        assert existing_directory(namespace) is None
    finally:
        h.shutdown()


def _replication_of(handle: Any) -> dict[str, Any]:
    """The primary's replication progress (``replicate``: seq, acked, caught_up)."""
    from actors.client.transport import Call

    reply = handle.transport.call(Call("replicate", (), open_reply, guarded=False))
    return dict(reply)


def test_a_follower_that_lost_batches_is_caught_up_from_the_log_with_acks_0(
    placed: DirectoryHandle, ray_cluster: RayCluster, namespace: str
) -> None:
    """Through Ray, on the session cluster: a context with one follower and ``acks = 0``;
    the follower's process is killed (SIGKILL) while the primary keeps acknowledging
    commits on its own disk, so the batches sent meanwhile are lost and Ray restarts the
    follower behind. The primary hears its ``replica_gap`` at a later write (it waits for
    no follower) and catches it up from its retained log, not by a snapshot; the follower
    then holds and serves every commit. The supervisor keeps an idle spare on each node
    while a replicated context exists, and stops them once none is left."""
    import ray

    from actors.cluster.follower_role import follower_handle
    from actors.cluster.spares import (
        assignment_of,
        assignment_record,
        is_spare,
        sign_assignment,
    )

    ctx = place("lagging", namespace=namespace, followers=1, acks=0)
    entry = placed.get("lagging")
    member = entry.followers[0]
    try:
        for i in range(5):
            ctx.submit(f"(context-tx (base-version 0) (derive a/{i} (i {i})))")
        follower = follower_handle(member, namespace)

        def settled() -> bool:
            # (asking the primary makes it look at the answers it did not wait for). On a
            # loaded machine the supervisor may find the new primary hung and promote its
            # follower, which acks = 0 allows: the scenario then starts from the new pair.
            nonlocal entry, member, follower
            entry = placed.get("lagging")
            if entry.followers and entry.followers[0] != member:
                member = entry.followers[0]
                follower = follower_handle(member, namespace)
            try:
                seq = _replication_of(ctx)["seq"]
                if seq < 5:  # commits the replaced primary alone held: lost with acks = 0
                    ctx.submit("(context-tx (base-version 0) (derive a/more (i 0)))")
                return bool(follower.status()["held_seq"] == seq >= 5)
            except MorphzError:  # the follower being promoted or replaced
                return False

        _until("the follower holding every batch", settled)
        before = _replication_of(ctx)
        assert before["caught_up"]["snapshot"] == 1, before  # placed: one snapshot
        actor = ray.get_actor(member.actor, namespace=namespace)
        os.kill(ray.get(actor.pid.remote(), timeout=30), signal.SIGKILL)
        for i in range(5):  # acknowledged on the primary alone: the follower is down
            ctx.submit(f"(context-tx (base-version 0) (derive b/{i} (i {i})))")

        def caught_up() -> bool:
            ctx.submit("(context-tx (base-version 0) (derive c (later)))")
            done = _replication_of(ctx)
            try:
                return done["caught_up"]["log"] > before["caught_up"]["log"] and (
                    follower.status()["held_seq"] == done["seq"]
                )
            except Exception:  # still restarting
                return False

        _until("the follower caught up from the log", caught_up)
        after = _replication_of(ctx)
        assert after["caught_up"]["snapshot"] == 1, after  # no second snapshot
        _until(
            "the follower applying what the primary acknowledged",
            lambda: follower.read("version").applied_seq >= after["acked"],
        )
        assert follower.read("version").epoch == entry.epoch
        for i in range(5):
            assert follower.read("frame", f"b/{i}").reply["id"] == f"b/{i}"
        spares = _until(
            "an idle spare on each node",
            lambda: len(_spares(namespace)) >= 2 and _spares(namespace),
        )
        assert all(is_spare(n) for n in spares)
        # A spare takes only an assignment the directory signed for it: one of another key,
        # or unsigned, is refused and the spare stays idle (nothing recorded).
        spare = ray.get_actor(spares[0], namespace=namespace)
        foreign = assignment_record(b"o" * 32, namespace, spares[0], member.store_dir, "lagging")
        for record in (foreign, b'{"store_dir": "/tmp", "name": "lagging"}'):
            with pytest.raises(MorphzError) as refused:
                open_reply(ray.get(spare.assign.remote(record), timeout=30))
            assert refused.value.code == "bad_signature"
        assert assignment_of(namespace, spares[0]) is None
        # The directory's signed assignment is taken, recorded and verified on reading back.
        root = placed.node_roots()[spares[0][len("spare:") :].rpartition(":")[0]]
        record = sign_assignment(namespace, spares[0], root, "spare-probe")
        open_reply(ray.get(spare.assign.remote(record), timeout=60))
        assert assignment_of(namespace, spares[0]) == (root, "spare-probe")
    finally:
        placed.remove("lagging")
        ctx.shutdown()
        try:
            ray.kill(ray.get_actor(member.actor, namespace=namespace), no_restart=True)
        except ValueError:  # gone with the context
            pass
    _until("the idle spares stopped", lambda: not _spares(namespace), timeout=30)


def test_a_directory_whose_term_was_taken_over_writes_nothing_and_its_standby_leads(
    placed: DirectoryHandle, ray_cluster: RayCluster, namespace: str
) -> None:
    """On the session's two nodes, the directory (on the head node) keeps a standby
    directory on the other node. A newer leadership term is claimed for that standby (as
    its watch does when the leader's node is lost): from then on the old directory writes
    nothing — a place sent straight to it answers ``not_leader`` and no record reaches the
    GCS — and stands by; the standby sees a term naming it that it did not claim (as after
    its own restart), claims the next one and leads with the tables it reloads: handles
    follow the signed lead record, find what was placed before and place anew there. A lead
    record written without the directory's key is skipped, and so are keys and records that
    are no lead record. The new leader keeps the old directory as its one standby and stops
    an extra idle directory; ``morphz contexts --cluster`` lists the new leader's tables."""
    import ray
    from ray.experimental import internal_kv

    from actors.client.leader import DIRECTORY_KV, lead_key, read_leader
    from actors.client.names import DIRECTORY_NAME
    from actors.client.nodes import pinned
    from actors.cluster.directory import start_directory
    from actors.cluster.leadership import claim, exists
    from protocol.epochs import sign_record

    before = place("led-before", namespace=namespace)
    lead = read_leader(namespace)
    assert lead is not None and lead.actor == DIRECTORY_NAME
    assert lead.node_id == ray_cluster.head_node_id and placed.ping()["term"] == lead.term
    standby = _until("a standby directory on the other node", lambda: _standby_of(namespace))
    assert standby["node"] == ray_cluster.node2_id and not standby["leads"]
    old = ray.get_actor(DIRECTORY_NAME, namespace=namespace)

    forged = lead.model_copy(update={"term": lead.term + 1, "actor": standby["actor"]})
    kv = DIRECTORY_KV + namespace
    key = lead_key(lead.term + 1)
    internal_kv._internal_kv_put(  # signed by another key: not a lead record
        key, sign_record(b"f" * 32, namespace, key, forged.model_dump_json()), False, namespace=kv
    )
    assert read_leader(namespace) == lead
    assert open_reply(ray.get(old.ping.remote(), timeout=30))["leads"]
    internal_kv._internal_kv_del(key, namespace=kv)

    # an idle directory beyond the one standby (as Ray's restart of a lost directory is)
    extra = DIRECTORY_NAME + "~extra"
    start_directory(extra, namespace, pinned(ray_cluster.head_node_id), standby=True)
    assert not open_reply(ray.get(ray.get_actor(extra, namespace=namespace).ping.remote()))["leads"]

    taken = claim(namespace, standby["actor"], standby["node"], "another incarnation")
    assert taken is not None and taken.term == lead.term + 1
    with pytest.raises(RequestError) as refused:
        open_reply(ray.get(old.place.remote("zombie"), timeout=30))
    assert refused.value.code == "not_leader"
    assert internal_kv._internal_kv_get("ctx/zombie", namespace=kv) is None
    assert not open_reply(ray.get(old.ping.remote(), timeout=30))["leads"]
    now = _until(
        "the standby leading under a term of its own",
        lambda: (r := read_leader(namespace)) is not None and r.term > taken.term and r,
    )
    assert now.actor == standby["actor"] and now.node_id == ray_cluster.node2_id
    # keys and records that are no lead record, one past the leader's term: skipped by
    # lookups and by the leader's check of its term before each write below
    junk = {"lead/x": b"x", "lead/007": b"\x00", lead_key(now.term + 1): b"y" * 5000}
    for k, v in junk.items():
        internal_kv._internal_kv_put(k, v, True, namespace=kv)
    assert read_leader(namespace) == now
    after = place("led-after", namespace=namespace)  # through the lead record
    assert placed.get("led-before").primary.node_id == before.describe()["node_id"]
    assert {e.name for e in directory(namespace).list()} == {"led-before", "led-after"}
    assert placed.ping()["actor"] == standby["actor"]  # the handle followed the leader
    assert after.submit("(context-tx (base-version 0) (derive x (y)))").committed
    with pytest.raises(RequestError) as still:
        open_reply(ray.get(old.get.remote("led-after"), timeout=30))
    assert still.value.code == "not_leader"
    # the new leader keeps one standby (the old directory, first by node and name) and
    # stops the extra idle one
    _until("the extra idle directory stopped", lambda: not exists(extra, namespace), timeout=30)
    assert placed.ping()["standby"] == DIRECTORY_NAME and exists(DIRECTORY_NAME, namespace)
    # `morphz contexts --cluster` reads the new leader's tables
    r = CliRunner().invoke(cli, ["contexts", "--cluster", "--namespace", namespace, "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["directory"] is True
    rows = {c["name"]: c for c in doc["contexts"]}
    assert set(rows) == {"led-before", "led-after"}
    assert rows["led-after"]["primary"]["version"] == after.version() > 0
    human = CliRunner().invoke(cli, ["contexts", "--cluster", "--namespace", namespace])
    assert human.exit_code == 0, human.output
    assert {w for line in human.stdout.splitlines()[1:] for w in line.split()[:1]} >= set(rows)


def _standby_of(namespace: str) -> dict[str, Any] | None:
    """The ping of a standby directory of *namespace* (not leading), if one runs."""
    import ray

    from actors.client.names import DIRECTORY_NAME

    for a in ray.util.list_named_actors(all_namespaces=True):
        if a["namespace"] == namespace and a["name"].startswith(DIRECTORY_NAME + "~"):
            try:
                actor = ray.get_actor(a["name"], namespace=namespace)
                status = dict(open_reply(ray.get(actor.ping.remote(), timeout=5)))
            except Exception:
                continue
            if not status["leads"]:
                return status
    return None


def _spares(namespace: str) -> list[str]:
    import ray

    from actors.cluster.spares import is_spare

    return [
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["namespace"] == namespace and is_spare(a["name"])
    ]


def test_contexts_cluster_shows_placement_versions_and_unknowns(
    placed: DirectoryHandle, ray_cluster: RayCluster, namespace: str
) -> None:
    h = place("shown", namespace=namespace, placement=f"node:{ray_cluster.node2_id}")
    report = h.observe("tool_result", "one")
    h.claim()
    tx = f"(context-tx (base-version 0) (derive note (from {report.ref}) (seen)))"
    assert h.submit(tx).committed
    placed.place("ghost")  # placed, never started: its version is unknown
    r = CliRunner().invoke(cli, ["contexts", "--cluster", "--namespace", namespace, "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["namespace"] == namespace and doc["directory"] is True
    rows = {c["name"]: c for c in doc["contexts"]}
    assert rows["shown"]["primary"]["node_id"] == ray_cluster.node2_id
    assert rows["shown"]["primary"]["version"] == h.version() > 0
    assert rows["shown"]["primary"]["node_alive"] is True
    assert rows["shown"]["epoch"] == 0 and rows["shown"]["followers"] == []
    assert rows["ghost"]["primary"]["version"] is None
    human = CliRunner().invoke(cli, ["contexts", "--cluster", "--namespace", namespace])
    assert human.exit_code == 0, human.output
    lines = human.output.splitlines()
    assert lines[0].split()[:3] == ["context", "epoch", "primary"]
    ghost = next(line for line in lines if line.startswith("ghost"))
    assert ghost.split()[3] == "?"


def test_contexts_cluster_without_a_directory_creates_none(
    ray_cluster: RayCluster, namespace: str
) -> None:
    r = CliRunner().invoke(cli, ["contexts", "--cluster", "--namespace", namespace, "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc == {"namespace": namespace, "directory": False, "contexts": [], "unplaced": []}
    assert existing_directory(namespace) is None


def test_contexts_cluster_unreachable_is_one_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run(
        [sys.executable, "-m", "morphz.cli", "contexts", "--cluster", "--address", "127.0.0.1:9"]
        + ["--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 1, done
    assert json.loads(done.stdout)["error"]["code"] == "ray_unreachable"


# -- three nodes, each with its own store root (one child process) -----------------

# One cluster bring-up for all of them, in this order: `placed_everywhere` needs an empty
# directory, `cluster_table` removes a node.
THREE_NODES = (
    "placed_everywhere",
    "placement_errors",
    "directory_restart",
    "loadtest_everywhere",
    "cluster_table",
)


# Ray's GCS notices a lost node after `period x threshold` missed health checks (3 s x 5
# by default): a check a second makes it ~3 s for `cluster_table`'s removed node. The
# timeout of each check stays Ray's (10 s), so a node busy under load is not taken for lost.
NODE_LOSS_NOTICED = {
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
}


@pytest.fixture(scope="module")
def three_nodes() -> dict[str, Any]:
    """The verdicts of the three-node scenarios, run once for this module."""
    return run_scenario(",".join(THREE_NODES), env=NODE_LOSS_NOTICED)


def _part(verdict: dict[str, Any], name: str) -> dict[str, Any]:
    part: dict[str, Any] = verdict[name]
    assert part["ok"], part
    return part


@pytest.mark.slow
def test_contexts_placed_on_every_node_found_from_every_node(three_nodes: dict[str, Any]) -> None:
    part = _part(three_nodes, "placed_everywhere")
    assert sorted(part["by_node"].values()) == [2, 2, 2]
    assert sorted(part["looked_up_from"]) == sorted(part["by_node"])


@pytest.mark.slow
def test_placement_errors_on_three_nodes_are_typed_and_change_nothing(
    three_nodes: dict[str, Any],
) -> None:
    part = _part(three_nodes, "placement_errors")
    assert part["codes"]["too_many_replicas"] == "not_enough_nodes"


@pytest.mark.slow
def test_directory_restart_reloads_its_state(three_nodes: dict[str, Any]) -> None:
    part = _part(three_nodes, "directory_restart")
    assert part["pid_before"] != part["pid_after"] and part["entries"] >= 2


@pytest.mark.slow
def test_loadtest_places_its_contexts_on_every_node(three_nodes: dict[str, Any]) -> None:
    part = _part(three_nodes, "loadtest_everywhere")
    assert len(set(part["nodes"])) == 3 and part["committed"] > 0


@pytest.mark.slow
def test_contexts_cluster_shows_followers_lag_and_lost_members(
    three_nodes: dict[str, Any],
) -> None:
    part = _part(three_nodes, "cluster_table")
    assert part["before"]["follower"] is not None


def test_a_search_for_the_running_spares_made_again_takes_none_back_twice(
    ray_cluster: RayCluster, namespace: str, tmp_path: Path
) -> None:
    """A directory that took over takes back the idle spares a previous one started
    (``SparePool.find``); a failed search is made again, and that search takes back no
    spare twice and none already claimed (so a claim never hands one spare to two
    followers)."""
    import asyncio

    import ray

    from actors.cluster.follower import start_follower
    from actors.cluster.spares import SparePool, spare_name

    node = ray_cluster.head_node_id
    names = [spare_name(node) for _ in range(2)]
    actors = [
        start_follower(Member(node_id=node, actor=n, store_dir=str(tmp_path)), None, namespace)
        for n in names
    ]
    try:
        ray.get([a.pid.remote() for a in actors], timeout=120)
        pool = SparePool(namespace, start_follower)

        async def search_twice() -> list[str | None]:
            await pool.find(frozenset())
            first = pool.claim(node)
            pool._finding = None  # as after a failed search: the next claim searches again
            await pool.find(frozenset())
            return [first, pool.claim(node), pool.claim(node)]

        first, second, third = asyncio.run(search_twice())
        assert {first, second} == set(names) and third is None
        assert pool.idle == {node: []}
    finally:
        for a in actors:
            ray.kill(a, no_restart=True)
