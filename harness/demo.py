"""The demo: the seed stories run at once by agent-thread actors over one shared context.

:func:`run_demo` expects Ray to be initialized (:func:`start_ray` does it for
the command line; tests use their session cluster). Per *group* of four
threads it creates one context actor and seeds the stories' inputs, then runs
one :class:`~agents.actor.AgentLoopActor` per story, each with its scripted
model and its own session:

* **release** — "Ship v1 once the regression tests pass": plan, ``run_tests``,
  record "tests passed; prepare to package" (R10), ``package``, reply;
* **deployment** — "deploy to cn-hangzhou", then the production configuration
  says ``region=cn-shanghai``: ``deployment/target-v2`` supersedes
  ``deployment/target-v1``, which retires at once through its successor (R17);
* **consolidation** — two ``release-case-*`` frames become ``release-procedure``
  (the model writes the body, R34);
* **pause** — "pause the release" arrives while the release thread moves the
  release to packaging. A :class:`DemoBoard` gate makes the race certain: the
  pause thread compiles before the packaging commit and submits after it, so
  its transaction is rejected for a conflict (R24); it re-reads and rebuilds,
  and "tests passed" and "paused" are both held — no lost update.

Threads beyond four form further groups, each with its own context (the
scripted policies use fixed frame ids, so a copy of the stories needs its own
frame namespace; a context is that namespace). Every step is reported to the
board, which the live view polls. :func:`check_group` checks each group's
outcome against the seeds.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

from actors.client.joining import init_ray
from agents.actor import GATE_TIMEOUT, BoardGates
from protocol.usage import influence

STORIES = ("release", "deployment", "consolidation", "pause")
"""The seed stories, in the order threads are assigned to them."""
SHIP = "Ship v1 once the regression tests pass."
DEPLOY = "Deploy the service to cn-hangzhou."
CONFIG = "production config: region=cn-shanghai"
PAUSE = "Pause the release until I say so."
CASES = (
    ("release-case-a", "monorepo", "make dist", "Release case A (monorepo): built with make dist."),
    (
        "release-case-b",
        "split-repos",
        "one build per service",
        "Release case B (split repos): one build per service.",
    ),
)
MAX_STEPS = 24


class DemoBoard:
    """The demo's scoreboard and signals (run as an async Ray actor).

    Threads report every step (:meth:`report`); the live view polls
    :meth:`snapshot`. :meth:`signal` and :meth:`wait` are one-shot named
    events that stage the pause/packaging race.
    """

    def __init__(self) -> None:
        self.threads: dict[str, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self._signals: dict[str, asyncio.Event] = {}

    def _event(self, name: str) -> asyncio.Event:
        ev = self._signals.get(name)
        if ev is None:
            ev = self._signals[name] = asyncio.Event()
        return ev

    async def signal(self, name: str) -> None:
        """Set the named event."""
        self._event(name).set()

    async def wait(self, name: str, timeout: float = GATE_TIMEOUT) -> bool:
        """Wait for the named event; False if *timeout* passed first."""
        try:
            await asyncio.wait_for(self._event(name).wait(), timeout)
            return True
        except TimeoutError:
            return False

    async def report(self, doc: dict[str, Any]) -> None:
        """Record one step of a thread (or its end, ``{"thread", "finished": True}``)."""
        name = str(doc.get("thread"))
        t = self.threads.setdefault(
            name,
            {
                "thread": name,
                "steps": 0,
                "commits": 0,
                "rebased": 0,
                "rejected": 0,
                "deferred": 0,
                "action": "",
                "finished": False,
            },
        )
        if doc.get("finished"):
            t["finished"] = True
            return
        t["steps"] += 1
        t["commits"] += len(doc.get("committed", ()))
        t["rebased"] += int(doc.get("rebased", 0))
        t["rejected"] += len(doc.get("rejected", ()))
        t["deferred"] += len(doc.get("deferred", ()))
        t["action"] = doc.get("action") or ("idle" if doc.get("idle") else "context_tx")
        if doc.get("rejected") or doc.get("rebased") or doc.get("delivered"):
            self.events.append(
                {
                    "thread": name,
                    "step": doc.get("step"),
                    "rejected": list(doc.get("rejected", ())),
                    "conflicts": list(doc.get("conflicts", ())),
                    "rebased": doc.get("rebased", 0),
                    "delivered": doc.get("delivered"),
                }
            )

    async def snapshot(self) -> dict[str, Any]:
        """Per-thread counters and the notable events so far."""
        return {"threads": [dict(t) for t in self.threads.values()], "events": list(self.events)}


RELEASE_GATES = [
    {"phase": "before", "match": "(stage packaging)", "wait": "pause-compiled"},
    {"phase": "after", "match": "(stage packaging)", "signal": "packaging-committed"},
]
PAUSE_GATES = [
    {
        "phase": "before",
        "match": "(stage paused)",
        "signal": "pause-compiled",
        "wait": "packaging-committed",
    }
]


def start_ray(address: str | None = None) -> bool:
    """Connect to Ray for the demo (:func:`actors.client.joining.init_ray`): *address*, else
    ``RAY_ADDRESS``, else a new local cluster of two CPUs; True if this call connected.

    Joining a running cluster passes no CPU count (Ray refuses one then); a
    cluster that cannot be reached raises ``TransportError`` ``ray_unreachable``.
    """
    return init_ray(address, num_cpus=2)


def seed_group(handle: Any) -> None:
    """Seed one group's context: the stories' first inputs and the two release cases."""
    handle.observe_many(
        [
            ("user_message", SHIP, "release"),
            ("user_message", DEPLOY, "deployment"),
            ("external", CONFIG, "deployment"),
            ("external", CASES[0][3], "consolidation"),
            ("external", CASES[1][3], "consolidation"),
        ]
    )
    claim = handle.claim()
    refs = claim["claimed"]
    case_a, case_b = refs[3], refs[4]
    version = handle.version()
    derives = " ".join(
        f'(derive {fid} (from {ref}) (layout {layout}) (build "{build}") (outcome shipped))'
        for (fid, layout, build, _), ref in zip(CASES, (case_a, case_b), strict=True)
    )
    tx = (
        f"(context-tx (base-version {version})"
        ' (reason "Two earlier releases, recorded as cases")'
        f" {derives} (retire {case_a} {case_b}))"
    )
    receipt = handle.submit(tx)
    if not receipt.committed:
        raise RuntimeError(f"seeding the release cases failed: {receipt.errors}")


def _body(frames: dict[str, dict[str, Any]], fid: str) -> str:
    f = frames.get(fid)
    return str(f.get("body", "")) if f else ""


def _life(frames: dict[str, dict[str, Any]], fid: str) -> str | None:
    f = frames.get(fid)
    return str(f["lifecycle"]) if f else None


def check_group(
    frames: dict[str, dict[str, Any]],
    relations: list[list[str]],
    steps: dict[str, list[dict[str, Any]]],
    stories: tuple[str, ...],
) -> dict[str, bool]:
    """The seeds' outcomes for one group: name → held.

    *frames* maps id → frame dict, *steps* a story → its thread's step docs.
    """
    rel = {tuple(r) for r in relations}
    checks: dict[str, bool] = {}
    if "release" in stories:
        body = _body(frames, "release")
        paused = "pause" in stories
        checks["release: tests passed recorded"] = (
            "(tests passed)" in _body(frames, "test-result")
            and ("test-result", "supports", "release") in rel
        )
        if paused:
            checks["release: paused and tests passed both held"] = (
                "(stage paused)" in body and "(tests passed)" in body
            )
            checks["release: reached packaging before the pause"] = any(
                f"(resume-at {s})" in body for s in ("packaging", "packaged")
            )
            rejected = [
                c
                for s in (*steps.get("release", []), *steps.get("pause", []))
                for c in s.get("rejected", ())
            ]
            checks["pause: conflict rejected, re-read and resolved (no lost update)"] = (
                "conflict" in rejected and any(s.get("delivered") for s in steps.get("pause", []))
            )
        else:
            checks["release: packaging/packaged"] = any(
                f"(stage {s})" in body for s in ("packaging", "packaged")
            )
    if "deployment" in stories:
        checks["deployment: target-v1 retired through its successor"] = (
            _life(frames, "deployment/target-v1") == "retired"
            and ("deployment/target-v2", "supersedes", "deployment/target-v1") in rel
        )
        checks["deployment: target-v2 region cn-shanghai"] = _life(
            frames, "deployment/target-v2"
        ) == "active" and "cn-shanghai" in _body(frames, "deployment/target-v2")
    if "consolidation" in stories:
        checks["consolidation: cases retired, procedure active"] = (
            _life(frames, "release-case-a") == "retired"
            and _life(frames, "release-case-b") == "retired"
            and _life(frames, "release-procedure") == "active"
            and all(("release-procedure", "supersedes", c) in rel for c, *_ in CASES)
        )
    return checks


def why_frame(
    frames: dict[str, dict[str, Any]], traces: list[dict[str, Any]], frame_id: str
) -> dict[str, Any] | None:
    """Which memories influenced the last write of *frame_id* (R42), from the usage traces.

    None when the frame is absent or no traced call committed its last write.
    """
    f = frames.get(frame_id)
    if f is None:
        return None
    version = f["updated_version"]
    for t in traces:
        if any(d.get("version") == version for d in t.get("decisions") or ()):
            return {"frame": frame_id, **influence(t, version)}
    return None


def run_demo(
    threads: int = 4,
    store_dir: str | None = None,
    *,
    progress: Callable[[dict[str, Any]], None] | None = None,
    config: dict[str, Any] | None = None,
    timeout: float = 50.0,
    poll: float = 0.1,
    keep: bool = False,
) -> dict[str, Any]:
    """Run the demo on the initialized Ray runtime; the result document (see the CLI).

    *threads* agent threads (at least 1) in groups of four stories, each group
    with its own context in *store_dir* (a fresh temporary directory if None).
    *progress* receives the board's snapshot while threads run. Actors are
    killed at the end unless *keep*.
    """
    import ray

    from actors.server.connect import connect
    from agents.actor import AgentLoopActor

    if threads < 1:
        raise ValueError("threads must be at least 1")
    started = time.perf_counter()
    store = store_dir or tempfile.mkdtemp(prefix="morphz-demo-")
    namespace = "morphz-demo-" + uuid.uuid4().hex[:8]
    board_name = "demo-board"
    board: Any = (
        ray.remote(DemoBoard).options(name=board_name, namespace=namespace, num_cpus=0).remote()
    )
    groups: list[dict[str, Any]] = []
    for g in range(0, threads, len(STORIES)):
        stories = STORIES[: min(len(STORIES), threads - g)]
        index = g // len(STORIES) + 1
        name = "demo" if index == 1 else f"demo-{index}"
        handle = connect(name, store_dir=store, namespace=namespace)
        seed_group(handle)
        groups.append({"context": name, "handle": handle, "stories": stories, "actors": {}})
    loop_cls = ray.remote(AgentLoopActor)
    for group in groups:
        for story in group["stories"]:
            thread = story if group["context"] == "demo" else f"{story}@{group['context']}"
            gated = "pause" in group["stories"]
            gates = (
                (RELEASE_GATES if story == "release" else PAUSE_GATES if story == "pause" else [])
                if gated
                else []
            )
            # One board per namespace; the gates' signal names are made per group.
            gates = [
                {
                    **gt,
                    **{k: f"{gt[k]}:{group['context']}" for k in ("signal", "wait") if k in gt},
                }
                for gt in gates
            ]
            group["actors"][story] = loop_cls.options(num_cpus=0, namespace=namespace).remote(
                group["context"],
                namespace,
                story,
                story,
                thread,
                config,
                board_name,
                gates,
            )
    runs: dict[Any, tuple[dict[str, Any], str]] = {}
    for group in groups:
        for story, actor in group["actors"].items():
            if story != "pause":
                runs[actor.run.remote(MAX_STEPS)] = (group, story)
    waiting_pause = [g for g in groups if "pause" in g["actors"]]
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    deadline = time.monotonic() + timeout
    while runs or waiting_pause:
        for group in list(waiting_pause):
            snap = group["handle"].snapshot(["release"])
            if snap["frames"]["release"] is not None:
                group["handle"].observe("user_message", PAUSE, session="pause")
                runs[group["actors"]["pause"].run.remote(MAX_STEPS)] = (group, "pause")
                waiting_pause.remove(group)
        if runs:
            done, _ = ray.wait(list(runs), num_returns=len(runs), timeout=poll)
            for ref in done:
                group, story = runs.pop(ref)
                results[(group["context"], story)] = ray.get(ref)
        else:
            time.sleep(poll)
        if progress is not None:
            progress(ray.get(board.snapshot.remote()))
        if time.monotonic() > deadline:
            break
    timed_out = bool(runs or waiting_pause)
    snapshot = ray.get(board.snapshot.remote())
    if progress is not None:
        progress(snapshot)

    out_groups = []
    all_checks: dict[str, bool] = {}
    frames_out: list[dict[str, Any]] = []
    relations_out: list[list[str]] = []
    totals = {"commits": 0, "rebased": 0, "rejected": 0, "deferred": 0, "steps": 0}
    for group in groups:
        handle = group["handle"]
        state = handle.state()
        frames = {f["id"]: handle.frame(f["id"]) for f in state["frames"]}
        steps = {s: results.get((group["context"], s), []) for s in group["stories"]}
        for docs in steps.values():
            for d in docs:
                totals["steps"] += 1
                totals["commits"] += len(d.get("committed", ()))
                totals["rebased"] += int(d.get("rebased", 0))
                totals["rejected"] += len(d.get("rejected", ()))
                totals["deferred"] += len(d.get("deferred", ()))
        checks = check_group(frames, state["relations"], steps, group["stories"])
        prefix = "" if len(groups) == 1 else f"{group['context']}: "
        all_checks.update({prefix + k: v for k, v in checks.items()})
        for f in frames.values():
            frames_out.append(
                {
                    "context": group["context"],
                    "id": f["id"],
                    "revision": f["revision"],
                    "lifecycle": f["lifecycle"],
                    "body": f["body"],
                    "sources": f["sources"],
                }
            )
        relations_out.extend([group["context"], *r] for r in state["relations"])
        traces = handle.traces(limit=100_000)
        out_groups.append(
            {
                "context": group["context"],
                "stories": list(group["stories"]),
                "version": state["version"],
                "tick": state["tick"],
                "traces": len(traces),
                "steps": {s: len(v) for s, v in steps.items()},
                "why": [
                    w
                    for fid in ("release", "deployment/target-v2")
                    if (w := why_frame(frames, traces, fid)) is not None
                ],
            }
        )
    all_checks["every thread finished in time"] = not timed_out
    doc: dict[str, Any] = {
        "threads": threads,
        "groups": out_groups,
        "store": os.path.abspath(store),
        **totals,
        "frames": frames_out,
        "relations": relations_out,
        "board": snapshot,
        "seconds": round(time.perf_counter() - started, 2),
        "checks": all_checks,
        "ok": all(all_checks.values()),
    }
    if not keep:
        for group in groups:
            for actor in group["actors"].values():
                ray.kill(actor, no_restart=True)
            group["handle"].shutdown()
        ray.kill(board, no_restart=True)
    return doc


__all__ = [
    "CASES",
    "STORIES",
    "BoardGates",
    "DemoBoard",
    "check_group",
    "run_demo",
    "seed_group",
    "start_ray",
    "why_frame",
]
