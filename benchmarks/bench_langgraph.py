"""The lost-update workload on LangGraph stores: MorphzStore beside LangGraph's own.

W writer threads each make R read-modify-writes of one shared item: read it,
append a token to its list, put it back (on MorphzStore a lost race raises
``StoreConflict`` and the writer reads again). At the end the item should hold
all W x R tokens. Printed per store: successful updates per second, attempts
(puts tried), conflicts met, and tokens lost. The baselines run in the same
process, on the same workload: LangGraph's ``InMemoryStore`` and, when the
``langgraph-checkpoint-sqlite`` package is installed, its ``SqliteStore``.

Between its read and its write a writer yields the interpreter (``sleep(0)``),
standing for the agent's own work; every store gets the same yield. Timings are
printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import testbed  # first: puts this checkout on sys.path

from morphz.integrations.langgraph import MorphzStore, StoreConflict
from service.store import open_context

NS = ("bench", "shared")
KEY = "tokens"


def writer(store: Any, number: int, rounds: int, counts: list[int]) -> None:
    """*rounds* read-modify-writes of the shared item; counts attempts and conflicts."""
    for i in range(rounds):
        while True:
            item = store.get(NS, KEY)
            tokens = list(item.value["tokens"]) if item is not None else []
            time.sleep(0)
            counts[0] += 1
            try:
                store.put(NS, KEY, {"tokens": [*tokens, f"w{number}-{i}"]})
                break
            except StoreConflict:
                counts[1] += 1


def run(store_for: Callable[[int], Any], writers: int, rounds: int) -> dict[str, Any]:
    """One run of the workload; its figures."""
    store_for(-1).put(NS, KEY, {"tokens": []})
    counts = [[0, 0] for _ in range(writers)]
    threads = [
        threading.Thread(target=writer, args=(store_for(w), w, rounds, counts[w]))
        for w in range(writers)
    ]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - start
    item = store_for(-1).get(NS, KEY)
    kept = set(item.value["tokens"]) if item is not None else set()
    total = writers * rounds
    return {
        "writers": writers,
        "rounds": rounds,
        "seconds": round(seconds, 3),
        "updates_per_s": round(total / seconds, 1),
        "attempts": sum(c[0] for c in counts),
        "conflicts": sum(c[1] for c in counts),
        "tokens_expected": total,
        "tokens_kept": len(kept),
        "tokens_lost": total - len(kept),
        "lost_pct": round(100 * (total - len(kept)) / total, 1),
    }


@contextmanager
def morphz_store(parent: str, sync: bool) -> Iterator[Callable[[int], Any]]:
    """One embedded context; one MorphzStore per writer (a store is per process too)."""
    where = tempfile.mkdtemp(prefix="bench-langgraph-", dir=parent)
    ctx = open_context(where, "bench", sync=sync)
    stores: dict[int, MorphzStore] = {}
    try:
        yield lambda w: stores.setdefault(w, MorphzStore(ctx))
    finally:
        ctx.close()
        shutil.rmtree(where, ignore_errors=True)


@contextmanager
def memory_store() -> Iterator[Callable[[int], Any]]:
    from langgraph.store.memory import InMemoryStore

    store = InMemoryStore()
    yield lambda w: store


@contextmanager
def sqlite_store(parent: str) -> Iterator[Callable[[int], Any]]:
    from langgraph.store.sqlite import SqliteStore

    where = tempfile.mkdtemp(prefix="bench-langgraph-sqlite-", dir=parent)
    with SqliteStore.from_conn_string(os.path.join(where, "store.db")) as store:
        store.setup()
        yield lambda w: store
    shutil.rmtree(where, ignore_errors=True)


def sqlite_installed() -> bool:
    try:
        import langgraph.store.sqlite  # noqa: F401
    except ImportError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="8 writers x 60 (default 8 x 500)")
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--no-sync", action="store_true", help="MorphzStore without fsync")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--dir", default=None, help="where scratch stores go")
    args = parser.parse_args(argv)
    rounds = args.rounds or (60 if args.quick else 500)
    parent = args.dir or testbed.scratch_parent()
    sync = not args.no_sync

    figures: dict[str, Any] = {"machine": testbed.machine(parent), "sync": sync}
    with memory_store() as stores:
        figures["InMemoryStore"] = run(stores, args.writers, rounds)
    if sqlite_installed():
        with sqlite_store(parent) as stores:
            figures["SqliteStore"] = run(stores, args.writers, rounds)
    else:
        figures["SqliteStore"] = None
    with morphz_store(parent, sync) as stores:
        figures["MorphzStore"] = run(stores, args.writers, rounds)

    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    print(testbed.describe(figures["machine"]))
    print(
        f"lost-update workload: {args.writers} writers x {rounds} read-modify-writes of one key"
        f" (MorphzStore {'fsync per commit' if sync else 'no fsync'})"
    )
    print(f"{'store':<14} {'updates/s':>10} {'attempts':>9} {'conflicts':>9} {'lost':>14}")
    for name in ("MorphzStore", "InMemoryStore", "SqliteStore"):
        f = figures[name]
        if f is None:
            print(f"{name:<14} (not installed: langgraph-checkpoint-sqlite)")
            continue
        lost = f"{f['tokens_lost']} ({f['lost_pct']} %)"
        print(
            f"{name:<14} {f['updates_per_s']:>10.1f} {f['attempts']:>9} {f['conflicts']:>9}"
            f" {lost:>14}"
        )
    mz, mem = figures["MorphzStore"], figures["InMemoryStore"]
    speed = testbed.ratio(mz["updates_per_s"], mem["updates_per_s"])
    print(f"MorphzStore / InMemoryStore updates/s: {speed:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
