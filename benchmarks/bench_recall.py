"""Graph recall latency: a full 128-node page at depth 4 in a 100,000-frame graph.

The graph (``--quick``: 20,000 frames) is written once through
:meth:`storage.LmdbStore.transact` with :class:`protocol.view.Changeset`
batches (``sync=False``): frame ``k`` cites its own tool-result event and
three random frames among the 5,000 before it, and ``follows`` frame ``k-1``,
so the ancestors of any late frame branch out and depth 4 holds far more than
128 nodes. It is cached under ``--dir`` with a marker, so reruns skip the build.

For each of many random start frames, one round measures, in random order and
each inside its own read snapshot:

* ``recall``            — :func:`protocol.recall.recall` of page 1: depth 4,
  ancestors, ``max_nodes=128``, bodies included, events as previews;
* ``recall, no bodies`` — the same with ``include_bodies=false``;
* baseline ``view reads`` — ``view.frame(id)`` / ``view.event(seq)`` of exactly
  the nodes that page returned (decoding included, no traversal);
* baseline ``raw gets``   — a bare LMDB ``txn.get`` loop over the same keys.

It prints p50 / p99 / mean per kind and the ratios of the medians. Aim from the
issue: recall p50 ≤ 10 ms. Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import testbed  # first: puts this checkout on sys.path

from protocol.forms import Symbol
from protocol.recall import RecallPage, RecallRequest, recall
from protocol.state import Event, Frame, Meta, estimate_tokens, preview_of
from protocol.view import Changeset, ReadView
from storage import LmdbStore
from storage.lmdb.records import STORE_FORMAT, _enc, _u64

BUILD_FORMAT = 1
"""Bump when the generated graph changes, so cached stores are rebuilt."""
FRAMES_PER_WRITE = 10_000
WINDOW = 5_000
"""A frame cites frames among the WINDOW before it."""
FRAME_SOURCES = 3
AIM_P50_MS = 10.0
DEPTH = 4
PAGE = 128


def frame_id(k: int) -> str:
    return f"note/{k}"


def event_id(k: int) -> str:
    return f"ev:{k:020x}"


def build(path: str, frames: int, log: Any) -> float:
    """Write the graph into a new store at *path*; seconds taken."""
    rng = random.Random(20240607)
    start = time.perf_counter()
    store = LmdbStore.open(path, sync=False, map_size=1 << 30)
    now = time.time() - frames
    try:
        for lo in range(0, frames, FRAMES_PER_WRITE):
            hi = min(frames, lo + FRAMES_PER_WRITE)
            cs = Changeset()
            for k in range(lo, hi):
                seq = k + 1
                text = f"[run {k}] collected 412 items; all passed; artefacts in build/{k}/ " * 3
                cs.events.append(
                    Event(
                        seq=seq,
                        id=event_id(k),
                        kind="tool_result",
                        session="main",
                        time=now + k,
                        size=len(text),
                        tokens=estimate_tokens(text),
                        preview=preview_of(text),
                        lifecycle="retired" if k % 3 else "active",
                        claimed_tick=k + 1,
                        retired_version=k + 1 if k % 3 else None,
                    )
                )
                cs.contents.append((seq, text))
                picked = rng.sample(range(max(0, k - WINDOW), k), min(FRAME_SOURCES, k))
                sources = (event_id(k), *(frame_id(j) for j in picked))
                fid = frame_id(k)
                cs.frames.append(
                    Frame(
                        id=fid,
                        revision=1 + k % 3,
                        body=(
                            (Symbol("status"), Symbol("ok")),
                            (Symbol("score"), k % 97),
                            (Symbol("summary"), f"note {k}: build and tests green"),
                        ),
                        sources=sources,
                        lifecycle="retired" if k % 7 == 0 else "active",
                        created_version=k + 1,
                        updated_version=k + 1,
                    )
                )
                cs.cites_add.extend((s, fid) for s in sources)
                if k:
                    cs.rel_add.append((fid, "follows", frame_id(k - 1)))
            if hi == frames:
                cs.meta = Meta(version=frames, tick=frames + 1, next_seq=frames + 1, created=now)

            def write(view: Any, cs: Changeset = cs) -> None:
                view.apply(cs)

            store.transact(write)
            print(f"  built {hi:,} frames ({time.perf_counter() - start:.1f} s)", file=log)
    finally:
        store.close()
    return time.perf_counter() - start


def ensure_store(base: str, frames: int, log: Any) -> dict[str, Any]:
    """The store's path and facts, building it unless a finished build is cached."""
    root = os.path.join(base, f"recall-f{frames}")
    marker = os.path.join(root, "BUILT.json")
    wanted = {"frames": frames, "store_format": STORE_FORMAT, "build_format": BUILD_FORMAT}
    try:
        with open(marker, encoding="utf-8") as f:
            info = json.load(f)
        if {k: info.get(k) for k in wanted} == wanted:
            return {**info, "path": os.path.join(root, "ctx"), "cached": True}
    except (OSError, ValueError):
        pass
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    print(f"building {frames:,} frames and {frames:,} events in {root}", file=log)
    seconds = build(os.path.join(root, "ctx"), frames, log)
    info = {**wanted, "build_seconds": round(seconds, 1)}
    with open(marker, "w", encoding="utf-8") as f:
        json.dump(info, f)
    return {**info, "path": os.path.join(root, "ctx"), "cached": False}


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {
        "p50_ms": round(statistics.median(ordered) * 1e3, 3),
        "p99_ms": round(p99 * 1e3, 3),
        "mean_ms": round(statistics.fmean(ordered) * 1e3, 3),
    }


def measure(path: str, frames: int, samples: int, warmup: int, seed: int) -> dict[str, Any]:
    store = LmdbStore.open(path, sync=False)
    rng = random.Random(seed)
    lo = min(frames - 1, 4 * WINDOW) if frames > 4 * WINDOW else frames // 2
    starts = [rng.randrange(lo, frames) for _ in range(samples + warmup)]
    times: dict[str, list[float]] = {k: [] for k in KINDS}
    sizes: list[int] = []
    short = 0
    try:
        for i, k in enumerate(starts):
            bodies = RecallRequest(frame_id=frame_id(k), depth=DEPTH, max_nodes=PAGE)
            bare = bodies.model_copy(update={"include_bodies": False})
            page: RecallPage = store.read(lambda v, r=bodies: recall(v, r))
            if len(page.nodes) < PAGE:
                short += 1
            frame_keys = [_enc(n["id"], 400) for n in page.nodes if n["type"] == "frame"]
            event_seqs = [int(n["id"][2:]) for n in page.nodes if n["type"] == "event"]

            def run_recall(v: ReadView, r: RecallRequest = bodies) -> Any:
                return recall(v, r)

            def run_bare(v: ReadView, r: RecallRequest = bare) -> Any:
                return recall(v, r)

            def run_reads(v: ReadView, p: RecallPage = page) -> Any:
                for n in p.nodes:
                    if n["type"] == "frame":
                        v.frame(n["id"])
                    else:
                        v.event(int(n["id"][2:]))

            def run_raw(v: Any, fk: list[bytes] = frame_keys, es: list[int] = event_seqs) -> Any:
                txn, dbs = v._txn, v._db  # the store's own transaction: no decoding at all
                frames_db, events_db = dbs["frames"], dbs["events"]
                for key in fk:
                    txn.get(key, db=frames_db)
                for seq in es:
                    txn.get(_u64(seq), db=events_db)

            fns: dict[str, Callable[[Any], Any]] = {
                "recall": run_recall,
                "recall, no bodies": run_bare,
                "baseline: view reads": run_reads,
                "baseline: raw gets": run_raw,
            }
            order = list(fns)
            rng.shuffle(order)
            for kind in order:
                t0 = time.perf_counter()
                store.read(fns[kind])
                elapsed = time.perf_counter() - t0
                if i >= warmup:
                    times[kind].append(elapsed)
            if i >= warmup:
                sizes.append(len(json.dumps(page.to_dict())))
    finally:
        store.close()
    figures = {kind: summary(ts) for kind, ts in times.items()}
    base = figures["baseline: view reads"]["p50_ms"]
    raw = figures["baseline: raw gets"]["p50_ms"]
    for kind in KINDS:
        figures[kind]["x_view_reads"] = testbed.ratio(figures[kind]["p50_ms"], base)
        figures[kind]["x_raw_gets"] = testbed.ratio(figures[kind]["p50_ms"], raw)
    return {
        "figures": figures,
        "pages_short_of_128": short,
        "page_json_bytes_p50": int(statistics.median(sizes)),
    }


KINDS = ("recall", "recall, no bodies", "baseline: view reads", "baseline: raw gets")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="20,000 frames, 300 samples")
    parser.add_argument("--json", action="store_true", help="print one JSON document of figures")
    parser.add_argument("--dir", default=None, help="where the graph is built and cached")
    parser.add_argument("--frames", type=int, default=None, help="frames in the graph")
    parser.add_argument("--samples", type=int, default=None, help="random start frames timed")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    frames = args.frames or (20_000 if args.quick else 100_000)
    samples = args.samples or (300 if args.quick else 2_000)
    base = args.dir or os.path.join(testbed.scratch_parent(), "morphz-bench-recall")
    os.makedirs(base, exist_ok=True)
    log = sys.stderr if args.json else sys.stdout

    store = ensure_store(base, frames, log)
    facts = testbed.machine(base)
    result = measure(store["path"], frames, samples, warmup=max(20, samples // 20), seed=args.seed)
    doc = {
        "machine": facts,
        "graph": {
            "frames": frames,
            "events": frames,
            "build_seconds": store.get("build_seconds"),
            "cached": store["cached"],
        },
        "request": {"depth": DEPTH, "direction": "ancestors", "max_nodes": PAGE},
        "samples": samples,
        **result,
        "aim_p50_ms": AIM_P50_MS,
        "aim_met": result["figures"]["recall"]["p50_ms"] <= AIM_P50_MS,
    }
    if args.json:
        print(json.dumps(doc))
        return
    print(f"machine: {testbed.describe(facts)}")
    cached = " (cached)" if store["cached"] else ""
    print(
        f"graph: {frames:,} frames, {frames:,} events; built in "
        f"{store.get('build_seconds')} s{cached}"
    )
    print(
        f"request: depth {DEPTH}, ancestors, max_nodes {PAGE}; {samples} random start frames; "
        f"page JSON p50 {result['page_json_bytes_p50']:,} bytes; "
        f"pages short of 128 nodes: {result['pages_short_of_128']}"
    )
    print(f"{'':24} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'x reads':>8} {'x raw':>8}")
    for kind, f in result["figures"].items():
        print(
            f"{kind:24} {f['p50_ms']:8.3f} {f['p99_ms']:8.3f} {f['mean_ms']:8.3f} "
            f"{f['x_view_reads']:8.2f} {f['x_raw_gets']:8.2f}"
        )
    verdict = "met" if doc["aim_met"] else "missed"
    p50 = result["figures"]["recall"]["p50_ms"]
    print(f"aim: recall p50 <= {AIM_P50_MS} ms: {verdict} ({p50} ms)")


if __name__ == "__main__":
    main()
