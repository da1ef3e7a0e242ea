"""Context hosts: many contexts in one process, activated on demand, deactivated when
idle; the host placement rule (pure) and hosted placement through the directory."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import ray
from click.testing import CliRunner

from actors.client.lookup import lookup
from actors.cluster.directory_handle import directory
from actors.cluster.placement import choose_host
from actors.cluster.placing import place
from actors.server.hosting import HostHandle, start_host
from morphz.cli.main import cli
from protocol.errors import NotFound, RequestError
from service.admin import export_history
from tests.actors.checks import check_history
from tests.actors.cluster import RayCluster

LIVE = {"n1": {"CPU": 1.0}, "n2": {"CPU": 1.0, "gpu": 1.0}}


def _report(actor: str, node: str, **extra: object) -> dict[str, object]:
    return {"actor": actor, "node_id": node, "store_dir": "/s", "full": None, "cpu": 0.0, **extra}


# -- the host placement rule, no Ray -------------------------------------------------


def test_choose_host_by_count_then_load_skipping_full_and_dead_nodes() -> None:
    a, b = _report("host:a", "n1"), _report("host:b", "n2")
    assert choose_host("spread", [a, b], {}, LIVE)["actor"] == "host:a"  # tie: by name
    assert choose_host("spread", [a, b], {"host:a": 3, "host:b": 2}, LIVE)["actor"] == "host:b"
    busy = _report("host:b", "n2", cpu=1.0)  # 2 contexts at 1 core weigh 4 > 3 idle ones
    assert choose_host("spread", [a, busy], {"host:a": 3, "host:b": 2}, LIVE)["actor"] == "host:a"
    full = _report("host:a", "n1", full="100 contexts active (budget 100)")
    assert choose_host("spread", [full, b], {}, LIVE)["actor"] == "host:b"
    gone = _report("host:c", "n9")
    assert choose_host("spread", [gone, b], {"host:b": 50}, LIVE)["actor"] == "host:b"
    assert choose_host("resource:gpu", [a, b], {"host:b": 9}, LIVE)["actor"] == "host:b"
    assert choose_host("node:n1", [a, b], {"host:a": 9}, LIVE)["actor"] == "host:a"
    with pytest.raises(RequestError) as e:
        choose_host("spread", [full], {}, LIVE)
    assert e.value.code == "no_host"
    with pytest.raises(RequestError) as e:
        choose_host("nowhere", [a], {}, LIVE)
    assert e.value.code == "bad_placement"


# -- one host, many contexts (Ray) ---------------------------------------------------


@pytest.fixture
def host(ray_cluster: RayCluster, tmp_path: Path, namespace: str) -> Iterator[HostHandle]:
    h = start_host("h0", store_dir=tmp_path / "store", namespace=namespace, idle_after=0.3)
    yield h
    h.shutdown()


def _tx(version: int, frame: str, body: str) -> str:
    return f"(context-tx (base-version {version}) (derive {frame} (note {body})))"


@pytest.mark.ray
def test_contexts_share_a_host_and_stay_apart(host: HostHandle) -> None:
    a, b = host.context("alpha"), host.context("beta")
    assert a.pid() == b.pid()  # one process
    assert a.submit(_tx(0, "x", "a1")).committed
    assert a.submit(_tx(1, "y", "a2")).committed
    assert b.submit(_tx(0, "x", "b1")).committed
    assert (a.version(), b.version()) == (2, 1)
    assert a.frame("x")["body"] == "(note a1)" and b.frame("x")["body"] == "(note b1)"
    with pytest.raises(NotFound):  # no such context: nothing is created, nothing kept
        host.context("ghost", create=False)
    assert [c["name"] for c in host.contexts()] == ["alpha", "beta"]
    with pytest.raises(ray.exceptions.RayTaskError) as e:  # only a context's own methods
        ray.get(host.actor.call.remote("alpha", "_context", [], {}))
    assert isinstance(e.value.cause, RequestError) and e.value.cause.code == "bad_argument"


@pytest.mark.ray
def test_idle_deactivation_then_reactivation_keeps_exactly_once(host: HostHandle) -> None:
    ctx = host.context("gamma")
    first = ctx.submit(_tx(0, "x", "one"), client_id="c-gamma-1")
    assert first.committed and first.version == 1
    deadline = time.monotonic() + 10
    while host.contexts()[0]["state"] != "idle":
        assert time.monotonic() < deadline, "the idle context was never deactivated"
        time.sleep(0.1)
    assert host.load()["deactivations"] >= 1
    again = ctx.submit(_tx(0, "x", "one"), client_id="c-gamma-1")  # a retry after the idle
    assert again.duplicate and again.version == 1
    assert ctx.version() == 1 and host.contexts()[0]["activations"] == 2
    assert ctx.frame("x")["body"] == "(note one)"


@pytest.mark.ray
def test_full_host_refuses_new_activations_only(
    ray_cluster: RayCluster, tmp_path: Path, namespace: str
) -> None:
    h = start_host("small", store_dir=tmp_path / "s", namespace=namespace, max_active=1)
    try:
        a = h.context("one")
        with pytest.raises(RequestError) as e:
            h.context("two")
        assert e.value.code == "host_full"
        assert [c["name"] for c in h.contexts()] == ["one"]  # a refused name is not kept
        assert a.submit(_tx(0, "x", "still")).committed  # the active one keeps serving
        h.deactivate("one")
        b = h.context("two")  # room again
        assert b.version() == 0
        assert h.load()["refused"] == 1
    finally:
        h.shutdown()


@pytest.mark.parametrize(
    "bad",
    [
        {"idle_after": -1},
        {"idle_after": 0},
        {"idle_after": float("nan")},
        {"idle_after": True},
        {"idle_after": "60"},
        {"max_active": 0},
        {"max_active": 1.5},
        {"max_active": True},
        {"memory_budget": 0},
        {"memory_budget": "8G"},
        {"cpu_budget": -0.5},
        {"cpu_budget": float("inf")},
        {"namespace": 3},
        {"store_dir": 3},
        {"lifetime": "forever"},
    ],
)
def test_start_host_refuses_bad_arguments_before_starting_anything(
    tmp_path: Path, bad: dict[str, Any]
) -> None:
    """Checked before Ray is reached (this test runs without a cluster) and before any
    store directory is made."""
    kwargs: dict[str, Any] = {"store_dir": tmp_path / "s", "namespace": "never", **bad}
    with pytest.raises(RequestError) as e:
        start_host("bad", **kwargs)
    assert e.value.code == "bad_argument"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.ray
def test_no_commit_lost_or_doubled_across_deactivation_cycles(host: HostHandle) -> None:
    ctx = host.context("cycles")
    records: list[dict[str, Any]] = []

    async def writer(k: int) -> None:
        for i in range(15):
            cid = f"c-w{k}-{i}"
            r = await ctx.submit_async(
                f"(context-tx (base-version 0) (derive w{k}/n{i} (note {i})))", client_id=cid
            )
            records.append({"client_id": cid, "outcome": r.status, "version": r.version})

    async def cycler() -> None:
        for _ in range(20):
            await asyncio.sleep(0.01)
            await host.actor.deactivate.remote("cycles")

    async def run() -> None:
        await asyncio.gather(*(writer(k) for k in range(4)), cycler())

    asyncio.run(run())
    outcomes = check_history(export_history(ctx), records)
    assert outcomes == {"committed": 60}
    assert host.load()["deactivations"] >= 2


# -- hosted placement through the directory ------------------------------------------


@pytest.mark.ray
def test_place_hosted_goes_to_the_emptiest_host_and_lookup_follows(
    ray_cluster: RayCluster, tmp_path: Path, namespace: str
) -> None:
    d = directory(namespace)
    hosts = [
        start_host(f"p{i}", store_dir=tmp_path / f"s{i}", namespace=namespace) for i in range(2)
    ]
    try:
        deadline = time.monotonic() + 15
        while len(d.hosts()) < 2:
            assert time.monotonic() < deadline, "the hosts never reported to the directory"
            time.sleep(0.2)
        handles = [place(f"user-{i}", hosted=True, namespace=namespace) for i in range(4)]
        placed = [d.get(f"user-{i}").primary.actor for i in range(4)]
        assert sorted(placed) == ["host:p0", "host:p0", "host:p1", "host:p1"]
        assert handles[0].submit(_tx(0, "x", "placed")).committed
        found = lookup("user-0", namespace, store_dir=tmp_path / ("s" + placed[0][-1]))
        assert found.frame("x")["body"] == "(note placed)"
        again = place("user-0", hosted=True, namespace=namespace)  # idempotent
        assert again.version() == 1
        hosts[int(placed[1][-1])].deactivate("user-1")
        r = CliRunner().invoke(cli, ["contexts", "--cluster", "--namespace", namespace, "--json"])
        assert r.exit_code == 0, r.output
        rows = {c["name"]: c["primary"] for c in json.loads(r.stdout)["contexts"]}
        assert rows["user-0"]["host"] == placed[0] and rows["user-0"]["state"] == "active"
        assert rows["user-0"]["last_use"] is not None
        assert rows["user-1"]["state"] == "idle"
        assert hosts[int(placed[1][-1])].contexts()[0]["state"] == "idle"  # not activated
        with pytest.raises(RequestError) as e:  # hosted contexts have no followers
            place("user-9", hosted=True, followers=1, namespace=namespace)
        assert e.value.code == "hosted_unreplicated"
        with pytest.raises(RequestError) as e, pytest.warns(DeprecationWarning):
            place("user-9", hosted=True, replicas=1, namespace=namespace)  # the old name too
        assert e.value.code == "hosted_unreplicated"
        with pytest.raises(NotFound):  # nothing was placed by the refusals
            d.get("user-9")
    finally:
        for h in hosts:
            h.shutdown()


# -- connect and lookup reach hosted contexts ---------------------------------------


def _wait_reports(d: Any, actors: set[str], full: str | None = None) -> None:
    """Until every host of *actors* reported to the directory (and *full* says it is full)."""
    deadline = time.monotonic() + 15
    while True:
        reports = {r["actor"]: r for r in d.hosts()}
        if actors <= set(reports) and (full is None or reports[full]["full"]):
            return
        assert time.monotonic() < deadline, f"no report from {actors - set(reports)} / {full}"
        time.sleep(0.1)


@dataclass
class HostPair:
    """Two hosts ``h0`` and ``h1`` serving one store root, both reported to this test's
    directory."""

    directory: Any
    root: Path
    h0: HostHandle
    h1: HostHandle


@pytest.fixture
def two_hosts(
    ray_cluster: RayCluster, tmp_path: Path, namespace: str
) -> Iterator[Callable[..., HostPair]]:
    """``two_hosts(**h0_options)``: hosts ``h0`` (with those ``start_host`` options) and
    ``h1`` for directory-placed contexts; after the test both stop and every entry of the
    directory is removed."""
    root = tmp_path / "root"
    d = directory(namespace)
    started: list[HostHandle] = []

    def start(**h0_options: Any) -> HostPair:
        started.append(start_host("h0", store_dir=root, namespace=namespace, **h0_options))
        started.append(start_host("h1", store_dir=root, namespace=namespace))
        _wait_reports(d, {"host:h0", "host:h1"})
        return HostPair(d, root, *started)

    try:
        yield start
    finally:
        for h in started:
            try:
                h.shutdown()
            except Exception:  # stopped by the test already
                pass
        for entry in d.list():
            d.remove(entry.name)


@pytest.mark.ray
def test_connect_serves_a_context_from_a_named_host(
    ray_cluster: RayCluster, tmp_path: Path, namespace: str
) -> None:
    from actors.server.connect import connect

    store, other = tmp_path / "s", tmp_path / "other"
    h = connect("solo", store_dir=store, namespace=namespace, host="cx", window=4)
    host = start_host("cx", store_dir=store, namespace=namespace)  # the running one
    try:
        assert h.transport.actor_name == "host:cx" and h.pid() == host.load()["pid"]
        assert h.submit(_tx(0, "x", "one"), client_id="c-solo-1").committed
        again = connect("solo", store_dir=store, namespace=namespace, host="cx")
        assert again.version() == 1 and host.contexts()[0]["name"] == "solo"
        with pytest.raises(RequestError) as e:  # the host serves another store root
            connect("elsewhere", store_dir=other, namespace=namespace, host="cx")
        assert e.value.code == "context_elsewhere"
        assert not (store / "elsewhere").exists() and not other.exists()
        with pytest.raises(RequestError) as e:
            connect("solo", store_dir=store, namespace=namespace, host="no/such")
        assert e.value.code == "bad_context_name"
        with pytest.raises(RequestError) as e:
            connect("r", store_dir=store, namespace=namespace, host="cx", replication=object())  # type: ignore[arg-type]
        assert e.value.code == "hosted_unreplicated"
        # no directory: an active hosted context is found through its advert in the store
        found = lookup("solo", namespace, store_dir=store)
        assert found.transport.actor_name == "host:cx" and found.version() == 1
        host.deactivate("solo")
        retry = again.submit(_tx(0, "x", "one"), client_id="c-solo-1")  # reactivated
        assert retry.duplicate and retry.version == 1
    finally:
        host.shutdown()


@pytest.mark.ray
def test_connect_and_lookup_follow_the_directory_to_the_host_and_past_a_stopped_one(
    two_hosts: Callable[..., HostPair], tmp_path: Path, namespace: str
) -> None:
    from actors.server.connect import connect

    hosts = two_hosts()
    d, root = hosts.directory, hosts.root
    place("u", hosted=True, namespace=namespace)
    assert d.get("u").primary.actor == "host:h0"  # the emptiest, ties by name
    hosts.h0.deactivate("u")
    h = connect("u", store_dir=root, namespace=namespace)  # the directory knows it
    assert h.transport.actor_name == "host:h0"
    assert hosts.h0.contexts()[0]["state"] == "active"  # connect activated it
    first = h.submit(_tx(0, "x", "one"), client_id="c-u-1")
    assert first.committed
    for kwargs, code in (
        ({"store_dir": root, "host": "h1"}, "context_elsewhere"),
        ({"store_dir": tmp_path / "other"}, "context_elsewhere"),
    ):
        with pytest.raises(RequestError) as e:
            connect("u", namespace=namespace, **kwargs)
        assert e.value.code == code
    hosts.h0.shutdown()  # stopped for good: the directory moves u to the other host
    found = lookup("u", namespace)
    assert found.transport.actor_name == "host:h1" and found.version() == 1
    assert d.get("u").primary.actor == "host:h1"
    again = h.submit(_tx(0, "x", "one"), client_id="c-u-1")  # the old handle follows
    assert again.duplicate and again.version == 1
    assert h.transport.actor_name == "host:h1"


@pytest.mark.ray
def test_idle_contexts_leave_a_full_host_and_their_handles_follow(
    two_hosts: Callable[..., HostPair], namespace: str
) -> None:
    hosts = two_hosts(max_active=3)
    d, h0, h1 = hosts.directory, hosts.h0, hosts.h1
    a, b, c = (place(n, hosted=True, namespace=namespace) for n in ("a", "b", "c"))
    assert [d.get(n).primary.actor for n in ("a", "b")] == ["host:h0", "host:h1"]
    d.move_hosted("c", to="host:h0")  # c on h0 whatever the CPU weights said
    assert c.submit(_tx(0, "x", "c1"), client_id="c-c-1").committed
    assert c.transport.actor_name == "host:h0"
    d.move_hosted("b", to="host:h0")  # b was active on h1: released there first
    assert b.version() == 0  # h1 answers context_moved: the handle follows to h0
    assert b.transport.actor_name == "host:h0"
    assert {x["name"] for x in h1.contexts()} == set()
    h0.deactivate("b")
    h0.deactivate("c")
    h0.context("z1")  # not placed: they fill h0 (a, z1, z2 active; its budget is 3)
    h0.context("z2")
    _wait_reports(d, {"host:h0"}, full="host:h0")
    assert d.rebalance(limit=1) == {"host:h0": ["b"]}  # idle there; a is active, stays
    assert d.get("b").primary.actor == "host:h1"
    assert b.submit(_tx(0, "y", "b1")).committed  # told context_moved: follows to h1
    assert b.transport.actor_name == "host:h1" and b.pid() == h1.load()["pid"]
    # c, idle on the full h0: its call is refused host_full, so the handle asks the
    # directory, which hands c to the host with room
    again = c.submit(_tx(0, "x", "c1"), client_id="c-c-1")
    assert again.duplicate and again.version == 1
    assert d.get("c").primary.actor == "host:h1" and c.transport.actor_name == "host:h1"
    assert {x["name"] for x in h0.contexts()} == {"a", "z1", "z2"}
    for bad, code in (
        (lambda: d.move_hosted("b", to="ctx:b"), "bad_argument"),
        (lambda: d.move_hosted("b", to="host:nobody"), "not_found"),
        (lambda: d.rebalance(limit=-1), "bad_argument"),
    ):
        with pytest.raises(RequestError) as e:
            bad()
        assert e.value.code == code
    assert d.get("b").primary.actor == "host:h1"  # the refusals moved nothing
    assert a.version() == 0 and a.transport.actor_name == "host:h0"  # a stayed
    # the operator's command: a, idle on the full h0 now, is moved off it
    h0.deactivate("a")
    h0.context("z3")
    _wait_reports(d, {"host:h0"}, full="host:h0")
    args = ["contexts", "--cluster", "--rebalance", "--namespace", namespace, "--json"]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["moved"] == {"host:h0": ["a"]}
    assert a.version() == 0 and a.transport.actor_name == "host:h1"
    r = CliRunner().invoke(cli, ["contexts", "--rebalance"])
    assert r.exit_code == 2 and "--cluster" in r.output


@pytest.mark.ray
def test_a_host_restarted_after_giving_a_context_away_sends_its_callers_on(
    two_hosts: Callable[..., HostPair], namespace: str
) -> None:
    hosts = two_hosts()
    d, h0 = hosts.directory, hosts.h0
    place("m", hosted=True, namespace=namespace)
    assert d.get("m").primary.actor == "host:h0"
    d.move_hosted("m", to="host:h1")
    moved = lookup("m", namespace)  # active on h1: it holds the store
    assert moved.submit(_tx(0, "x", "one")).committed
    os.kill(int(h0.load()["pid"]), signal.SIGKILL)  # h0 restarts, its releases forgotten
    with pytest.raises(ray.exceptions.RayTaskError) as e:  # a caller that still asks h0
        ray.get(h0.actor.call.remote("m", "version", [], {}))
    assert isinstance(e.value.cause, RequestError) and e.value.cause.code == "context_moved"
    assert h0.contexts() == [] and moved.version() == 1


# -- the load test at scale, small ---------------------------------------------------


def test_loadtest_many_contexts_needs_hosts_and_a_duration() -> None:
    r = CliRunner().invoke(
        cli, ["loadtest", "--threads", "2", "--contexts", "300", "--duration", "1"]
    )
    assert r.exit_code == 2 and "--hosts" in r.output
    r = CliRunner().invoke(
        cli, ["loadtest", "--threads", "2", "--hosts", "2", "--transactions", "10"]
    )
    assert r.exit_code == 2 and "--duration" in r.output


@pytest.mark.ray
def test_loadtest_hosted_wanders_over_idle_contexts_and_checks_every_history(
    ray_cluster: RayCluster,
) -> None:
    args = ["--json", "loadtest", "--hosts", "2", "--contexts", "40", "--threads", "4"]
    args += ["--duration", "2", "--idle-after", "0.3", "--switch-every", "0.2"]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)  # stdout holds the document alone; Ray's chatter goes to stderr
    assert doc["history_ok"] and doc["contexts_checked"] >= 4 and doc["unknown"] == 0
    assert doc["cycles_checked"] > 0  # the checked contexts went idle and came back
    assert doc["committed"] > 0 and doc["deactivations"] > 0
    assert doc["activations"] > 40  # every context created once, some activated again
    assert doc["memory_mb"]["per_idle_context"] is not None


@pytest.mark.ray
def test_a_killed_host_takes_its_contexts_down_and_they_come_back_with_every_commit(
    host: HostHandle,
) -> None:
    a, b = host.context("k-a"), host.context("k-b")
    acked = [a.submit(_tx(0, f"a{i}", "x"), client_id=f"c-ka-{i}") for i in range(5)]
    assert all(r.committed for r in acked) and b.submit(_tx(0, "b", "y")).committed
    old = a.pid()
    os.kill(old, signal.SIGKILL)  # both contexts' process: both go down together
    assert a.version() == 5 and b.version() == 1  # the restarted host reactivates each
    assert a.pid() == b.pid() != old
    again = a.submit(_tx(0, "a0", "x"), client_id="c-ka-0")  # a retry: the first receipt
    assert again.duplicate and again.version == acked[0].version
