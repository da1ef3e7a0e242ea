"""A follower 1,000 commits behind: caught up from the primary's retained log, beside a
snapshot, in the same run.

A primary (:class:`storage.replication.ReplicatedStore` over a real LMDB store, fsync
on) holds a context of ``--frames`` frames (a long-running agent's memory); two
followers (real LMDB stores, fsync on) hold the same. Both are cut off while the
primary commits ``--behind`` ordinary commits (one derive each, one batch each). Then:

* **log**: what the primary's replicator does for a follower whose gap its log still
  holds — the tail after the follower's last batch
  (:meth:`~storage.replication.ReplicatedStore.tail`), sent in messages of at most
  8 MiB (:meth:`~storage.replication.Follower.catch_up`: every chained MAC checked,
  held durably in one write, applied);
* **snapshot**: what it does otherwise — a compact copy of the primary's store
  (:func:`~storage.replication.snapshot`), installed over the follower's
  (:func:`~storage.replication.install`: written, synced, renamed) and reopened.

Each round measures both on the same gap (wall seconds, in-process: the bytes a
snapshot moves between nodes — the whole store, against the log's batches — are
not counted, so the snapshot's real cost is higher still). Timings are printed,
never asserted.

    .venv/bin/python benchmarks/bench_catchup.py [--quick] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import testbed  # first: puts this checkout on sys.path

from actors.cluster.replication import CATCH_UP_BYTES, chunk_batches
from service.context import Context
from storage import LmdbStore
from storage.replication import Follower, ReplicatedStore, install, snapshot
from storage.replication.codec import control_mac, opened

KEY = bytes(range(32))


class Cluster:
    """A primary and two followers in one process; ``cut`` drops batches on the way."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.primary = LmdbStore.open(root / "p" / "c")
        self.replicas = [LmdbStore.open(root / f"f{i}" / "c") for i in range(2)]
        self.followers = [Follower(r, key=KEY) for r in self.replicas]
        self.cut = False
        self.store = ReplicatedStore(self.primary, epoch=0, ship=self.ship, key=KEY, retain=4096)
        self.store.confirm = self.confirm
        self.ctx = Context(self.store, name="c")

    def ship(self, seq: int, data: bytes) -> None:
        if not self.cut:
            for f in self.followers:
                f.receive(data)

    def confirm(self, acked: int) -> None:
        if not self.cut:
            for f in self.followers:
                f.confirm(acked)

    def reopen(self, i: int) -> None:
        self.replicas[i] = LmdbStore.open(self.root / f"f{i}" / "c")
        self.followers[i] = Follower(self.replicas[i], key=KEY)

    def close(self) -> None:
        for s in (self.primary, *self.replicas):
            s.close()


def fill(c: Cluster, frames: int) -> None:
    """*frames* frames of ~300 characters, 100 per commit."""
    text = "memory of a long-running agent " * 10
    for start in range(0, frames, 100):
        ops = " ".join(f'(derive base/{i} (t "{text}{i}"))' for i in range(start, start + 100))
        c.ctx.submit(f"(context-tx (base-version {c.ctx.version()}) {ops})", client_id=f"b{start}")


def by_log(c: Cluster) -> float:
    f = c.followers[0]
    started = time.perf_counter()
    batches = c.store.tail(f.held_seq, f.head)
    assert batches is not None, "the retained log does not reach the follower"
    epoch, acked = c.store.state.epoch, c.store.acked
    for chunk in chunk_batches(batches):
        mac = control_mac(KEY, "catch_up", epoch, acked, opened(chunk[-1])[0])
        f.catch_up(epoch, acked, chunk, mac)
    seconds = time.perf_counter() - started
    assert f.state.seq == c.store.state.seq
    return seconds


def by_snapshot(c: Cluster) -> tuple[float, int]:
    started = time.perf_counter()
    data, _ = snapshot(c.primary)
    c.replicas[1].close()
    install(str(c.root / "f1" / "c"), data)
    c.reopen(1)
    seconds = time.perf_counter() - started
    assert c.followers[1].state.seq == c.store.state.seq
    return seconds, len(data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run")
    parser.add_argument("--frames", type=int, default=None)
    parser.add_argument("--behind", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    frames = args.frames if args.frames is not None else (20000 if args.quick else 50000)
    rounds = args.rounds if args.rounds is not None else (2 if args.quick else 3)
    out: dict[str, Any] = {"frames": frames, "behind": args.behind, "rounds": []}
    with tempfile.TemporaryDirectory(dir=testbed.scratch_parent()) as tmp:
        facts = testbed.machine(tmp)
        c = Cluster(Path(tmp))
        try:
            fill(c, frames)
            for r in range(rounds):
                c.cut = True
                for i in range(args.behind):
                    c.ctx.submit(
                        f"(context-tx (base-version {c.ctx.version()}) (derive r{r}/n{i} (i {i})))",
                        client_id=f"r{r}-{i}",
                    )
                log_bytes = sum(map(len, c.store.tail(c.followers[0].held_seq,
                                                      c.followers[0].head) or []))  # fmt: skip
                log_s = by_log(c)
                snap_s, snap_bytes = by_snapshot(c)
                c.cut = False
                out["rounds"].append(
                    {
                        "log_s": log_s,
                        "snapshot_s": snap_s,
                        "speedup": snap_s / log_s,
                        "log_bytes": log_bytes,
                        "snapshot_bytes": snap_bytes,
                    }
                )
        finally:
            c.close()
    out["machine"] = facts
    out["median_speedup"] = statistics.median(r["speedup"] for r in out["rounds"])
    out["message_bytes"] = CATCH_UP_BYTES
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(testbed.describe(facts))
    print(f"context of {frames} frames; follower {args.behind} commits behind")
    print(
        f"{'round':>5} {'log s':>8} {'snapshot s':>11} {'speedup':>8} {'log MB':>7} {'snap MB':>8}"
    )
    for i, r in enumerate(out["rounds"]):
        print(
            f"{i:>5} {r['log_s']:>8.3f} {r['snapshot_s']:>11.3f} {r['speedup']:>7.1f}x"
            f" {r['log_bytes'] / 1e6:>7.2f} {r['snapshot_bytes'] / 1e6:>8.1f}"
        )
    print(f"median speedup {out['median_speedup']:.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
