"""Diff and merge of a fork with many changed frames, beside a full fork of the same context.

A context ``main`` gets N frames (10,000; ``--quick``: 2,000), each a keyed body
``(status open) (owner a) (n i)``, committed 1,000 derives per transaction into
an LMDB store (``sync=False`` while building). It is forked (``alt``), every frame
of ``alt`` gets one field changed (``set``), and a tenth of them also get a
different field changed in ``main`` (so the merge has both-sided, compatible
changes to combine). Then, in the same run:

* **baseline**: a full fork of ``main`` (``Store.fork``: the log replayed into a
  new store), the cost of starting a branch;
* ``diff``: ``main.diff("alt")`` — every frame classified three ways;
* ``merge --dry-run``: the whole merge decided inside a write that is discarded;
* ``merge``: the real one, N frames in transactions of 1,024 operations, one
  durable write (``sync=True``).

Each is timed once (wall seconds, frames per second) and, separately, its peak
Python allocation is measured under ``tracemalloc`` (a second run of the same
work: a fork into another name, the diff again, the dry run), since tracing
slows the timed run. Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import testbed  # noqa: F401  (first: puts this checkout on sys.path)

from service.store import Store

BATCH = 1000


def build(root: str, n: int) -> Store:
    store = Store(root)
    with store.open("main", sync=False) as main:
        for start in range(0, n, BATCH):
            ops = " ".join(
                f"(derive f{i} (status open) (owner a) (n {i}))"
                for i in range(start, min(n, start + BATCH))
            )
            main.commit(f"(context-tx (base-version {main.version()}) {ops})")
    return store


def edit(store: Store, name: str, n: int, every: int, op: Callable[[int], str]) -> None:
    with store.open(name, sync=False) as ctx:
        ids = list(range(0, n, every))
        for start in range(0, len(ids), BATCH):
            ops = " ".join(op(i) for i in ids[start : start + BATCH])
            ctx.commit(f"(context-tx (base-version {ctx.version()}) {ops})")


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def peak(fn: Callable[[], Any]) -> float:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2,000 frames instead of 10,000")
    ap.add_argument("--frames", type=int, default=None, help="how many frames")
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    args = ap.parse_args()
    n = args.frames or (2_000 if args.quick else 10_000)
    root = tempfile.mkdtemp(prefix="bench-branches-", dir=args.dir or os.getcwd())
    try:
        store = build(os.path.join(root, "store"), n)
        fork_s, _ = timed(lambda: store.fork("main", "alt"))
        fork_mb = peak(lambda: store.fork("main", "alt2"))
        edit(store, "alt", n, 1, lambda i: f"(set f{i} (status done))")
        edit(store, "main", n, 10, lambda i: f"(set f{i} (owner b))")
        with store.open("main") as ctx:
            diff_s, d = timed(lambda: ctx.diff("alt"))
            diff_mb = peak(lambda: ctx.diff("alt"))
            dry_s, _ = timed(lambda: ctx.merge("alt", dry_run=True))
            dry_mb = peak(lambda: ctx.merge("alt", dry_run=True))
            merge_s, m = timed(lambda: ctx.merge("alt"))
            body = ctx.frame("f0")["body"]
        assert d["counts"]["changed"] == n, d["counts"]
        assert m["status"] == "merged" and len(m["applied"]) == n, m["status"]
        assert body == "(status done) (owner b) (n 0)", body
        figures = {
            "frames": n,
            "load_1min": os.getloadavg()[0],
            "fork_s": fork_s,
            "fork_peak_mb": fork_mb,
            "diff_s": diff_s,
            "diff_peak_mb": diff_mb,
            "merge_dry_run_s": dry_s,
            "merge_dry_run_peak_mb": dry_mb,
            "merge_s": merge_s,
            "merge_transactions": len(m["versions"]),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(figures))
        return
    load = figures["load_1min"]
    print(f"{n} frames, all changed in the fork, a tenth also in main (load {load:.2f})")
    print(f"{'':<22}{'seconds':>10}{'frames/s':>12}{'peak MB':>10}{'x fork':>8}")
    rows = [
        ("full fork (baseline)", fork_s, fork_mb),
        ("diff", diff_s, diff_mb),
        ("merge --dry-run", dry_s, dry_mb),
        ("merge", merge_s, None),
    ]
    for name, s, mb in rows:
        mem = f"{mb:>10.1f}" if mb is not None else f"{'-':>10}"
        print(f"{name:<22}{s:>10.2f}{n / s:>12,.0f}{mem}{s / fork_s:>8.2f}")
    print(f"merge wrote {figures['merge_transactions']} transactions in one durable write")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
