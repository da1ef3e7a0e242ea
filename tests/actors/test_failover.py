"""Replicated contexts losing a node, on a 3-node ``ray.cluster_utils.Cluster`` (child processes).

Each scenario runs in its own child process and cluster
(:mod:`tests.actors.multinode`), with each node's stores under its own root:

* a node removed mid-load with replication factor 1: every acknowledged
  commit is on the new primary exactly once, the history checks hold, a retry
  of a transaction acknowledged by the old primary answers its original
  receipt, and the clients (a handle, agent threads) followed the promotion;
* the old primary: a restart of it under its old name is refused (``fenced``)
  and writes nothing; when its node returns it rejoins as a follower, its old
  store replaced by the new primary's;
* a follower's reads never show an unacknowledged commit (its applied version
  trails or equals the primary's acknowledged one, every reply says so);
* with replication off, losing the node makes the context unavailable
  (``TransportError``) until the node returns, and nothing acknowledged is lost;
  the returned node serves it again under its name (``lookup``);
* the promoted primary's search finds frames of both epochs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from service.admin import export_history
from tests.actors.multinode import CHILD_TIMEOUT, NAMESPACE, ROOT, MultiNode, run_scenario

pytestmark = [pytest.mark.slow, pytest.mark.subprocess]

WAIT = 120.0


def _until(what: str, check: Any, timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _tx(prefix: str, i: int) -> str:
    return f"(context-tx (base-version 0) (derive {prefix}/d{i} (i {i})))"


def _log_of(handle: Any) -> dict[str, int]:
    export = export_history(handle)
    log = export["log"]
    assert [r["version"] for r in log] == list(range(1, len(log) + 1)), "a gap in the log"
    ids = [r["client_id"] for r in log if r["client_id"] is not None]
    assert len(ids) == len(set(ids)), "a client id was applied twice"
    return {r["client_id"]: r["version"] for r in log if r["client_id"] is not None}


def node_lost_mid_load(multi: MultiNode) -> dict[str, Any]:
    """Replication factor 1: the primary's node is removed while agents and a driver commit."""
    import ray

    from actors.client.lookup import lookup
    from actors.cluster.directory_handle import directory
    from actors.cluster.placing import place
    from harness.agent_threads import decode_records, spawn_agent
    from protocol.errors import MorphzError
    from tests.actors.checks import check_history

    name, lost = "rep-load", multi.node_ids[1]
    handle = place(name, followers=1, placement=f"node:{lost}", namespace=NAMESPACE)
    entry = directory(NAMESPACE).get(name)
    assert entry.primary.node_id == lost and len(entry.followers) == 1, entry
    survivor = entry.followers[0].node_id
    before = [handle.submit(_tx("pre", i), client_id=f"pre-{i}") for i in range(20)]
    before.append(
        handle.submit(
            "(context-tx (base-version 0) (derive pre/marker (glacier acknowledged before)))",
            client_id="pre-marker",
        )
    )
    assert all(r.committed for r in before)
    agent = spawn_agent(namespace=NAMESPACE, node_id=multi.node_ids[0])
    spec = {
        "context": name,
        "namespace": NAMESPACE,
        "threads": 3,
        "transactions": 25,
        "conflict_rate": 0.3,
        "seed": 5,
    }
    running = agent.run.remote(spec)
    _until("agent progress", lambda: handle.version() >= 30)
    removed_at = time.monotonic()
    multi.remove_node(1)
    acked: dict[str, int] = {}
    first_new: float | None = None
    i = 0
    # The removed node's processes may outlive remove_node() for a moment, and the old
    # primary, its follower still up, may acknowledge a few more commits: go on until
    # 30 are acknowledged and at least one of them by the promoted primary.
    while len(acked) < 30 or first_new is None:
        assert time.monotonic() - removed_at < WAIT, "no commit through a promoted primary"
        try:
            r = handle.submit(_tx("drv", i), client_id=f"drv-{i}", timeout=20)
        except MorphzError as e:  # unknown outcome: retried under the same client id
            assert e.code in ("actor_unavailable", "replicas_unavailable", "fenced"), e
            assert time.monotonic() - removed_at < WAIT, "no primary came back"
            continue
        assert r.committed, r
        acked[f"drv-{i}"] = r.version
        if first_new is None and handle.transport.actor_name != entry.primary.actor:
            first_new = time.monotonic() - removed_at
        i += 1
    records = decode_records(ray.get(running, timeout=300))
    promoted = directory(NAMESPACE).get(name)
    assert promoted.epoch == 1 and promoted.primary.node_id == survivor, promoted
    new = lookup(name, NAMESPACE)
    logged = _log_of(new)
    for r in before:
        assert logged[str(r.client_id)] == r.version, r
    for cid, version in acked.items():
        assert logged[cid] == version, cid
    counts = check_history(export_history(new), records)
    again = new.submit(_tx("pre", 0), client_id="pre-0")  # acknowledged by the old primary
    assert again.duplicate and again.version == before[0].version, again
    # The promoted primary's lexical index is rebuilt from its store: it finds frames
    # committed by the old primary and by itself.
    assert new.submit(
        "(context-tx (base-version 0) (derive post/marker (glacier committed after)))",
        client_id="post-marker",
    ).committed
    found = new.search({"query": "glacier", "kinds": ["frame"], "limit": 10})
    assert sorted(found["recalled"]) == ["post/marker", "pre/marker"], found
    return {
        "failover_s": first_new,
        "counts": counts,
        "log": len(logged),
        "new_primary": promoted.primary.actor,
    }


def _name_free(actor: str) -> bool:
    import ray

    try:
        ray.get_actor(actor, namespace=NAMESPACE)
    except ValueError:
        return True
    return False


def _kill_named(actor: str) -> None:
    """Stop the actor named *actor* if Ray still has one (it may be dying meanwhile)."""
    import ray

    try:
        ray.kill(ray.get_actor(actor, namespace=NAMESPACE), no_restart=True)
    except ValueError:
        pass


def old_primary_fenced_and_rejoins(multi: MultiNode) -> dict[str, Any]:
    """Replicas 2 (acks 1): the old primary's restart is fenced; back, it rejoins as a follower."""
    import ray

    from actors.client.joining import remote_class
    from actors.client.lookup import lookup
    from actors.client.names import primary_actor
    from actors.client.nodes import pinned
    from actors.cluster.directory_handle import directory
    from actors.cluster.follower_role import follower_handle
    from actors.cluster.placing import place
    from actors.cluster.replication import REPLICATION
    from actors.server.context_actor import ContextActor
    from protocol.errors import MorphzError

    name = "rep-fence"
    handle = place(
        name, followers=2, acks=1, placement=f"node:{multi.node_ids[2]}", namespace=NAMESPACE
    )
    old = directory(NAMESPACE).get(name)
    old_root = old.primary.store_dir
    acked = [handle.submit(_tx("a", i), client_id=f"a-{i}") for i in range(15)]
    multi.remove_node(2)
    promoted = _until("a promotion", lambda: (e := directory(NAMESPACE).get(name)).epoch == 1 and e)
    new = lookup(name, NAMESPACE)
    more = [new.submit(_tx("b", i), client_id=f"b-{i}") for i in range(10)]
    # The old primary's node returns (a new node id, the same disk).
    back = multi.add_node(2)
    assert multi.roots[back] == old_root
    # The old primary's constructor runs again there (as Ray reruns it on a restart,
    # with the replication hook place gave it): it is refused and opens nothing.
    _kill_named(primary_actor(name, 0))  # Ray may still hold its name
    _until("the old name to be free", lambda: _name_free(primary_actor(name, 0)))
    again = (
        remote_class(ContextActor)
        .options(
            name=primary_actor(name, 0),
            namespace=NAMESPACE,
            num_cpus=0,
            scheduling_strategy=pinned(back),
        )
        .remote(old_root, name, None, None, False, namespace=NAMESPACE, replication=REPLICATION)
    )
    from ray.exceptions import RayActorError

    try:
        info = ray.get(again.handshake.remote(), timeout=60)
    except RayActorError:  # the supervisor, still telling the old name, asked it first:
        info = None  # it answered fenced (anything else is not stopped) and was stopped
    assert info is None or (info["open_error"] and info["open_error"]["code"] == "fenced"), info
    # Called as it is (a handle would follow the promotion): it refuses, or the supervisor
    # has already stopped it (a replaced primary is stopped once it knows).

    from actors.client.handle import ContextHandle, decode_receipt

    _, payload = ContextHandle.prepare(_tx("x", 0), "x-0")
    try:
        decode_receipt(ray.get(again.submit.remote(payload), timeout=60))
    except MorphzError as e:
        fenced_code = e.code
    except RayActorError:
        fenced_code = "stopped"
    else:
        raise AssertionError("the old primary accepted a write")
    assert fenced_code in ("fenced", "stopped"), fenced_code
    _kill_named(primary_actor(name, 0))
    # The supervisor adds the returned node as a follower: its store becomes the new primary's.
    rejoined = _until(
        "the old primary's node rejoining",
        lambda: [m for m in directory(NAMESPACE).get(name).followers if m.node_id == back],
    )[0]
    follower = follower_handle(rejoined, NAMESPACE)
    version = new.version()
    _until("the rejoined follower catching up", lambda: follower.status()["held_seq"] > 0)
    new.submit(_tx("c", 0), client_id="c-0")
    version = new.version()
    _until(
        "the rejoined follower applying",
        lambda: follower.read("version").applied_version >= version - 1,
    )
    status = follower.status()
    assert status["epoch"] == 1, status
    logged = _log_of(new)
    assert "x-0" not in logged
    for r in acked + more:
        assert logged[str(r.client_id)] == r.version, r
    frame = follower.read("frame", "a/d0")
    assert frame.served_by == "follower" and frame.reply["id"] == "a/d0", frame
    return {
        "promoted": promoted.primary.actor,
        "fenced_code": fenced_code,
        "rejoined": rejoined.actor,
        "status": status,
    }


def follower_reads_acknowledged_only(multi: MultiNode) -> dict[str, Any]:
    """A follower never shows a commit the primary has not acknowledged; replies say so."""
    from actors.cluster.directory_handle import directory
    from actors.cluster.follower_role import follower_handle
    from actors.cluster.placing import place

    name = "rep-reads"
    handle = place(name, followers=1, placement=f"node:{multi.node_ids[1]}", namespace=NAMESPACE)
    follower = follower_handle(directory(NAMESPACE).get(name).followers[0], NAMESPACE)
    seen: list[tuple[int, int]] = []
    for i in range(40):
        receipt = handle.submit(_tx("r", i), client_id=f"r-{i}")
        read = follower.read("version")
        # the follower's state is never ahead of what the primary has acknowledged
        assert read.served_by == "follower" and read.applied_version <= receipt.version, read
        assert read.reply == read.applied_version, read
        seen.append((receipt.version, read.applied_version))
    status = _until(
        "the follower applying the last acknowledged commit",
        lambda: (s := follower.read("version")).applied_version == handle.version() and s,
    )
    return {"seen": seen[-5:], "final": status.model_dump()}


def unreplicated_node_lost(multi: MultiNode) -> dict[str, Any]:
    """Replication off: the context is unavailable while its node is gone (nothing is
    promoted); when the node returns with its disk, it is served there again under its
    name and every acknowledged commit is there."""

    from actors.client.lookup import lookup
    from actors.client.transport import RetryPolicy
    from actors.cluster.directory_handle import directory
    from actors.cluster.placing import place
    from protocol.errors import TransportError

    name = "plain"
    handle = place(name, placement=f"node:{multi.node_ids[1]}", namespace=NAMESPACE)
    root = directory(NAMESPACE).get(name).primary.store_dir
    acked = [handle.submit(_tx("p", i), client_id=f"p-{i}") for i in range(10)]
    handle.transport.retry = RetryPolicy(attempts=2)
    multi.remove_node(1)
    unavailable = ""
    deadline = time.monotonic() + WAIT
    k = 100
    while not unavailable:  # its process may answer a moment longer: those acks count too
        assert time.monotonic() < deadline, "a context on a lost node kept answering"
        try:
            acked.append(handle.submit(_tx("p", k), client_id=f"p-{k}", timeout=10))
            k += 1
        except TransportError as e:
            unavailable = e.code
    assert directory(NAMESPACE).get(name).epoch == 0  # nothing was promoted
    back = multi.add_node(1)
    assert multi.roots[back] == root
    # The supervisor re-creates the actor on the returned node (a new node id, the same
    # store root and disk): the context is found by name again, nobody re-connects.
    _until(
        "the context served again on the returned node",
        lambda: directory(NAMESPACE).get(name).primary.node_id == back,
    )
    again = lookup(name, NAMESPACE)
    assert again.handshake()["node_id"] == back
    logged = _log_of(again)
    for r in acked:
        assert logged[str(r.client_id)] == r.version, r
    after = again.submit(_tx("q", 0), client_id="q-0")
    assert after.committed and after.version == max(logged.values()) + 1, after
    return {"unavailable": unavailable, "acked": len(acked), "log": len(logged)}


def reads_then_node_lost(multi: MultiNode) -> dict[str, Any]:
    """Two scenarios on one cluster (a bring-up is the slow part): follower reads, then a
    node lost mid-load."""
    return {"reads": follower_reads_acknowledged_only(multi), **node_lost_mid_load(multi)}


def unreplicated_then_fenced(multi: MultiNode) -> dict[str, Any]:
    """Replication off losing node 1 (back again), then the old primary on node 2 fenced."""
    return {"plain": unreplicated_node_lost(multi), **old_primary_fenced_and_rejoins(multi)}


@pytest.mark.parametrize("scenario", ["reads_then_node_lost", "unreplicated_then_fenced"])
def test_replicated_scenario(scenario: str) -> None:
    verdict = run_scenario(f"tests.actors.test_failover:{scenario}")
    assert verdict["ok"], verdict.get("traceback") or verdict


def test_loadtest_removing_nodes_with_followers_checks_every_history(tmp_path: Path) -> None:
    """``morphz loadtest --followers 1 --kill-node-every S``: nodes of its own test cluster
    are removed and added back mid-load; every history checks on the current primaries."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("RAY_ADDRESS", None)
    env.pop("MORPHZ_STORE", None)
    args = ["--threads", "4", "--contexts", "2", "--duration", "8", "--conflict-rate", "0.2"]
    done = subprocess.run(
        [sys.executable, "-m", "morphz.cli", "--store", str(tmp_path), "--json", "loadtest", *args]
        + ["--followers", "1", "--kill-node-every", "6"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT,
    )
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    assert done.returncode == 0 and doc["history_ok"], (doc, done.stderr[-3000:])
    assert doc["violation_count"] == 0 and doc["committed"] > 0
    assert doc["requested"]["followers"] == 1 and doc["kills"] >= 1, doc["kill_log"]
    assert all("error" not in k for k in doc["kill_log"]), doc["kill_log"]
