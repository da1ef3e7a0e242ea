"""What search morphology costs: the lexical index with and without Snowball stems, one run.

The corpora and queries of ``bench_search.py`` (STATE-Bench trajectories when
``--trajectories DIR`` or ``MORPHZ_TRAJECTORIES`` names them; the synthetic
English/Chinese/mixed corpus of ``--events`` events, default 100,000,
``--quick`` 20,000). Each corpus is written into two contexts; one index is
built with ``languages=()`` (no stemming: the baseline) and one with
``languages=("english",)`` (the default). Figures per index:

* **rebuild** docs/s: a full :meth:`LexicalIndex.rebuild`, best of
  ``--rebuilds`` alternating runs (wall time and CPU time);
* **incremental** docs/s: the last 10% of the corpus applied from the outbox in
  batches of 1,000;
* **search** p50/p99 (wall and CPU) of top-10 searches with snippets, the two
  indexes queried alternately per query so drift hits both; recall@10 as
  ``bench_search.py`` defines it (these queries are exact word windows and
  markers: they show what stems cost, not what they find — the dev set in
  ``bench_search.py --dev-set`` measures that);
* index size.

Timings are printed, never asserted; CPU time is printed beside wall time
because other work on a shared machine inflates wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import bench_search
import testbed  # first: puts this checkout on sys.path

from harness.loadtest.trajectories import NoTrajectories, trajectories_dir
from service.store import Store
from storage.search.index import LexicalIndex

LANGUAGES: dict[str, tuple[str, ...]] = {"none": (), "english": ("english",)}


class Side:
    """One context holding the corpus and its index built for one language list."""

    def __init__(self, root: Path, name: str, docs: list[tuple[str, str]], bulk: int) -> None:
        self.name = name
        self.docs = docs
        self.bulk = bulk
        self.ctx = Store(root / name).open("bench", sync=False)
        base = time.time() - len(docs)
        for lo in range(0, bulk, 1000):  # a call records at most 1,024 observations
            self.ctx.observe_many(
                [
                    {"kind": k, "text": t, "session": "main", "time": base + lo + j}
                    for j, (k, t) in enumerate(docs[lo : min(bulk, lo + 1000)])
                ]
            )
        self.index = LexicalIndex.for_backend(self.ctx.backend, languages=LANGUAGES[name])
        self.dir = root / name / "bench" / "index"
        self.rebuilds: list[tuple[float, float]] = []

    def rebuild(self) -> None:
        c0, t0 = time.process_time(), time.perf_counter()
        self.index.rebuild()
        self.rebuilds.append((time.perf_counter() - t0, time.process_time() - c0))

    def incremental(self) -> dict[str, float]:
        base = time.time()
        rest = self.docs[self.bulk :]
        for lo in range(0, len(rest), 1000):
            self.ctx.observe_many(
                [
                    {"kind": k, "text": t, "session": "main", "time": base + lo + j}
                    for j, (k, t) in enumerate(rest[lo : lo + 1000])
                ]
            )
        c0, t0 = time.process_time(), time.perf_counter()
        self.index.catch_up(batch=1000)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        return {
            "docs": len(rest),
            "docs_per_s": round(len(rest) / max(wall, 1e-9)),
            "cpu_docs_per_s": round(len(rest) / max(cpu, 1e-9)),
        }

    def search(self, words: list[str]) -> list[int]:
        result = self.index.search(" ".join(words), limit=10)
        return [int(h.id[2:]) for h in result.hits if h.id.startswith("@e")]

    def close(self) -> None:
        self.index.close()
        self.ctx.close()


def _dir_mib(path: Path) -> float:
    return round(sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20, 1)


def run_corpus(
    root: Path,
    docs: list[tuple[str, str]],
    queries: list[tuple[str, list[str], set[int]]],
    rebuilds: int,
    rounds: int,
) -> dict[str, Any]:
    bulk = len(docs) - len(docs) // 10
    sides = [Side(root, name, docs, bulk) for name in LANGUAGES]
    try:
        for _ in range(rebuilds):
            for side in sides:
                side.rebuild()
        out: dict[str, Any] = {"documents": len(docs), "queries": len(queries)}
        for side in sides:
            wall = min(w for w, _ in side.rebuilds)
            cpu = min(c for _, c in side.rebuilds)
            out[side.name] = {
                "rebuild_docs_per_s": round(bulk / max(wall, 1e-9)),
                "rebuild_cpu_docs_per_s": round(bulk / max(cpu, 1e-9)),
            }
        for side in sides:
            out[side.name]["incremental"] = side.incremental()
            out[side.name]["index_mib"] = _dir_mib(side.dir)
        figures = bench_search.measure(sides, queries, rounds)
        for side in sides:
            out[side.name]["search"] = figures[side.name]
        return out
    finally:
        for side in sides:
            side.close()


def print_report(name: str, doc: dict[str, Any]) -> None:
    print(
        f"\n== {name}: {doc['documents']:,} documents, {doc['queries']} queries "
        f"(load {os.getloadavg()[0]:.2f}) =="
    )
    print(
        f"{'stems':<9}{'rebuild/s':>11}{'(cpu)':>9}{'incr/s':>9}{'(cpu)':>9}{'MiB':>7}"
        f"{'p50 ms':>9}{'(cpu)':>7}{'p99 ms':>9}{'(cpu)':>7}   recall@10"
    )
    for side in LANGUAGES:
        f = doc[side]
        s = f["search"]
        recall = "  ".join(f"{k} {v:.3f}" for k, v in s["recall_at_10"].items())
        print(
            f"{side:<9}{f['rebuild_docs_per_s']:>11,}{f['rebuild_cpu_docs_per_s']:>9,}"
            f"{f['incremental']['docs_per_s']:>9,}{f['incremental']['cpu_docs_per_s']:>9,}"
            f"{f['index_mib']:>7}{s['p50_ms']:>9.2f}{s['cpu_p50_ms']:>7.2f}"
            f"{s['p99_ms']:>9.2f}{s['cpu_p99_ms']:>7.2f}   {recall}"
        )
    base, stem = doc["none"], doc["english"]
    print(
        "english / none: rebuild cpu "
        f"{stem['rebuild_cpu_docs_per_s'] / base['rebuild_cpu_docs_per_s']:.2f}×, "
        f"search cpu p50 {stem['search']['cpu_p50_ms'] / base['search']['cpu_p50_ms']:.2f}×, "
        f"size {stem['index_mib'] / max(base['index_mib'], 0.1):.2f}×"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="20,000 synthetic events")
    parser.add_argument("--json", action="store_true", help="print one JSON document of figures")
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    parser.add_argument("--trajectories", default=None, help="STATE-Bench trajectory directory")
    parser.add_argument("--events", type=int, default=None, help="synthetic events")
    parser.add_argument("--queries", type=int, default=200, help="queries per corpus")
    parser.add_argument("--rebuilds", type=int, default=3, help="rebuilds per index (best kept)")
    parser.add_argument("--rounds", type=int, default=2, help="passes over the queries")
    args = parser.parse_args(argv)
    events = args.events or (20_000 if args.quick else 100_000)
    try:
        trajectories: Path | None = trajectories_dir(args.trajectories)
    except NoTrajectories:
        trajectories = None

    parent = args.dir or testbed.scratch_parent()
    root = Path(tempfile.mkdtemp(prefix="morphz-bench-stem-", dir=parent))
    report: dict[str, Any] = {"machine": testbed.machine(str(root)), "events": events}
    if not args.json:
        print(testbed.describe(report["machine"]))
    try:
        if trajectories is not None:
            docs = bench_search.state_bench_docs(trajectories)
            queries = bench_search.state_bench_queries(docs, args.queries)
            report["state_bench"] = run_corpus(
                root / "sb", docs, queries, args.rebuilds, args.rounds
            )
        elif not args.json:
            print("STATE-Bench: no trajectory directory given (--trajectories); skipped")
        corpus = bench_search.Synthetic(events)
        kinds = ("tool_result", "user_message", "external")
        sdocs = [(kinds[i % 3], text) for i, text in enumerate(corpus.docs)]
        squeries = corpus.queries(args.queries)
        del corpus
        report["synthetic"] = run_corpus(root / "syn", sdocs, squeries, args.rebuilds, args.rounds)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(report))
        return
    for key, name in (("state_bench", "STATE-Bench"), ("synthetic", "synthetic")):
        if key in report:
            print_report(name, report[key])


if __name__ == "__main__":
    main()
