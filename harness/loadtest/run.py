"""One load test run: the actors it creates, the load, the checks and the report.

:func:`run_loadtest` is what ``morphz loadtest`` runs (see the package's
docstring and docs/loadtest.md). Ray is imported inside the functions that
use it, never at module import. Every phase of a run (placing, spreading the
threads, the load) works on the one :class:`_Run`'s actors and options; the
report of a finished run (its checks and document) is :mod:`harness.loadtest.outcome`'s.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from actors.client.handle import ContextHandle
from actors.client.nodes import alive_nodes, pinned
from actors.client.replies import open_reply
from harness.loadtest.agent import ROUND_STEPS, LoadAgent, TrajectorySpec, TrajectoryThread
from harness.loadtest.baseline import WARM_CALLS, load_costs, measure_baseline, spent
from harness.loadtest.cluster import (
    Killer,
    connect_ray,
    forget_contexts,
    local_nodes,
    place_contexts,
)
from harness.loadtest.nemeses import Nemesis
from harness.loadtest.nodes import NodeKiller, TestCluster
from harness.loadtest.options import LoadtestOptions, Progress, Tamper, check_options
from harness.loadtest.outcome import run_report
from harness.loadtest.trajectories import Conversation, load_conversations, trajectories_dir
from harness.workload import WorkloadSpec
from protocol.errors import MorphzError, StoreError
from protocol.forms import Symbol
from protocol.tx import ContextTx, Derive
from protocol.wire import unpack

MAX_AGENTS = 32
"""Most agent actors the default starts: up to this many threads, each thread is its own
actor (process); past it, threads share the actors as asyncio tasks."""
STOP_WAIT = 60.0
"""Seconds an interrupted run waits for its agents to finish their current steps."""
TEMP_PREFIX = "morphz-loadtest-"
"""Prefix of the temporary store a run makes when it is given none."""


@dataclass
class _Work:
    """One call of one agent: ``method(*args)`` against context number *context*."""

    agent: int
    context: int
    method: str
    args: tuple[Any, ...]


def default_agents(threads: int) -> int:
    """Agent actors for *threads* logical threads: one each, at most :data:`MAX_AGENTS`."""
    return max(1, min(threads, MAX_AGENTS))


def spread(threads: int, contexts: int, agents: int) -> list[list[tuple[int, list[int]]]]:
    """For each context, ``(agent, thread numbers)``: contiguous ranges, balanced.

    Context *c* gets threads ``t<start_c> …`` (``threads // contexts``, the
    first ``threads % contexts`` one more). Thread *k* runs on agent
    ``k * agents // threads``: each agent gets a contiguous block of threads
    (one thread each when there are as many agents as threads), and a block
    that spans two contexts is split between them.
    """
    out: list[list[tuple[int, list[int]]]] = []
    agents = max(1, min(agents, threads))
    start = 0
    for c in range(contexts):
        n = threads // contexts + (1 if c < threads % contexts else 0)
        groups: list[tuple[int, list[int]]] = []
        for k in range(start, start + n):
            agent = k * agents // threads
            if groups and groups[-1][0] == agent:
                groups[-1][1].append(k)
            else:
                groups.append((agent, [k]))
        start += n
        out.append(groups)
    return out


def _steps_of(number: int, threads: int, total: int | None) -> int | None:
    if total is None:
        return None
    return total // threads + (1 if number < total % threads else 0)


def _runs(values: list[int], key: Callable[[int], Any]) -> list[list[int]]:
    """Consecutive *values* with the same key, grouped."""
    out: list[list[int]] = []
    for v in values:
        if out and key(out[-1][-1]) == key(v) and out[-1][-1] + 1 == v:
            out[-1].append(v)
        else:
            out.append([v])
    return out


class _Run:
    """One load test: the actors it created, the load, the checks, the report."""

    def __init__(
        self,
        opts: LoadtestOptions,
        conversations: list[Conversation],
        progress: Progress | None,
        tamper: Tamper | None,
        store: str,
        cluster: TestCluster | None = None,
    ) -> None:
        self.opts = opts
        self.cluster = cluster  # the run's own cluster (kill_node_every_s, a nemesis)
        self.conversations = conversations
        self.progress = progress
        self.tamper = tamper
        self.run_id = opts.run_id or uuid.uuid4().hex[:8]
        self.store = os.path.abspath(store)
        self.interrupted = False
        self.handles: list[ContextHandle] = []
        self.nodes: list[str] = []
        self.agents: list[Any] = []

    def go(self) -> dict[str, Any]:
        import ray

        opts = self.opts
        conversations = self.conversations
        local = local_nodes()
        everywhere = [n["node_id"] for n in alive_nodes()] or local
        if self.cluster is not None:  # nodes come and go: the agents stay on the head node
            everywhere = [str(self.cluster.nodes[0].node_id)]
        names = [f"lt-{self.run_id}-{i}" for i in range(opts.contexts)]
        try:
            # Followers, or a cluster whose nodes stand for separate machines: each
            # node's stores go under its own root, not under one shared directory.
            per_node = self.cluster is not None or opts.followers > 0
            where = None if per_node else self.store
            self._phase(f"starting {opts.contexts} context actor(s)")
            for handle, node in place_contexts(names, where, opts.namespace, opts.followers):
                self.handles.append(handle)
                self.nodes.append(node)
            n_agents = min(opts.threads, opts.agents or default_agents(opts.threads))
            self._phase(f"starting {n_agents} agent actor(s) for {opts.threads} threads")
            agent_cls = ray.remote(LoadAgent)
            for j in range(n_agents):
                self.agents.append(
                    agent_cls.options(
                        num_cpus=0,
                        max_concurrency=1000,
                        namespace=opts.namespace,
                        scheduling_strategy=pinned(everywhere[j % len(everywhere)]),
                    ).remote()
                )
            ray.get([agent.pid.remote() for agent in self.agents])  # started before timing
            work = self._plan(conversations, n_agents)
            if opts.workload == "trajectories" and opts.shared_mode != "replace":
                self._shared_lists(conversations)
            baseline = None
            if opts.baseline:
                self._phase(f"measuring the bare Ray baseline with {n_agents} client(s)")
                baseline = measure_baseline(
                    self._layout(n_agents),
                    seconds=opts.duration_s,
                    server_node=self.nodes[0],
                    client_nodes=everywhere,
                    namespace=opts.namespace,
                )
            self._warm(work)
            before = self._costs()
            records, elapsed, killer = self._load(work)
            costs = spent(before, self._costs())
            return run_report(self, records, elapsed, killer, n_agents, costs, baseline)
        finally:
            for agent in self.agents:
                ray.kill(agent)
            if not opts.keep and opts.followers > 0:
                _stop_followers(names, opts.namespace)
            if not opts.keep:
                for h in self.handles:
                    try:
                        h.shutdown()
                    except Exception:  # already gone: nothing to stop
                        pass
                try:
                    forget_contexts(names, opts.namespace)
                except MorphzError:  # the directory is unreachable: entries stay behind
                    pass

    def _warm(self, work: list[_Work]) -> None:
        """Each agent reads each context it will load :data:`WARM_CALLS` times before the
        clock starts and the costs are sampled, as the baseline's clients warm up: the
        report's figures are the steady state's, not each process's first connection."""
        import ray

        pairs = sorted({(w.agent, w.context) for w in work})
        ray.get(
            [
                self.agents[a].warm.remote(self.handles[c].name, self.opts.namespace, WARM_CALLS)
                for a, c in pairs
            ]
        )

    def _layout(self, n_agents: int) -> list[list[int | None]]:
        """For each agent, its threads' steps (None: for the duration): the baseline's
        clients and lanes mirror the load's agents and threads."""
        opts = self.opts
        out: list[list[int | None]] = [[] for _ in range(n_agents)]
        for groups in spread(opts.threads, opts.contexts, n_agents):
            for agent, numbers in groups:
                out[agent].extend(_steps_of(k, opts.threads, opts.transactions) for k in numbers)
        return [lanes for lanes in out if lanes]

    def _costs(self) -> dict[str, float | None]:
        return load_costs(self.handles, self.nodes, set(local_nodes()), self.agents)

    def _shared_lists(self, conversations: list[Conversation]) -> None:
        """Create every domain's shared list ``(seen)`` before the load, so threads add to
        it rather than race to create it (a race of creates is a real conflict)."""
        domains = sorted({c.domain for c in conversations})
        ops = tuple(Derive(id=f"shared/{d}", body=((Symbol("seen"),),)) for d in domains)
        for handle in self.handles:
            if ops:
                tx = ContextTx(base_version=handle.version(), reason="shared lists", ops=ops)
                receipt = handle.submit(tx)
                if not receipt.committed:
                    raise StoreError(
                        f"could not create the shared lists: {receipt.errors}", code="agent_error"
                    )

    def _phase(self, what: str) -> None:
        """Tell the progress callback what is being started (``{"phase": what}``)."""
        if self.progress is not None:
            self.progress({"phase": what})

    def _plan(self, conversations: list[Conversation], n_agents: int) -> list[_Work]:
        opts = self.opts
        total = opts.transactions
        work: list[_Work] = []
        for c, groups in enumerate(spread(opts.threads, opts.contexts, n_agents)):
            name = self.handles[c].name
            for agent, numbers in groups:
                if opts.workload == "trajectories":
                    threads, used = self._trajectory_threads(numbers, len(conversations), total)
                    if not threads:
                        continue
                    spec = TrajectorySpec(
                        context=name,
                        namespace=opts.namespace,
                        conversations=tuple(conversations[i] for i in used),
                        threads=threads,
                        seconds=opts.duration_s,
                        conflict_rate=opts.conflict_rate,
                        shared_mode=opts.shared_mode,
                        seed=opts.seed,
                    )
                    work.append(_Work(agent, c, "replay", (spec.model_dump(),)))
                    continue
                for run in _runs(numbers, lambda k: _steps_of(k, opts.threads, total)):
                    steps = _steps_of(run[0], opts.threads, total)
                    if steps == 0:
                        continue
                    spec_doc = WorkloadSpec(
                        context=name,
                        namespace=opts.namespace,
                        threads=len(run),
                        first_thread=run[0],
                        transactions=steps if steps is not None else ROUND_STEPS,
                        conflict_rate=opts.conflict_rate,
                        shared_plans=opts.shared_frames - 1,
                        seed=opts.seed,
                        pipeline=opts.pipeline,
                        reread_own=opts.reread_own,
                    ).model_dump()
                    # run_for checks the agent's stop flag between steps (SIGINT)
                    work.append(
                        _Work(
                            agent,
                            c,
                            "run_for",
                            (spec_doc, opts.duration_s, None if opts.duration_s else steps),
                        )
                    )
        return work

    def _trajectory_threads(
        self, numbers: list[int], count: int, total: int | None
    ) -> tuple[tuple[TrajectoryThread, ...], list[int]]:
        """The replay plan of *numbers*, with conversation indexes local to the spec."""
        threads = self.opts.threads
        used: list[int] = []
        plans = []
        for k in numbers:
            mine = [j for j in range(count) if j % threads == k] or [k % count]
            steps = _steps_of(k, threads, total)
            if steps == 0:
                continue
            local = []
            for j in mine:
                if j not in used:
                    used.append(j)
                local.append(used.index(j))
            plans.append(TrajectoryThread(number=k, conversations=tuple(local), steps=steps))
        return tuple(plans), used

    def _load(
        self, work: list[_Work]
    ) -> tuple[dict[int, list[dict[str, Any]]], float, Killer | NodeKiller | Nemesis | None]:
        import ray
        from ray.exceptions import RayError, RayTaskError

        opts = self.opts
        killer: Killer | NodeKiller | Nemesis | None = None
        if opts.nemesis is not None:
            n = opts.nemesis
            names = [h.name for h in self.handles]
            killer = Nemesis(
                n.kind, names, opts.namespace, n.every_s, n.for_s, until=opts.duration_s
            )
        elif opts.kill_node_every_s is not None and self.cluster is not None:
            killer = NodeKiller(
                self.cluster,
                opts.kill_node_every_s,
                until=opts.duration_s,
                namespace=opts.namespace,
            )
        elif opts.kill_every_s is not None:
            killer = Killer(
                self.handles,
                opts.kill_every_s,
                set(local_nodes()),
                opts.seed,
                until=opts.duration_s,
            )
        started = time.monotonic()
        refs = [getattr(self.agents[w.agent], w.method).remote(*w.args) for w in work]
        if killer is not None:
            killer.start()
        versions = [0] * len(self.handles)
        polls: dict[int, Any] = {}
        try:
            try:
                waiting = list(refs)
                while waiting:
                    _, waiting = ray.wait(waiting, num_returns=len(waiting), timeout=0.5)
                    if isinstance(killer, NodeKiller):
                        killer.tick()  # Ray's test cluster starts nodes from this thread only
                    self._poll(polls, versions)
                    if self.progress is not None:
                        self.progress(
                            {
                                "elapsed_s": time.monotonic() - started,
                                "duration_s": opts.duration_s,
                                "transactions": opts.transactions,
                                "committed": sum(versions),
                                "kills": 0 if killer is None else len(killer.kills),
                                "done": False,
                            }
                        )
                elapsed = time.monotonic() - started
                raws: list[Any] = ray.get(refs)
            except KeyboardInterrupt:
                # SIGINT: stop the load and check what was submitted until now.
                self.interrupted = True
                elapsed = time.monotonic() - started
                if killer is not None:
                    killer.stop()
                raws = self._stop_agents(refs)
        except RayTaskError as e:
            cause = getattr(e, "cause", None)
            if isinstance(cause, MorphzError):
                raise cause from e
            raise StoreError(f"agent thread failed: {cause or e}", code="agent_error") from e
        except RayError as e:
            raise StoreError(f"agent thread failed: {e}", code="agent_error") from e
        finally:
            if killer is not None:
                killer.stop()
        by_context: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for w, raw in zip(work, raws, strict=True):
            if raw is None:  # an interrupted agent that did not answer
                continue
            records = unpack(raw)
            if not isinstance(records, list):
                raise StoreError("an agent answered no records", code="agent_error")
            by_context[w.context].extend(records)
        if self.progress is not None:
            self.progress(
                {
                    "elapsed_s": elapsed,
                    "duration_s": opts.duration_s,
                    "transactions": opts.transactions,
                    "committed": sum(
                        1 for rs in by_context.values() for r in rs if r["outcome"] == "committed"
                    ),
                    "kills": 0 if killer is None else len(killer.kills),
                    "done": True,
                }
            )
        return by_context, elapsed, killer

    def _stop_agents(self, refs: list[Any]) -> list[Any]:
        """Tell every agent to stop after its current steps; their answers (None: no answer).

        Waits up to :data:`STOP_WAIT` seconds in all; a second SIGINT aborts the wait.
        """
        import ray

        for agent in self.agents:
            agent.stop.remote()
        deadline = time.monotonic() + STOP_WAIT
        raws: list[Any] = []
        for ref in refs:
            try:
                raws.append(ray.get(ref, timeout=max(0.1, deadline - time.monotonic())))
            except Exception:  # a failed or late agent: its records are lost
                raws.append(None)
        return raws

    def _poll(self, polls: dict[int, Any], versions: list[int]) -> None:
        """Read the contexts' versions without blocking: collect answers, ask again."""
        import ray

        if polls:
            ready, _ = ray.wait(list(polls.values()), num_returns=len(polls), timeout=0)
            done = {i for i, ref in polls.items() if ref in ready}
            for i in done:
                try:
                    versions[i] = int(open_reply(ray.get(polls.pop(i))))
                except Exception:  # a killed actor: ask again next time
                    polls.pop(i, None)
        for i, h in enumerate(self.handles):
            if i not in polls:
                polls[i] = h.actor.version.remote()


def _stop_followers(names: list[str], namespace: str) -> None:
    """Stop the followers of the run's replicated contexts (they are detached actors)."""
    import ray

    from actors.cluster.directory_handle import directory

    for name in names:
        try:
            followers = directory(namespace).get(name).followers
        except MorphzError:
            continue
        for m in followers:
            try:
                ray.kill(ray.get_actor(m.actor, namespace=namespace), no_restart=True)
            except (ValueError, Exception):
                pass


def run_loadtest(
    options: LoadtestOptions | Mapping[str, Any],
    *,
    progress: Progress | None = None,
    tamper: Tamper | None = None,
) -> dict[str, Any]:
    """Run a load test (see the module docstring) and answer its figures and verdict.

    *progress*, if given, is called about twice a second with ``elapsed_s``,
    ``duration_s``, ``transactions``, ``committed`` (the contexts' versions,
    polled), ``kills`` and ``done``, and once more at the end (``done`` true); before
    the load, with ``{"phase": …}`` saying what is being started.
    *tamper* lets a test change a context's records before they are checked.
    The contexts are stopped at the end unless ``keep``. Their stores go under
    ``store_dir`` and stay there; without one they go into a temporary
    directory that is removed at the end (kept with ``keep``, whose actors
    still serve it), and the report says so (``store_kept``).
    A process not yet connected to Ray is connected, and disconnected at the end.

    SIGINT (``KeyboardInterrupt``) while the load runs stops the agents after
    their current steps and answers the report of what was submitted until
    then, checked like a full run, with ``interrupted`` true; the caller
    decides how to exit. A SIGINT before the load starts, or a second one,
    propagates (after the same clean-up).
    """
    opts = check_options(options)
    conversations = (
        load_conversations(trajectories_dir(opts.trajectories_dir), opts.conversations)
        if opts.workload == "trajectories"
        else []
    )
    temporary = opts.store_dir is None
    store = tempfile.mkdtemp(prefix=TEMP_PREFIX) if temporary else str(opts.store_dir)
    cluster = None
    if opts.own_cluster:
        cluster = TestCluster(os.path.abspath(store), opts.nodes, opts.namespace)
        connected = False
    else:
        connected = connect_ray(opts.address)
    removed = False
    try:
        doc = _Run(opts, conversations, progress, tamper, store, cluster).go()
    finally:
        try:
            if cluster is not None:
                cluster.shutdown()
            elif connected:
                import ray

                ray.shutdown()
        finally:
            if temporary and not opts.keep:
                shutil.rmtree(store, ignore_errors=True)
                removed = True
    doc["store_kept"] = not removed
    return doc
