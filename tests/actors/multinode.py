"""Three-node scenarios, each run in a child process on its own ``ray.cluster_utils.Cluster``.

A process can be connected to one Ray cluster only, and the test session is
connected to the session's two-node cluster (``tests/conftest.py``). So a
multi-node scenario runs in a child: ``python -m tests.actors.multinode SPEC
[ROOT]`` brings up :data:`NODES` nodes on this machine, each with its own store
root (``ROOT/node-<i>``, given to that node's raylet — and so to its workers —
as ``MORPHZ_STORE``: separate directories stand in for separate disks) and the
custom resource ``mz-node-<i>``; it runs the scenario and prints one JSON line,
the verdict: ``{"ok": true, ...}`` with what the scenario returned, or
``{"ok": false, "error": ...}``. The scenario asserts inside the child.

SPEC is a name of :data:`SCENARIOS` or ``module:function`` (a function taking a
:class:`MultiNode` and returning a JSON-able dict), so other test modules add
scenarios without editing this one. :func:`run_scenario` is the parent's side.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NODES = 3
"""Nodes a scenario's cluster starts with (the head node first)."""
NAMESPACE = "morphz-multinode"
"""The Ray namespace the scenarios' contexts and directory live in."""
CHILD_TIMEOUT = 420.0
"""Seconds the parent waits for a scenario."""
ROOT = Path(__file__).resolve().parents[2]


def resource(i: int) -> str:
    """The custom resource only node number *i* offers."""
    return f"mz-node-{i}"


@dataclass
class MultiNode:
    """A running cluster of this machine: its nodes by number, their store roots."""

    cluster: Any
    root: Path
    node_ids: list[str] = field(default_factory=list)
    nodes: list[Any] = field(default_factory=list)  # ray._private.node.Node, by number
    roots: dict[str, str] = field(default_factory=dict)  # node id -> store root

    def store_root(self, i: int) -> str:
        """The store root of node number *i* (``ROOT/node-<i>``)."""
        return str(self.root / f"node-{i}")

    def node_args(self, i: int) -> dict[str, Any]:
        """The ``Cluster.add_node`` arguments of node number *i*."""
        os.makedirs(self.store_root(i), exist_ok=True)
        return {
            "num_cpus": 1,
            "resources": {resource(i): 1},
            "env_vars": {"MORPHZ_STORE": self.store_root(i)},
        }

    def add_node(self, i: int) -> str:
        """Start node number *i* (again) and answer its (new) node id."""
        node = self.cluster.add_node(**self.node_args(i))
        self.cluster.wait_for_nodes()
        node_id = str(node.node_id)
        while len(self.nodes) <= i:
            self.nodes.append(None)
            self.node_ids.append("")
        self.nodes[i] = node
        self.node_ids[i] = node_id
        self.roots[node_id] = self.store_root(i)
        return node_id

    def remove_node(self, i: int) -> None:
        """Stop node number *i* as a lost machine would go (its processes killed)."""
        self.cluster.remove_node(self.nodes[i], allow_graceful=False)


def bring_up(root: Path, nodes: int = NODES) -> MultiNode:
    """Start a cluster of *nodes* nodes under *root* and connect this process to it."""
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray
    from ray.cluster_utils import Cluster

    multi = MultiNode(cluster=None, root=root)
    multi.cluster = Cluster(
        initialize_head=True, head_node_args={"include_dashboard": False, **multi.node_args(0)}
    )
    multi.nodes.append(multi.cluster.head_node)
    multi.node_ids.append(str(multi.cluster.head_node.node_id))
    multi.roots[multi.node_ids[0]] = multi.store_root(0)
    for i in range(1, nodes):
        multi.add_node(i)
    ray.init(address=multi.cluster.address, log_to_driver=False, namespace=NAMESPACE)
    return multi


def pinned_call(node_id: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Run ``fn(*args)`` as a Ray task pinned to *node_id* and answer its result."""
    import ray

    from actors.client.nodes import pinned

    task = ray.remote(num_cpus=0, scheduling_strategy=pinned(node_id))(fn)
    return ray.get(task.remote(*args), timeout=120)


# -- scenarios ---------------------------------------------------------------------


def _find_everywhere(names: list[str]) -> dict[str, Any]:
    """Run on a node: look each context up by name and read its version and node."""
    from actors.client.lookup import lookup
    from actors.client.nodes import current_node_id

    out: dict[str, Any] = {"from": current_node_id(), "found": {}}
    for name in names:
        handle = lookup(name, NAMESPACE)
        info = handle.describe()
        out["found"][name] = {"version": handle.version(), "node_id": info["node_id"]}
    return out


def placed_everywhere(multi: MultiNode) -> dict[str, Any]:
    """Contexts spread over every node, under each node's own root, found from every node."""
    from actors.cluster.directory_handle import directory
    from actors.cluster.placing import place

    names = [f"spread-{i}" for i in range(2 * NODES)]
    handles = {n: place(n, namespace=NAMESPACE) for n in names}
    for n, h in handles.items():
        report = h.observe("tool_result", f"placed {n}")
        h.claim()
        receipt = h.submit(
            f"(context-tx (base-version {h.version()})"
            f" (derive note (from {report.ref}) (tests passed)))"
        )
        assert receipt.committed, receipt
    entries = {e.name: e for e in directory(NAMESPACE).list()}
    by_node: dict[str, int] = {}
    for n in names:
        primary = entries[n].primary
        by_node[primary.node_id] = by_node.get(primary.node_id, 0) + 1
        assert primary.store_dir == multi.roots[primary.node_id], (primary, multi.roots)
        assert os.path.isdir(os.path.join(primary.store_dir, n)), primary
    assert sorted(by_node) == sorted(multi.node_ids), by_node
    assert set(by_node.values()) == {2}, by_node  # spread: two per node
    seen = [pinned_call(node, _find_everywhere, names) for node in multi.node_ids]
    for s in seen:
        for n in names:
            assert s["found"][n]["node_id"] == entries[n].primary.node_id, s
            assert s["found"][n]["version"] == handles[n].version(), s
    return {"by_node": by_node, "looked_up_from": [s["from"] for s in seen]}


def directory_restart(multi: MultiNode) -> dict[str, Any]:
    """A killed directory is restarted by Ray and reloads every entry and node root."""
    import ray

    from actors.cluster.directory_handle import directory
    from actors.cluster.placing import place

    d = directory(NAMESPACE)
    d.register_node(multi.node_ids[1], multi.store_root(1) + "-registered")
    place("kept-a", namespace=NAMESPACE, placement=f"node:{multi.node_ids[1]}")
    place("kept-b", namespace=NAMESPACE, placement=f"resource:{resource(2)}")
    before = [e.model_dump() for e in d.list()]
    roots_before = d.node_roots()
    pid = ray.get(d.actor.__ray_call__.remote(lambda self: os.getpid()))
    os.kill(pid, signal.SIGKILL)  # its process dies as in a crash; Ray restarts it
    deadline = time.monotonic() + 60
    while True:  # wait for the restarted process
        try:
            pid_after = ray.get(d.actor.__ray_call__.remote(lambda self: os.getpid()), timeout=10)
            if pid_after != pid:
                break
        except Exception:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.2)
    after = [e.model_dump() for e in directory(NAMESPACE).list()]
    assert after == before, (before, after)
    assert d.node_roots() == roots_before
    assert roots_before[multi.node_ids[1]].endswith("-registered")
    return {"entries": len(after), "pid_before": pid, "pid_after": pid_after}


def placement_errors(multi: MultiNode) -> dict[str, Any]:
    """Unknown node, not enough nodes, bad names and policies: typed errors, nothing changes."""
    from actors.cluster.directory_handle import directory
    from actors.cluster.placing import place
    from protocol.errors import MorphzError, NotFound

    d = directory(NAMESPACE)
    place("already", namespace=NAMESPACE)
    before = [e.model_dump() for e in d.list()]
    roots = d.node_roots()
    codes: dict[str, str] = {}
    attempts: list[tuple[str, Callable[[], Any]]] = [
        ("unknown_node", lambda: place("x1", namespace=NAMESPACE, placement="node:" + "ab" * 28)),
        ("unknown_resource", lambda: place("x2", namespace=NAMESPACE, placement="resource:gpu9")),
        ("too_many_replicas", lambda: d.place("x3", followers=NODES)),
        ("bad_name", lambda: place("no/slash", namespace=NAMESPACE)),
        ("bad_policy", lambda: place("x4", namespace=NAMESPACE, placement="nearest")),
        ("empty_node", lambda: d.place("x5", policy="node:")),
        ("negative_replicas", lambda: d.place("x6", followers=-1)),
        ("acks_over_replicas", lambda: d.place("x7", followers=0, acks=1)),
        ("relative_root", lambda: d.register_node(multi.node_ids[0], "rel/dir")),
        ("register_unknown", lambda: d.register_node("ab" * 28, "/abs")),
        ("get_unknown", lambda: d.get("never-placed")),
        ("remove_unknown", lambda: d.remove("never-placed")),
        (
            "stale_epoch",
            lambda: d.promote(
                "already",
                expected_epoch=5,
                primary=d.get("already").primary,
                followers=[],
            ),
        ),
        ("bad_member", lambda: d.set_followers("already", epoch=0, followers=[{"node": 1}])),  # type: ignore[list-item]
    ]
    for label, attempt in attempts:
        try:
            attempt()
        except MorphzError as e:
            codes[label] = e.code
        else:
            raise AssertionError(f"{label}: no error")
    assert codes["unknown_node"] == "not_found" and codes["get_unknown"] == "not_found"
    assert codes["too_many_replicas"] == "not_enough_nodes"
    assert codes["bad_name"] == "bad_context_name"
    assert codes["bad_policy"] == codes["empty_node"] == "bad_placement"
    assert codes["stale_epoch"] == "stale_epoch"
    assert [e.model_dump() for e in d.list()] == before
    assert d.node_roots() == roots
    for n in ("x1", "x2", "x3", "x4", "x5"):
        assert not any(os.path.isdir(os.path.join(r, n)) for r in roots.values()), n
        try:
            d.get(n)
        except NotFound:
            continue
        raise AssertionError(f"{n} was placed")
    return {"codes": codes}


def loadtest_everywhere(multi: MultiNode) -> dict[str, Any]:
    """``morphz loadtest``'s contexts go over every node (not only the driver's), and check out."""
    from actors.cluster.directory_handle import existing_directory
    from harness.loadtest import run_loadtest

    doc = run_loadtest(
        {
            "threads": 6,
            "contexts": NODES,
            "transactions": 90,
            "namespace": NAMESPACE + "-lt",
            "store_dir": str(multi.root / "loadtest"),
        }
    )
    nodes = sorted(c["node_id"] for c in doc["per_context"])
    assert nodes == sorted(multi.node_ids), nodes
    assert doc["history_ok"], doc["violations"]
    assert doc["checked"]["acknowledged_on_disk"] == doc["committed"] > 0
    assert existing_directory(NAMESPACE + "-lt") is None  # emptied and stopped after the run
    return {"nodes": nodes, "committed": doc["committed"]}


def cluster_table(multi: MultiNode) -> dict[str, Any]:
    """``morphz contexts --cluster --json`` shows each member's version and each follower's lag,
    and ``?`` (null) for a member whose node is gone."""
    from click.testing import CliRunner

    from actors.cluster.placing import place
    from morphz.cli.main import cli

    # the primary on the driver's node (never removed), the follower on another
    h = place("tabled", followers=1, namespace=NAMESPACE, placement=f"node:{multi.node_ids[0]}")
    for i in range(3):
        report = h.observe("tool_result", f"result {i}")
        h.claim()
        tx = f"(context-tx (base-version {h.version()}) (derive n{i} (from {report.ref}) (ok)))"
        assert h.submit(tx).committed
    run = CliRunner().invoke(cli, ["contexts", "--cluster", "--namespace", NAMESPACE, "--json"])
    assert run.exit_code == 0, run.output
    row = {c["name"]: c for c in json.loads(run.output)["contexts"]}["tabled"]
    primary, (follower,) = row["primary"], row["followers"]
    assert primary["node_id"] == multi.node_ids[0] and primary["version"] == h.version()
    assert follower["node_id"] != primary["node_id"] and follower["node_alive"]
    assert (
        follower["version"] is not None
        and follower["lag"] == primary["version"] - follower["version"]
    )
    human = CliRunner().invoke(cli, ["contexts", "--cluster", "--namespace", NAMESPACE])
    assert human.exit_code == 0 and "tabled" in human.output, human.output
    gone = multi.node_ids.index(follower["node_id"])
    multi.remove_node(gone)
    deadline = time.monotonic() + 60  # until Ray has noticed the node is gone
    while True:
        after = CliRunner().invoke(
            cli, ["contexts", "--cluster", "--namespace", NAMESPACE, "--json"]
        )
        assert after.exit_code == 0, after.output
        # Ray writes the lost node's raylet log to this process's stdout: the document is last
        doc = json.loads([line for line in after.output.splitlines() if line.startswith("{")][-1])
        row = {c["name"]: c for c in doc["contexts"]}["tabled"]
        lost = [f for f in row["followers"] if f["node_id"] == follower["node_id"]]
        settled = not lost or (lost[0]["node_alive"] is False and lost[0]["version"] is None)
        if settled or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert settled, lost  # a dead member shows an unknown version ("?"), or was replaced
    # The primary's reads hold a read lease its follower renews: they are served again once
    # the lost follower is replaced (shown "?" meanwhile if that takes longer than a look).
    version, deadline = h.version(), time.monotonic() + 60
    while row["primary"]["version"] != version and time.monotonic() < deadline:
        time.sleep(1)
        after = CliRunner().invoke(
            cli, ["contexts", "--cluster", "--namespace", NAMESPACE, "--json"]
        )
        doc = json.loads([line for line in after.output.splitlines() if line.startswith("{")][-1])
        row = {c["name"]: c for c in doc["contexts"]}["tabled"]
    assert row["primary"]["version"] == version
    return {"before": {"primary": primary["version"], "follower": follower["version"]}}


SCENARIOS: dict[str, Callable[[MultiNode], dict[str, Any]]] = {
    "cluster_table": cluster_table,
    "directory_restart": directory_restart,
    "loadtest_everywhere": loadtest_everywhere,
    "placed_everywhere": placed_everywhere,
    "placement_errors": placement_errors,
}


def scenario(spec: str) -> Callable[[MultiNode], dict[str, Any]]:
    """The scenario *spec* names: a key of :data:`SCENARIOS` or ``module:function``."""
    if spec in SCENARIOS:
        return SCENARIOS[spec]
    module, _, name = spec.partition(":")
    fn: Callable[[MultiNode], dict[str, Any]] = getattr(importlib.import_module(module), name)
    return fn


def _run(fn: Callable[[MultiNode], dict[str, Any]], multi: MultiNode) -> dict[str, Any]:
    try:
        return {"ok": True, **fn(multi)}
    except BaseException as e:  # the verdict carries every failure, asserts included
        return {
            "ok": False,
            "error": f"{type(e).__name__}: {e}",
            "traceback": traceback.format_exc(),
        }


def main(argv: list[str]) -> int:
    """Run the scenario ``argv[0]`` on a fresh cluster; print the verdict as one JSON line.

    ``argv[0]`` may name several scenarios, comma-separated: they run one after
    the other on the same cluster (one bring-up), each with its own verdict
    under its name; the run stops at the first failure (``"not run"`` after it).
    """
    import ray

    specs = argv[0].split(",")
    fns = [scenario(spec) for spec in specs]
    with tempfile.TemporaryDirectory(prefix="morphz-multinode-") as tmp:
        root = Path(argv[1]) if len(argv) > 1 else Path(tmp)
        multi = None
        try:
            multi = bring_up(root)
            if len(fns) == 1:
                verdict = _run(fns[0], multi)
            else:
                verdict = {"ok": True}
                for spec, fn in zip(specs, fns, strict=True):
                    part = _run(fn, multi) if verdict["ok"] else {"ok": False, "error": "not run"}
                    verdict[spec] = part
                    verdict["ok"] = verdict["ok"] and part["ok"]
        except BaseException as e:  # the bring-up failed
            verdict = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            verdict["traceback"] = traceback.format_exc()
        finally:
            try:
                ray.shutdown()
                if multi is not None:
                    multi.cluster.shutdown()
            except Exception as e:  # the verdict says what the scenario found, whatever this
                print(f"cluster shutdown failed: {type(e).__name__}: {e}", file=sys.stderr)
    print(json.dumps(verdict, default=str), flush=True)
    return 0 if verdict["ok"] else 1


def run_scenario(
    spec: str, timeout: float = CHILD_TIMEOUT, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run scenario *spec* in a child process and answer its verdict (the last JSON line);
    *env* adds to the child's environment (and so its cluster's: ``RAY_<setting>``)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    env.pop("RAY_ADDRESS", None)
    env.pop("MORPHZ_STORE", None)
    # a scenario's thread still calling Ray at shutdown must not start a new session
    env.setdefault("RAY_ENABLE_AUTO_CONNECT", "0")
    done = subprocess.run(
        [sys.executable, "-m", "tests.actors.multinode", spec],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise AssertionError(f"no verdict (exit {done.returncode}):\n{done.stderr[-4000:]}")
    verdict: dict[str, Any] = json.loads(lines[-1])
    return verdict


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
