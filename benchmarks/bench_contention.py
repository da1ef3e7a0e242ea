"""Lost-update workloads under contention through one context actor, beside SQLite CAS.

Measured in one run, on one local Ray cluster, at each writer count of
``--writers`` (default 1,2,4,8,16):

(a) **shared-frame read-modify-write**: every writer (a separate Ray actor
    process) appends its own token to ONE shared frame, one update after the
    other: read the version, read the frame, revise it with the token appended
    based on that version; on rejection re-read and retry;
(b) **append-as-own-frame**: every update derives its own frame (sourced from
    and related to the shared frame), based on the last version the writer saw
    (no read; the receipt's version is the next base), with up to
    ``--window`` submissions in flight per writer;
(c) **field append** (``append``): every update is ``(append shared/plan
    (tokens "wK-i"))`` on the ONE shared frame, based on the last version the
    writer saw (stale is fine: an append is applied to the frame as it stands),
    up to ``--window`` in flight per writer;
(d) **own field** (``fields``): every update is ``(set shared/plan (wK i))``,
    each writer setting its own field of the ONE shared frame, based on the
    last version it saw, one in flight per writer (two sets of one field in flight
    would rightly collide).

``--grow N`` also measures (e) one writer appending N times (default 10,000)
to one frame of an embedded context (LMDB, fsync as configured), printing the
mean commit time per block of 1,000 appends (the first block is the same run's
baseline) and, at each block's length, what encoding and decoding the frame
record alone cost: where the time goes as the frame grows.

Beside each, in the same run, a plain SQLite compare-and-set loop doing the
same updates from the same number of processes: (a) ``SELECT version, body``
then ``UPDATE … SET body = ?, version = version + 1 WHERE version = ?`` and
retry when no row changed; (b) one ``BEGIN IMMEDIATE`` transaction per update
inserting its own row and bumping the version. The database is in WAL mode
with ``synchronous=FULL``, so each commit is fsync'd, as each Morphz commit is.

For (c) and (d) the SQLite row beside them is the compare-and-set loop of (a),
run again in the same run.

Printed per run: updates/s, rejections per committed update, p50/p99 latency
per update (from the first attempt to the committed receipt), and the lost
and duplicated counts, checked on the final state: (a) the shared frame holds
every committed token exactly once and no token of a rejected attempt;
(b) every own frame exists exactly once. A nonzero count is printed loudly.

``--api one-trip`` uses the handle's one-round-trip read and receipts when the
handle has them (see the README). Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import shutil
import sqlite3
import sys
import tempfile
import time
import uuid
from collections import Counter
from typing import Any

import testbed  # first: puts this checkout on sys.path

from actors.client.handle import ContextHandle
from actors.client.lookup import lookup
from actors.client.nodes import current_node_id, pinned
from actors.server.connect import connect
from harness.loadtest import percentile
from protocol.forms import Symbol
from protocol.receipts import Receipt
from protocol.sexpr import read_forms
from protocol.tx import AppendField, ContextTx, Derive, Relate, Revise, SetField

NAMESPACE = "morphz-bench-contention"
SHARED = "shared/plan"
WORKLOADS = ("rmw", "own", "append", "fields")
ONE_TRIP_METHODS = ("read_for_update", "update")
"""Handle methods ``--api one-trip`` needs; absent, the option is refused."""


def _tokens_of(body_text: str) -> list[str]:
    """The tokens of the shared frame's body ``(tokens t1 t2 …)``."""
    forms = read_forms(body_text)
    if not forms or not isinstance(forms[0], tuple):
        return []
    return [str(x) for x in forms[0][1:]]


def _shared_body(tokens: list[str]) -> tuple[Any, ...]:
    return ((Symbol("tokens"), *(Symbol(t) for t in tokens)),)


def _summary(
    latencies: list[float], committed: int, rejections: int, seconds: float
) -> dict[str, Any]:
    return {
        "updates": committed,
        "seconds": round(seconds, 3),
        "rate": round(committed / seconds, 1) if seconds > 0 else 0.0,
        "rejections": rejections,
        "rejections_per_update": round(rejections / committed, 3) if committed else 0.0,
        "p50_ms": round(percentile(latencies, 50), 2),
        "p99_ms": round(percentile(latencies, 99), 2),
    }


# -- Morphz writers ------------------------------------------------------------


class Writer:
    """One writer process: drives its updates through a handle to the context actor.

    ``read`` does "read what I need to base the next update on" and ``submit``
    does "submit it"; the two workloads are written over them only.
    """

    def __init__(self, context: str, api: str) -> None:
        self.handle: ContextHandle = lookup(context, NAMESPACE)
        self.api = api
        self.known: dict[str, Any] | None = None

    async def ready(self) -> bool:
        """Answered once the handle reaches the context (before timing starts)."""
        await self.handle.version_async()
        return True

    async def read(self) -> tuple[int, list[str]]:
        """The version and the shared frame's tokens, read at (or after) that version.

        The version is read first: a frame read after it is at least as new, so
        a revise based on the version can only be rejected, never lose an update.
        """
        if self.api == "one-trip":
            got: Any = await self.handle.read_for_update_async([SHARED])
            return int(got.version), _tokens_of(got.frames[SHARED]["body"])
        version = await self.handle.version_async()
        frame = await self.handle.frame_async(SHARED)
        return version, _tokens_of(frame.body)

    async def submit(self, tx: ContextTx) -> Receipt:
        """Submit one transaction; the durable receipt (committed or rejected)."""
        return await self.handle.submit_async(tx)

    async def update_current(self, token: str) -> tuple[int, int]:
        """One update of the shared frame on the current API: read, submit, on rejection
        read again. ``(rejections, round trips)``."""
        rejections = trips = 0
        while True:
            version, tokens = await self.read()
            trips += 1 if self.api == "one-trip" else 2
            tx = ContextTx(
                base_version=version,
                reason="rmw",
                ops=(Revise(id=SHARED, body=_shared_body([*tokens, token])),),
            )
            receipt = await self.submit(tx)
            trips += 1
            if receipt.committed:
                return rejections, trips
            rejections += 1

    async def update_one_trip(self, token: str) -> tuple[int, int]:
        """One update with the handle's ``update``: the first read skipped when the last
        committed state is known, each retry rebuilt from the rejection's receipt."""

        def append(state: dict[str, Any] | None) -> tuple[Any, ...]:
            forms = state["body_forms"] if state else []
            tokens = [str(t) for t in forms[0][1:]] if forms and isinstance(forms[0], list) else []
            return _shared_body([*tokens, token])

        rejections = trips = 0
        while True:
            result = await self.handle.update_async(SHARED, append, reason="rmw", known=self.known)
            rejections += result.rejections
            trips += result.attempts + result.reads
            self.known = result.frame if result.committed else None
            if result.committed:
                return rejections, trips

    async def rmw(self, k: int, updates: int, start_at: float) -> dict[str, Any]:
        """(a): *updates* read-modify-writes of the shared frame, retried until committed."""
        await _sleep_until(start_at)
        latencies: list[float] = []
        rejections = trips = 0
        committed: list[str] = []
        one = self.api == "one-trip" and hasattr(self.handle, "update_async")
        cpu, loop_cpu = time.process_time(), time.thread_time()
        started = time.perf_counter()
        for i in range(updates):
            token = f"w{k}-{i}"
            t = time.perf_counter()
            rej, n = await (self.update_one_trip(token) if one else self.update_current(token))
            latencies.append((time.perf_counter() - t) * 1000)
            rejections += rej
            trips += n
            committed.append(token)
        return {
            "start": started,
            "end": time.perf_counter(),
            "latencies": latencies,
            "rejections": rejections,
            "round_trips": trips,
            "committed": committed,
            "cpu": time.process_time() - cpu,
            "loop_cpu": time.thread_time() - loop_cpu,
        }

    async def own(self, k: int, updates: int, window: int, start_at: float) -> dict[str, Any]:
        """(b): *updates* own frames, *window* in flight, each on the last version seen."""
        await _sleep_until(start_at)
        latencies: list[float] = []
        rejections = 0
        committed: list[str] = []
        base = await self.handle.version_async()
        next_i = trips = 0

        async def lane() -> None:
            nonlocal base, next_i, rejections, trips
            while next_i < updates:
                i = next_i
                next_i += 1
                frame = f"own/w{k}/u{i}"
                t = time.perf_counter()
                while True:
                    tx = ContextTx(
                        base_version=base,
                        reason="own",
                        ops=(
                            Derive(id=frame, sources=(SHARED,), body=((Symbol("update"), k, i),)),
                            Relate(subject=frame, label="extends", object=SHARED),
                        ),
                    )
                    receipt = await self.submit(tx)
                    trips += 1
                    base = max(base, receipt.version)
                    if receipt.committed:
                        break
                    rejections += 1
                latencies.append((time.perf_counter() - t) * 1000)
                committed.append(frame)

        async def batches() -> None:
            # The window's transactions in one call (submit_many): one round trip for all.
            nonlocal base, rejections, trips
            for start in range(0, updates, window):
                todo = {f"own/w{k}/u{i}": i for i in range(start, min(updates, start + window))}
                t = time.perf_counter()
                while todo:
                    txs = [
                        ContextTx(
                            base_version=base,
                            reason="own",
                            ops=(
                                Derive(id=f, sources=(SHARED,), body=((Symbol("update"), k, i),)),
                                Relate(subject=f, label="extends", object=SHARED),
                            ),
                        )
                        for f, i in todo.items()
                    ]
                    receipts = await self.handle.submit_many_async(txs)
                    trips += 1
                    for frame, receipt in zip(list(todo), receipts, strict=True):
                        base = max(base, receipt.version)
                        if receipt.committed:
                            del todo[frame]
                            committed.append(frame)
                            latencies.append((time.perf_counter() - t) * 1000)
                        else:
                            rejections += 1

        cpu, loop_cpu = time.process_time(), time.thread_time()
        started = time.perf_counter()
        if self.api == "one-trip" and hasattr(self.handle, "submit_many_async"):
            await batches()
        else:
            await asyncio.gather(*(lane() for _ in range(max(1, window))))
        return {
            "start": started,
            "end": time.perf_counter(),
            "latencies": latencies,
            "rejections": rejections,
            "round_trips": trips,
            "committed": committed,
            "cpu": time.process_time() - cpu,
            "loop_cpu": time.thread_time() - loop_cpu,
        }

    async def edits(
        self, workload: str, k: int, updates: int, window: int, start_at: float
    ) -> dict[str, Any]:
        """(c) and (d): field edits of the shared frame, *window* in flight, each based on
        the last version this writer saw; a rejection is counted and submitted again."""
        await _sleep_until(start_at)
        latencies: list[float] = []
        rejections = trips = 0
        committed: list[str] = []
        base = await self.handle.version_async()
        next_i = 0

        def edit(i: int) -> Any:
            if workload == "append":
                return AppendField(id=SHARED, field="tokens", values=(Symbol(f"w{k}-{i}"),))
            return SetField(id=SHARED, field=f"w{k}", values=(i,))

        async def lane() -> None:
            nonlocal base, next_i, rejections, trips
            while next_i < updates:
                i = next_i
                next_i += 1
                t = time.perf_counter()
                while True:
                    tx = ContextTx(base_version=base, reason=workload, ops=(edit(i),))
                    receipt = await self.submit(tx)
                    trips += 1
                    base = max(base, receipt.version)
                    if receipt.committed:
                        break
                    rejections += 1
                latencies.append((time.perf_counter() - t) * 1000)
                committed.append(f"w{k}-{i}")

        cpu, loop_cpu = time.process_time(), time.thread_time()
        started = time.perf_counter()
        # A writer's own field is set by one submission at a time: two of its sets in
        # flight would be concurrent changes of one field, which the second rightly loses.
        lanes = 1 if workload == "fields" else max(1, window)
        await asyncio.gather(*(lane() for _ in range(lanes)))
        return {
            "start": started,
            "end": time.perf_counter(),
            "latencies": latencies,
            "rejections": rejections,
            "round_trips": trips,
            "committed": committed,
            "cpu": time.process_time() - cpu,
            "loop_cpu": time.thread_time() - loop_cpu,
        }


async def _sleep_until(at: float) -> None:
    delay = at - time.perf_counter()
    if delay > 0:
        await asyncio.sleep(delay)


def _merge(parts: list[dict[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    latencies = [x for p in parts for x in p["latencies"]]
    committed = [x for p in parts for x in p["committed"]]
    seconds = max(p["end"] for p in parts) - min(p["start"] for p in parts)
    rejections = sum(p["rejections"] for p in parts)
    summary = _summary(latencies, len(committed), rejections, seconds)
    if all("round_trips" in p for p in parts) and committed:
        trips = sum(p["round_trips"] for p in parts)
        summary["round_trips_per_update"] = round(trips / len(committed), 3)
    if all("cpu" in p for p in parts) and committed:
        cpu = sum(p["cpu"] for p in parts)
        summary["writers_cpu_us_per_update"] = round(cpu / len(committed) * 1e6)
    if all("loop_cpu" in p for p in parts) and committed:
        # the writers' event loops alone: what their calls cost, without Ray's own threads
        loop = sum(p["loop_cpu"] for p in parts)
        summary["writers_loop_cpu_us_per_update"] = round(loop / len(committed) * 1e6)
    return summary, committed


def _process_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) process *pid* used so far; None when it is not local."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _own_fields(body_text: str, writers: int, updates: int) -> list[str]:
    """What (d) left in the shared frame, as the updates it shows: writer K's field at
    its last value i stands for every update wK-0 … wK-i (each set overwrote the one
    before it, in the writer's own order)."""
    present: list[str] = []
    for form in read_forms(body_text):
        if isinstance(form, tuple) and form and str(form[0]).startswith("w"):
            last = form[1] if len(form) == 2 and isinstance(form[1], int) else -1
            present += [f"{form[0]}-{i}" for i in range(min(last, updates - 1) + 1)]
    return present


def _check_tokens(committed: list[str], present: list[str]) -> dict[str, int]:
    """Lost: committed tokens absent; duplicated: extra copies of any token or
    tokens no committed update wrote (a rejected attempt's)."""
    counts = Counter(present)
    expected = set(committed)
    lost = sum(1 for t in expected if counts[t] == 0)
    duplicated = sum(c - 1 for c in counts.values() if c > 1)
    duplicated += sum(c for t, c in counts.items() if t not in expected)
    duplicated += len(committed) - len(expected)
    return {"lost": lost, "duplicated": duplicated}


# -- SQLite compare-and-set ----------------------------------------------------


def _sqlite_open(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, timeout=60.0)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA busy_timeout=60000")
    return conn


def _sqlite_setup(path: str) -> None:
    conn = _sqlite_open(path)
    conn.execute("CREATE TABLE frame (id TEXT PRIMARY KEY, version INTEGER, body TEXT)")
    conn.execute("CREATE TABLE own (id TEXT PRIMARY KEY, related TEXT)")
    conn.execute("CREATE TABLE meta (k TEXT PRIMARY KEY, version INTEGER)")
    conn.execute("INSERT INTO frame VALUES (?, 0, '')", (SHARED,))
    conn.execute("INSERT INTO meta VALUES ('version', 0)")
    conn.close()


def _sqlite_worker(path: str, workload: str, k: int, updates: int, barrier: Any, out: Any) -> None:
    conn = _sqlite_open(path)
    latencies: list[float] = []
    rejections = 0
    committed: list[str] = []
    barrier.wait()
    started = time.perf_counter()
    for i in range(updates):
        t = time.perf_counter()
        if workload == "rmw":
            token = f"w{k}-{i}"
            while True:
                version, body = conn.execute(
                    "SELECT version, body FROM frame WHERE id = ?", (SHARED,)
                ).fetchone()
                new = f"{body} {token}" if body else token
                cur = conn.execute(
                    "UPDATE frame SET body = ?, version = version + 1 WHERE id = ? AND version = ?",
                    (new, SHARED, version),
                )
                if cur.rowcount == 1:
                    break
                rejections += 1
            committed.append(token)
        else:
            frame = f"own/w{k}/u{i}"
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO own VALUES (?, ?)", (frame, SHARED))
            conn.execute("UPDATE meta SET version = version + 1 WHERE k = 'version'")
            conn.execute("COMMIT")
            committed.append(frame)
        latencies.append((time.perf_counter() - t) * 1000)
    out.put(
        {
            "start": started,
            "end": time.perf_counter(),
            "latencies": latencies,
            "rejections": rejections,
            "committed": committed,
        }
    )
    conn.close()


def run_sqlite(scratch: str, workload: str, writers: int, updates: int) -> dict[str, Any]:
    """The SQLite compare-and-set baseline: *writers* processes, *updates* each."""
    path = os.path.join(scratch, f"cas-{workload}-{writers}-{uuid.uuid4().hex[:6]}.db")
    _sqlite_setup(path)
    mp = multiprocessing.get_context("spawn")
    barrier = mp.Barrier(writers)
    out = mp.Queue()
    procs = [
        mp.Process(target=_sqlite_worker, args=(path, workload, k, updates, barrier, out))
        for k in range(writers)
    ]
    for p in procs:
        p.start()
    parts = [out.get() for _ in procs]
    for p in procs:
        p.join()
    summary, committed = _merge(parts)
    conn = _sqlite_open(path)
    if workload == "rmw":
        body = conn.execute("SELECT body FROM frame WHERE id = ?", (SHARED,)).fetchone()[0]
        present = body.split()
    else:
        present = [r[0] for r in conn.execute("SELECT id FROM own")]
    conn.close()
    summary.update(_check_tokens(committed, present))
    return summary


# -- the run -------------------------------------------------------------------


class Bench:
    """One Ray cluster, a fresh context per measurement, writers as Ray actors."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.dir = tempfile.mkdtemp(prefix="morphz-bench-contention-", dir=args.dir)
        self.node = current_node_id()
        self.report: dict[str, Any] = {
            "machine": testbed.machine(self.dir),
            "api": args.api,
            "updates_per_writer": {"rmw": args.rmw_updates, "own": args.own_updates},
            "window": args.window,
            "sqlite": "WAL, synchronous=FULL, one process per writer",
            "runs": [],
        }
        self.loud: list[str] = []

    def say(self, text: str = "") -> None:
        if not self.args.json:
            print(text, flush=True)

    def context(self) -> tuple[str, ContextHandle]:
        name = f"bench-{uuid.uuid4().hex[:8]}"
        handle = connect(name, store_dir=self.dir, namespace=NAMESPACE)
        receipt = handle.submit(
            ContextTx(
                base_version=handle.version(),
                reason="setup",
                ops=(Derive(id=SHARED, body=_shared_body([])),),
            )
        )
        if not receipt.committed:
            raise RuntimeError(f"setup rejected: {receipt.errors}")
        return name, handle

    def morphz(self, workload: str, writers: int, updates: int, api: str) -> dict[str, Any]:
        import ray

        name, handle = self.context()
        options = {
            "num_cpus": 0,
            "max_concurrency": 1000,
            "namespace": NAMESPACE,
            "scheduling_strategy": pinned(self.node),
        }
        actors: list[Any] = [
            ray.remote(Writer).options(**options).remote(name, api) for _ in range(writers)
        ]
        pid = int(handle.describe()["pid"])
        try:
            ray.get([a.ready.remote() for a in actors])
            actor_cpu = _process_cpu(pid)
            start_at = time.perf_counter() + 0.5
            if workload == "rmw":
                refs = [a.rmw.remote(k, updates, start_at) for k, a in enumerate(actors)]
            elif workload == "own":
                refs = [
                    a.own.remote(k, updates, self.args.window, start_at)
                    for k, a in enumerate(actors)
                ]
            else:
                refs = [
                    a.edits.remote(workload, k, updates, self.args.window, start_at)
                    for k, a in enumerate(actors)
                ]
            summary, committed = _merge(ray.get(refs))
            after = _process_cpu(pid)
            if actor_cpu is not None and after is not None and committed:
                summary["actor_cpu_us_per_update"] = round(
                    (after - actor_cpu) / len(committed) * 1e6
                )
            if workload in ("rmw", "append"):
                present = _tokens_of(handle.frame(SHARED).body)
            elif workload == "fields":
                present = _own_fields(handle.frame(SHARED).body, writers, updates)
            else:
                state = handle.state()
                present = [f["id"] for f in state.frames if str(f["id"]).startswith("own/")]
            summary.update(_check_tokens(committed, present))
            stats = handle.stats()
            writes = max(1, int(stats.get("batches", 0)))
            summary["actor"] = {
                "writes": writes,
                "decided": stats.get("transactions", 0),
                "held": stats.get("held", 0),
                "decided_per_write": round(stats.get("transactions", 0) / writes, 2),
            }
        finally:
            for a in actors:
                ray.kill(a)
            handle.shutdown()
        return summary

    def row(self, system: str, workload: str, writers: int, got: dict[str, Any]) -> None:
        load = round(os.getloadavg()[0], 2)
        got = {"system": system, "workload": workload, "writers": writers, "load_1m": load, **got}
        self.report["runs"].append(got)
        flag = ""
        if got["lost"] or got["duplicated"]:
            flag = f"   !!! LOST {got['lost']} DUPLICATED {got['duplicated']} !!!"
            self.loud.append(f"{system} {workload} {writers} writers:{flag}")
        self.say(
            f"  {system:<7} {writers:>3} writers {got['updates']:>6} updates "
            f"{got['rate']:>9.1f}/s  rej/update {got['rejections_per_update']:>7.3f}  "
            f"p50 {got['p50_ms']:>8.2f} ms  p99 {got['p99_ms']:>8.2f} ms  "
            f"trips/update {got.get('round_trips_per_update', '-')}  "
            f"lost {got['lost']} dup {got['duplicated']}  load {load}{flag}"
        )
        if "actor" in got:
            a = got["actor"]
            self.say(
                f"          actor: {a['writes']} writes, {a['decided']} decided "
                f"({a['decided_per_write']}/write), {a['held']} rejections held for a turn; "
                f"CPU µs/update: actor {got.get('actor_cpu_us_per_update', '-')}, "
                f"writers {got.get('writers_cpu_us_per_update', '-')} (their event loops "
                f"{got.get('writers_loop_cpu_us_per_update', '-')})"
            )

    def run(self) -> None:
        levels = self.args.writers
        titles = {
            "rmw": "(a) shared-frame read-modify-write",
            "own": f"(b) append-as-own-frame (window {self.args.window})",
            "append": f"(c) (append shared/plan (tokens …)) from stale bases (window "
            f"{self.args.window})",
            "fields": "(d) each writer sets its own field of shared/plan (one in flight each)",
        }
        for workload in self.args.workloads:
            updates = self.args.own_updates if workload == "own" else self.args.rmw_updates
            self.say(f"{titles[workload]}, {updates} updates per writer")
            single: dict[str, float] = {}
            for n in levels:
                sq = run_sqlite(self.dir, "own" if workload == "own" else "rmw", n, updates)
                self.row("sqlite", workload, n, sq)
                apis = self.args.apis if workload in ("rmw", "own") else ["current"]
                for api in apis:
                    system = (
                        "morphz"
                        if api == "current" or workload not in ("rmw", "own")
                        else "morphz1"
                    )
                    mz = self.morphz(workload, n, updates, api)
                    self.row(system, workload, n, mz)
                    if n == 1:
                        single[api] = mz["rate"]
                    ratios = {
                        "api": api,
                        "morphz_over_sqlite": testbed.ratio(mz["rate"], sq["rate"]),
                        "morphz_over_1_writer": testbed.ratio(mz["rate"], single.get(api, 0.0)),
                    }
                    entry = self.report["runs"][-1]
                    entry.update(ratios)
                    self.say(
                        f"          {api}: ratio to SQLite CAS {ratios['morphz_over_sqlite']:.3f}"
                        + (
                            f", to 1 writer {ratios['morphz_over_1_writer']:.3f}"
                            if api in single
                            else ""
                        )
                    )
                    if self.args.bare:
                        entry["morphz_over_bare_ray"] = self.bare(n, updates, mz["rate"])
            self.say()
        if self.args.grow:
            self.grow(self.args.grow)
        self.report["loud"] = self.loud
        if self.loud:
            self.say("!!! NONZERO LOST OR DUPLICATED COUNTS:")
            for line in self.loud:
                self.say("!!! " + line)

    def bare(self, writers: int, updates: int, rate: float) -> float:
        """The same-run Ray yardstick: *writers* client actors each calling one no-op actor
        *updates* times, one call after the other, with a transaction-sized payload
        (:func:`harness.loadtest.baseline.measure_baseline`, what ``morphz loadtest
        --baseline`` measures); printed beside the Morphz run, answered as Morphz's
        *rate* over its calls/s."""
        from harness.loadtest.baseline import measure_baseline

        got = measure_baseline(
            [[updates]] * writers,
            seconds=None,
            server_node=self.node,
            client_nodes=[self.node],
            namespace=NAMESPACE,
        )
        got["system"], got["writers"] = "bare-ray", writers
        self.report["runs"].append(got)
        cpu = got["cpu_ms_per_call"]
        self.say(
            f"  bare Ray {writers:>3} writers {got['calls']:>6} calls   {got['calls_s']:>9.1f}/s"
            f"  p50 {got['latency_ms']['p50']:>8.2f} ms  p99 {got['latency_ms']['p99']:>8.2f} ms"
            f"  CPU µs/call: no-op actor {cpu['server'] * 1000:.0f},"
            f" clients {cpu['clients'] * 1000:.0f} (their event loops"
            f" {cpu['clients_loop'] * 1000:.0f})"
        )
        ratio = testbed.ratio(rate, got["calls_s"])
        self.say(f"          morphz ÷ bare Ray {ratio:.3f}")
        return ratio

    def grow(self, appends: int) -> None:
        """(e): one writer appends *appends* times to one frame of an embedded context."""
        from protocol.state import Frame
        from service.store import open_context

        self.say(f"(e) one frame appended {appends:,} times (embedded context, LMDB)")
        ctx = open_context(os.path.join(self.dir, "grow"), "grow", sync=self.args.grow_sync)
        try:
            ctx.commit("(context-tx (base-version 0) (derive shared (tokens)))")
            curve: list[dict[str, Any]] = []
            block: list[float] = []
            for i in range(appends):
                t = time.perf_counter()
                r = ctx.commit(f'(context-tx (base-version 1) (append shared (tokens "w-{i}")))')
                block.append(time.perf_counter() - t)
                if not r.committed:
                    self.loud.append(f"grow: append {i} rejected: {r.errors}")
                if (i + 1) % 1000 == 0 or i + 1 == appends:
                    record = ctx.backend.read(lambda v: v.frame("shared"))
                    assert isinstance(record, Frame)
                    t = time.perf_counter()
                    doc = record.to_record()
                    encode = time.perf_counter() - t
                    t = time.perf_counter()
                    Frame.from_record(doc)
                    decode = time.perf_counter() - t
                    point = {
                        "length": i + 1,
                        "commit_us": round(sum(block) / len(block) * 1e6),
                        "p99_us": round(percentile([b * 1e6 for b in block], 99)),
                        "frame_encode_us": round(encode * 1e6),
                        "frame_decode_us": round(decode * 1e6),
                    }
                    curve.append(point)
                    block = []
                    self.say(
                        f"  length {point['length']:>6}: commit {point['commit_us']:>7} µs mean "
                        f"(p99 {point['p99_us']:>7}), of which the frame record alone: encode "
                        f"{point['frame_encode_us']:>6} µs, decode {point['frame_decode_us']:>6} µs"
                    )
            first = curve[0]["commit_us"]
            ratio = testbed.ratio(curve[-1]["commit_us"], first)
            self.say(f"  last block / first block: {ratio:.2f}")
            self.report["grow"] = {"sync": self.args.grow_sync, "curve": curve, "ratio": ratio}
        finally:
            ctx.close()
        self.say()

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def _levels(text: str) -> list[int]:
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--writers wants numbers like 1,2,4,8, got {text!r}"
        ) from None
    if not levels or any(n < 1 or n > 64 for n in levels):
        raise argparse.ArgumentTypeError(f"--writers wants counts from 1 to 64, got {text!r}")
    return levels


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"wants a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"wants a positive integer, got {text!r}")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: see ``--help``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer updates per writer")
    parser.add_argument("--json", action="store_true", help="print one JSON document of figures")
    parser.add_argument("--dir", default=None, help="scratch parent directory for the stores")
    parser.add_argument(
        "--writers", type=_levels, default=[1, 2, 4, 8, 16], help="writer counts, e.g. 1,2,4,8"
    )
    parser.add_argument(
        "--workload", choices=WORKLOADS, action="append", help="run only this workload"
    )
    parser.add_argument("--updates", type=_positive, default=None, help="updates per writer")
    parser.add_argument(
        "--window", type=_positive, default=8, help="own-frame submissions in flight per writer"
    )
    parser.add_argument(
        "--bare",
        action="store_true",
        help="also measure bare Ray (the writers calling a no-op actor) at each writer count",
    )
    parser.add_argument(
        "--grow",
        type=int,
        nargs="?",
        const=10_000,
        default=0,
        help="also append this many times to one frame (default 10,000) and print the curve",
    )
    parser.add_argument(
        "--grow-sync",
        action="store_true",
        help="fsync each commit of --grow (default: no fsync, the engine's cost alone)",
    )
    parser.add_argument(
        "--api",
        choices=["current", "one-trip", "both"],
        default="current",
        help="the handle API the writers use (both: each, beside the same SQLite run)",
    )
    args = parser.parse_args(argv)
    if not 0 <= args.grow <= 1_000_000:
        parser.error(f"--grow wants 1 to 1,000,000 appends, got {args.grow}")
    args.dir = args.dir or testbed.scratch_parent()
    args.workloads = args.workload or list(WORKLOADS)
    args.rmw_updates = args.updates or (60 if args.quick else 500)
    args.own_updates = args.updates or (200 if args.quick else 500)
    args.apis = ["current", "one-trip"] if args.api == "both" else [args.api]
    if "one-trip" in args.apis:
        missing = [m for m in ONE_TRIP_METHODS if not hasattr(ContextHandle, m)]
        if missing:
            parser.error(f"--api one-trip: ContextHandle has no {', '.join(missing)} in this tree")
    return args


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark; with ``--json`` print the figures as one JSON document."""
    args = parse_args(argv)
    quiet = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    with quiet:
        report = run(args)
    if args.json:
        print(json.dumps(report))


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start a local Ray cluster, run the workloads, stop; the figures."""
    import logging

    import ray

    owned = not ray.is_initialized()  # a caller's cluster (a test's) is used as it is
    if owned:
        ray.init(
            address="local",
            log_to_driver=False,
            logging_level=logging.WARNING,
            include_dashboard=False,
        )
    bench = Bench(args)
    bench.say(f"bench_contention: {testbed.describe(bench.report['machine'])}")
    bench.say(
        f"Ray {ray.__version__}; handle API: {args.api}; SQLite {sqlite3.sqlite_version} "
        "(WAL, synchronous=FULL, one process per writer)"
    )
    bench.say()
    try:
        bench.run()
    finally:
        bench.close()
        if owned:
            ray.shutdown()
    return bench.report


if __name__ == "__main__":
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    main()
