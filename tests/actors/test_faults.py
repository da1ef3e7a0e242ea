"""Unkind faults on a 3-node ``ray.cluster_utils.Cluster`` (child processes, as
tests/actors/test_failover.py):

* **a busy primary** (its store thread held by a slow write and its event loop blocked,
  for longer than the hang threshold, commits waiting behind them) is not declared hung:
  its pings are answered by their own thread;
* **a paused primary** (SIGSTOP of its process, its node alive) is declared hung by the
  supervisor and its follower promoted; resumed (SIGCONT), the old primary — called by a
  client still holding its actor, which never follows a promotion — never acknowledges a
  commit: everything it was sent during and after the pause is refused (``fenced`` /
  ``stale_epoch``), none of it reaches the new primary, and no read it was sent (queued
  during the pause, served first thing on resume) answers a state older than the new
  primary's: its read lease lapsed, and every commit acknowledged to
  the following client is there exactly once;
* **the directory's node lost**, with Ray's default health checks: the directory (started
  on a non-head node, as any process there would) has a standby on another node, which
  finds the node's raylet down, takes over under a newer leadership term (the lost one's
  term can write nothing more), places a new context and promotes the follower of a
  context whose primary was on that node.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.actors.multinode import (
    CHILD_TIMEOUT,
    NAMESPACE,
    ROOT,
    MultiNode,
    pinned_call,
    run_scenario,
)
from tests.actors.test_failover import WAIT, _log_of, _tx, _until

pytestmark = [pytest.mark.slow, pytest.mark.subprocess]


class Writer(threading.Thread):
    """Commits through a handle that follows promotions, retrying each transaction under
    its client id until acknowledged; records when each acknowledgement came."""

    def __init__(self, handle: Any, prefix: str) -> None:
        super().__init__(daemon=True)
        self.handle, self.prefix = handle, prefix
        self.acked: dict[str, tuple[int, float]] = {}
        self.stop = threading.Event()
        self.errors: list[str] = []

    def run(self) -> None:
        from protocol.errors import MorphzError

        i = 0
        while not self.stop.is_set():
            cid = f"{self.prefix}-{i}"
            try:
                r = self.handle.submit(_tx(self.prefix, i), client_id=cid, timeout=2)
            except MorphzError as e:
                self.errors.append(e.code)
                continue
            assert r.committed, r
            self.acked[cid] = (r.version, time.monotonic())
            i += 1

    def longest_gap(self, start: float, end: float) -> float:
        """The longest stretch without an acknowledgement within [start, end]."""
        times = sorted(t for _, t in self.acked.values() if start <= t <= end)
        points = [start, *times, end]
        return max(b - a for a, b in zip(points, points[1:], strict=False))


def paused_primary_never_acknowledges(multi: MultiNode) -> dict[str, Any]:
    """Pause the primary past detection, resume it, and write to it through its old actor
    (its threads are stopped whatever happens: one calling Ray after the scenario's
    shutdown would end the process before it reports its verdict)."""
    stop = threading.Event()
    threads: list[threading.Thread] = []
    try:
        return _paused_primary(multi, stop, threads)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=WAIT)


def _paused_primary(
    multi: MultiNode, stop: threading.Event, threads: list[threading.Thread]
) -> dict[str, Any]:
    import ray
    from ray.exceptions import RayActorError

    from actors.client.handle import ContextHandle, decode_receipt
    from actors.client.lookup import lookup
    from actors.client.replies import open_reply
    from actors.cluster.directory_handle import directory
    from actors.cluster.placing import place
    from actors.cluster.spares import is_spare
    from protocol.errors import MorphzError

    name, node = "zombie", multi.node_ids[1]
    handle = place(name, followers=1, placement=f"node:{node}", namespace=NAMESPACE)
    entry = directory(NAMESPACE).get(name)
    old = ray.get_actor(entry.primary.actor, namespace=NAMESPACE)
    pid = int(str(ray.get(old.pid.remote(), timeout=30)))
    before = [handle.submit(_tx("pre", i), client_id=f"pre-{i}") for i in range(10)]
    writer = Writer(handle, "w")
    writer.stop = stop
    threads.append(writer)
    writer.start()
    _until("the writer's progress", lambda: len(writer.acked) >= 10)

    def zombie_write(i: int) -> Any:
        _, payload = ContextHandle.prepare(_tx("z", i), f"z-{i}")
        return old.submit.remote(payload)

    # Busy, not hung: its store thread held by a slow write and its event loop blocked for
    # BUSY_FOR seconds (longer than the hang threshold), the writer's commits waiting behind
    # them. Its pings are answered by their own thread: no promotion.
    acked_before_busy = len(writer.acked)
    busy_at = time.monotonic()
    ray.get(old.__ray_call__.remote(_busy, BUSY_FOR), timeout=WAIT)
    busy_s = time.monotonic() - busy_at
    _until("an acknowledgement after the busy step", lambda: _acked_after(writer, busy_at + busy_s))
    time.sleep(1.0)  # past the threshold, counted from the end of the busy step
    assert directory(NAMESPACE).get(name).epoch == 0, (
        "a busy primary was declared hung",
        directory(NAMESPACE).failovers(),
    )
    assert len(writer.acked) > acked_before_busy
    busy_gap = writer.longest_gap(busy_at, time.monotonic())

    # The supervisor keeps an idle spare process on every node: the follower slot the
    # promotion frees is taken by one already running (no Ray worker to start). That spare
    # is starved (stopped) until past the promotion's start by more than the 3 s it was once
    # given: a slow spare still answers before a new process would, so it is waited for.
    _until("a ready spare on each node", lambda: len(_ready_spares()) >= len(multi.node_ids))
    (free,) = set(multi.node_ids) - {node, *(m.node_id for m in entry.followers)}
    starved = [_pid_of(a) for a in _ready_spares() if a.startswith(f"spare:{free}:")]
    follower = ray.get_actor(entry.followers[0].actor, namespace=NAMESPACE)
    for spare_pid in starved:
        os.kill(spare_pid, signal.SIGSTOP)
    os.kill(pid, signal.SIGSTOP)
    paused_at = time.monotonic()
    resumer = threading.Thread(
        target=_resume_when_fenced, args=(follower, starved, stop), daemon=True
    )
    threads.append(resumer)
    resumer.start()
    during = [zombie_write(i) for i in range(5)]  # queued in the paused process
    stale_reads = [old.version.remote() for _ in range(3)]  # served first thing on resume
    promoted = _until("a promotion", lambda: (e := directory(NAMESPACE).get(name)).epoch >= 1 and e)
    promoted_after = time.monotonic() - paused_at
    assert [is_spare(m.actor) for m in promoted.followers] == [True], promoted.followers
    resumer.join(timeout=WAIT)
    _until("an acknowledgement after the promotion", lambda: _acked_after(writer, paused_at))
    newer = lookup(name, NAMESPACE).version()  # acknowledged by the new primary
    os.kill(pid, signal.SIGCONT)
    resumed_at = time.monotonic()
    stale_reads.append(old.version.remote())
    after = [zombie_write(i) for i in range(5, 10)]
    reads: list[str] = []
    for ref in stale_reads:  # no read of the old primary misses what the new one acknowledged
        try:
            served = int(open_reply(ray.get(ref, timeout=WAIT)))
        except MorphzError as e:
            reads.append(e.code)
        except RayActorError:
            reads.append("stopped")
        else:
            assert served >= newer, f"a stale read: version {served} after {newer} was acknowledged"
            reads.append("current")
    assert set(reads) <= {"fenced", "stale_epoch", "stopped"}, reads
    zombie: dict[str, str] = {}
    for i, ref in enumerate(during + after):
        try:
            receipt = decode_receipt(ray.get(ref, timeout=WAIT))
        except MorphzError as e:
            zombie[f"z-{i}"] = e.code
        except RayActorError:  # stopped by the supervisor once it knew it was replaced
            zombie[f"z-{i}"] = "stopped"
        else:
            raise AssertionError(f"the old primary acknowledged z-{i} after epoch 1: {receipt}")
    assert set(zombie.values()) <= {"fenced", "stale_epoch", "stopped"}, zombie
    # Refused by the fence, or never answered because the supervisor stopped the replaced
    # primary first (it tells it on resume, and may win the race): never acknowledged.
    _until("more acknowledgements after the resume", lambda: _acked_after(writer, resumed_at + 1))
    writer.stop.set()
    writer.join(timeout=WAIT)
    logged = _log_of(handle)  # the new primary's log: no gap, no client id twice
    assert not [cid for cid in zombie if cid in logged], "a zombie write reached the log"
    for r in before:
        assert logged[str(r.client_id)] == r.version, r
    for cid, (version, _) in writer.acked.items():
        assert logged[cid] == version, (cid, version, logged.get(cid))
    failovers = _failovers_timed()
    assert [(f["context"], f["epoch"], f["cause"]) for f in failovers] == [(name, 1, "hung")]
    assert failovers[0]["spares"] == 1 and failovers[0]["replacements"] == 1
    # The promoted follower went on with the old primary's chain (nothing was written to
    # its store outside a batch); its spare follower, holding nothing, got a snapshot.
    progress = open_reply(ray.get(lookup(name, NAMESPACE).actor.replicate.remote(), timeout=WAIT))
    assert progress["continued"] and progress["caught_up"]["snapshot"] >= 1, progress
    return {
        "spare_starved_s": STARVED_FOR,
        "busy_s": round(busy_s, 2),
        "busy_longest_gap_s": round(busy_gap, 2),
        "promoted_epoch": promoted.epoch,
        "promoted_after_s": round(promoted_after, 2),
        "failover": failovers[0],
        "unavailable_s": round(writer.longest_gap(paused_at, resumed_at), 2),
        "zombie_replies": zombie,
        "stale_read_replies": reads,
        "acknowledged": len(writer.acked) + len(before),
        "writer_errors": sorted(set(writer.errors)),
    }


STARVED_FOR = 4.5
"""Seconds the claimed spare stays stopped after the promotion started (the spare's old
bound was 3 s)."""


def _resume_when_fenced(follower: Any, pids: list[int], stop: threading.Event) -> None:
    """Resume the stopped spares *pids* :data:`STARVED_FOR` seconds after the supervisor
    fenced *follower* (its first step of a promotion; the spare is claimed after it), or
    at once when *stop* is set."""
    import ray

    from actors.client.replies import open_reply
    from protocol.errors import MorphzError

    def fenced() -> bool:
        try:
            return int(open_reply(ray.get(follower.status.remote(), timeout=5))["epoch"]) >= 1
        except MorphzError:  # sealed, or promoted already: fenced before
            return True

    try:
        _until("the promotion's fence", lambda: stop.is_set() or fenced())
        stop.wait(STARVED_FOR)
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:  # stopped for good by the supervisor meanwhile
                pass


def _pid_of(spare: str) -> int:
    import ray

    return int(ray.get(ray.get_actor(spare, namespace=NAMESPACE).pid.remote(), timeout=30))


def _ready_spares() -> list[str]:
    """The spares of the scenario's namespace that answer (their process runs)."""
    import ray

    from actors.cluster.spares import is_spare

    ready = []
    for a in ray.util.list_named_actors(all_namespaces=True):
        if a["namespace"] == NAMESPACE and is_spare(a["name"]):
            try:
                ray.get(ray.get_actor(a["name"], namespace=NAMESPACE).pid.remote(), timeout=1)
            except Exception:
                continue
            ready.append(a["name"])
    return ready


BUSY_FOR = 3.0
"""Seconds the primary is held busy (past the hang threshold)."""


def _busy(actor: Any, seconds: float) -> bool:
    """Run inside the primary (``__ray_call__``, on its event loop): a slow write holds its
    store thread (commits queue behind it, as behind a slow fsync) and its event loop is
    blocked (as by a slow call made on it), both for *seconds*."""
    actor._executor.submit(time.sleep, seconds)
    time.sleep(seconds)
    return True


def _acked_after(writer: Writer, t: float) -> bool:
    return any(at > t for _, at in list(writer.acked.values()))


def directory_node_lost(multi: MultiNode) -> dict[str, Any]:
    """The directory's node is removed, with Ray's default health checks (the GCS declares
    it dead only 15 to 18 s later): its standby on another node finds the node's raylet
    down and takes over under a newer term; a new context is placed and the follower of a
    context whose primary was on that node is promoted, through handles that follow the
    signed lead record. With ``MORPHZ_DIRECTORY_STANDBY=0`` (the benchmark's baseline) no
    standby runs and both wait for Ray to restart the directory elsewhere."""
    from actors.client.leader import read_leader
    from actors.client.lookup import lookup
    from actors.client.names import DIRECTORY_NAME
    from actors.cluster.directory_handle import directory
    from actors.cluster.leadership import newer_term, standby_wanted
    from actors.cluster.placing import place
    from protocol.errors import MorphzError, TransportError

    lost = multi.node_ids[1]
    pinned_call(lost, _create_directory, NAMESPACE)  # the directory starts on node 1
    d = directory(NAMESPACE)
    assert _directory_node(d) == lost
    handle = place("dir-rep", followers=1, placement=f"node:{lost}", namespace=NAMESPACE)
    acked = [handle.submit(_tx("a", i), client_id=f"a-{i}") for i in range(10)]
    old = read_leader(NAMESPACE)
    assert old is not None and old.actor == DIRECTORY_NAME and old.node_id == lost
    if standby_wanted():
        standby = _until("a standby directory on another node", lambda: d.ping()["standby"])
    _until("a ready spare on each node", lambda: len(_ready_spares()) >= len(multi.node_ids))
    multi.remove_node(1)
    removed_at, removed_wall = time.monotonic(), time.time()
    done: dict[str, float] = {}

    def placing() -> None:  # placement and promotion are timed apart, each as it happens
        while "placed" not in done and time.monotonic() - removed_at < WAIT:
            try:
                if "recorded" not in done:  # the directory's part: the entry recorded
                    directory(NAMESPACE).place("dir-new")
                    done["recorded"] = time.monotonic() - removed_at
                outcome["new"] = place("dir-new", namespace=NAMESPACE)  # its actor serving
                done["placed"] = time.monotonic() - removed_at
            except MorphzError:
                time.sleep(0.2)

    outcome: dict[str, Any] = {}
    placer = threading.Thread(target=placing, daemon=True)
    placer.start()
    while "promoted" not in done:
        assert time.monotonic() - removed_at < WAIT, "the directory did not come back"
        try:
            if directory(NAMESPACE).get("dir-rep").epoch >= 1:
                done["promoted"] = time.monotonic() - removed_at
        except MorphzError:
            time.sleep(0.2)
    placer.join(timeout=WAIT)
    assert "placed" in done, "no placement after the directory's node was lost"
    new = outcome["new"]
    assert new is not None and new.submit(_tx("n", 0), client_id="n-0").committed
    leader = read_leader(NAMESPACE)
    assert leader is not None and leader.term > old.term
    if standby_wanted():
        # the standby leads under a newer term: the lost directory's term writes nothing
        assert leader.actor == standby and leader.node_id != lost, (leader, standby)
        assert newer_term(NAMESPACE, old.term) == leader
        assert directory(NAMESPACE).ping()["term"] == leader.term
    where = _directory_node(directory(NAMESPACE))
    assert where != lost, where
    promoted = lookup("dir-rep", NAMESPACE)
    unacknowledged, writing = 0, time.monotonic()
    while True:  # its new follower may still be on its way: the documented retry, same id
        try:
            assert promoted.submit(_tx("b", 0), client_id="b-0").committed
            break
        except TransportError as e:
            if e.code != "replicas_unavailable" or unacknowledged >= 2:
                raise
            unacknowledged += 1  # durable on the new primary, not yet on a follower
    first_write = (time.monotonic() - writing, time.monotonic() - removed_at)
    logged = _log_of(promoted)
    for r in acked:
        assert logged[str(r.client_id)] == r.version, r
    led_at = directory(NAMESPACE).ping()["led_at"]
    failovers = _failovers_timed()
    if failovers:  # promoted by the directory that took over: one replacement follower
        assert [(f["context"], f["replacements"]) for f in failovers] == [("dir-rep", 1)], failovers
    # Whether that replacement was a running spare is reported, not asserted: a directory
    # that just took over does not always find the free node's spare in time (seen once in
    # CI-like runs); the paused-primary scenario asserts the spare's use where it is certain.
    return {
        "placement_recorded_after_s": round(done["recorded"], 2),
        "placed_after_s": round(done["placed"], 2),
        "promoted_after_s": round(done["promoted"], 2),
        "first_write_unacknowledged": unacknowledged,
        "replacement_spares": [f["spares"] for f in failovers],
        "first_write_s": round(first_write[0], 2),
        "first_write_acknowledged_after_s": round(first_write[1], 2),
        "taken_over_after_s": round(led_at - removed_wall, 2),
        # (none when the lost directory recorded the promotion itself before it went)
        "promotion_decided_after_s": (
            round(failovers[0]["at"] - removed_wall, 2) if failovers else None
        ),
        "leader_after": leader.actor,
        "terms": [old.term, leader.term],
        "directory_node_after": where[:12],
        "failover": failovers[0] if failovers else None,
    }


def _failovers_timed() -> list[dict[str, Any]]:
    """The directory's recorded promotions, once the first one's ``replacement_serving_s``
    (recorded in the background, when its replacement followers hold the snapshot) is in."""
    from actors.cluster.directory_handle import directory

    def timed() -> tuple[list[dict[str, Any]]] | None:
        failovers = directory(NAMESPACE).failovers()
        done = not failovers or failovers[0]["replacement_serving_s"] is not None
        return (failovers,) if done else None

    found: tuple[list[dict[str, Any]]] = _until("the replacement followers' time", timed)
    return found[0]


def _create_directory(namespace: str) -> int:
    from actors.cluster.directory_handle import directory

    return len(directory(namespace).list())


def _directory_node(d: Any) -> str:
    import ray

    return str(
        ray.get(
            d.actor.__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id()),
            timeout=30,
        )
    )


def test_a_paused_primary_never_acknowledges_after_the_promotion() -> None:
    verdict = run_scenario("tests.actors.test_faults:paused_primary_never_acknowledges")
    assert verdict["ok"], verdict.get("traceback", verdict)


def test_the_directory_survives_its_node() -> None:
    """Ray's default health checks: the standby takes over long before Ray would restart
    the directory (its times are in the verdict; benchmarks/bench_directory_failover.py
    measures them against the same run without a standby)."""
    verdict = run_scenario("tests.actors.test_faults:directory_node_lost")
    assert verdict["ok"], verdict.get("traceback", verdict)
    print(json.dumps(verdict))


@pytest.mark.parametrize("nemesis", ["pause-primary"])
def test_loadtest_nemesis_checks_every_history(tmp_path: Path, nemesis: str) -> None:
    """``morphz loadtest --followers 1 --pause-primary-every N`` (or ``--partition-every``):
    each fault is logged with its window and every history checks on the current primaries."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("RAY_ADDRESS", None)
    env.pop("MORPHZ_STORE", None)
    args = ["--threads", "4", "--contexts", "1", "--duration", "9", "--conflict-rate", "0.2"]
    done = subprocess.run(
        [sys.executable, "-m", "morphz.cli", "--store", str(tmp_path), "--json", "loadtest", *args]
        + ["--followers", "1", f"--{nemesis}-every", "8", f"--{nemesis.split('-')[0]}-for", "3"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT,
    )
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    assert done.returncode == 0 and doc["history_ok"], (doc, done.stderr[-3000:])
    assert doc["violation_count"] == 0 and doc["committed"] > 0
    faults = doc["kill_log"]
    assert len(faults) == 1 and "error" not in faults[0], faults
    fault = faults[0]
    assert fault["fault"] == nemesis.split("-")[0] and fault["unavailable_s"] is not None
    assert fault["epoch_after"] == fault["epoch_before"] + 1, fault  # promoted once
