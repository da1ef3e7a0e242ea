"""The cost of the MACs on replicated batches, beside the unMACed work, in the same run.

Real batches are made by a primary (:class:`storage.replication.ReplicatedStore`
over a real LMDB store, shipping in-process) for a run of ordinary commits, each
deriving a frame with a body of the given size. For each size, the per-batch
CPU time of (a) the baseline, re-encoding the batch
(:func:`~storage.replication.codec.encode_batch` of its decoded form, what the
primary does to ship it), (b) the MACs: sealing it chained to the batch before
(:func:`~storage.replication.codec.seal`, HMAC-SHA256 over the previous MAC and the
batch) plus the follower's check (:func:`~storage.replication.codec.unseal`) and the
watermark's control MAC (:func:`~storage.replication.codec.control_mac`, made by the
primary and checked by the follower), best of a few rounds of many batches; and
(c) the whole replicated commit as the primary and a follower do it in-process
(commit, seal, hold, apply; no fsync), per batch, for scale. Timings are printed,
never asserted.

    .venv/bin/python benchmarks/bench_batch_mac.py [--quick] [--json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import testbed  # first: puts this checkout on sys.path

from service.context import Context
from storage import LmdbStore
from storage.replication import Follower, ReplicatedStore, decode_batch, encode_batch
from storage.replication.codec import check_control, control_mac, opened, seal, unseal

KEY = bytes(range(32))


def batches(root: Path, body_chars: int, n: int) -> list[bytes]:
    """*n* real sealed batches of commits each deriving a frame of *body_chars* characters."""
    shipped: list[bytes] = []
    store = LmdbStore.open(root / "c", sync=False)
    try:
        ctx = Context(
            ReplicatedStore(store, epoch=0, ship=lambda s, d: shipped.append(d), key=KEY), name="c"
        )
        text = "x" * body_chars
        for i in range(n):
            ctx.submit(
                f'(context-tx (base-version {ctx.version()}) (derive f{i} (t "{text}")))',
                client_id=f"c{i}",
            )
    finally:
        store.close()
    return [opened(b)[1] for b in shipped]


def replicated_commit_us(root: Path, body_chars: int, n: int) -> float:
    """CPU µs per batch of committing on a primary and holding and applying on a follower
    (both real LMDB stores without fsync, shipping in-process), MACs included."""
    primary = LmdbStore.open(root / "p" / "c", sync=False)
    replica = LmdbStore.open(root / "f" / "c", sync=False)
    try:
        follower = Follower(replica, key=KEY)
        store = ReplicatedStore(primary, epoch=0, ship=lambda s, d: follower.receive(d), key=KEY)
        store.confirm = follower.confirm
        ctx = Context(store, name="c")
        text = "x" * body_chars
        start = time.process_time()
        for i in range(n):
            ctx.submit(
                f'(context-tx (base-version {ctx.version()}) (derive f{i} (t "{text}")))',
                client_id=f"c{i}",
            )
        return (time.process_time() - start) / n * 1e6
    finally:
        primary.close()
        replica.close()


def macs(body: bytes) -> None:
    """What the MACs add to one batch: the primary's chained seal and the follower's check,
    and the watermark message's MAC made and checked."""
    prev = body[:32].ljust(32, b"\0")
    unseal(seal(body, KEY, prev), KEY, prev)
    check_control(KEY, control_mac(KEY, "confirm", 0, len(body)), "confirm", 0, len(body))


def per_batch(fn: object, items: list[bytes], rounds: int) -> float:
    """Best CPU seconds per item of ``fn(item)`` over *rounds* passes."""
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        for item in items:
            fn(item)  # type: ignore[operator]
        best = min(best, (time.process_time() - start) / len(items))
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    n, rounds = (100, 3) if args.quick else (400, 5)
    rows = []
    with tempfile.TemporaryDirectory(dir=testbed.scratch_parent()) as tmp:
        facts = testbed.machine(tmp)
        for size in (64, 4096, 65536):
            real = batches(Path(tmp) / str(size), size, n)
            encode = per_batch(lambda b: encode_batch(decode_batch(b)), real, rounds)
            mac = per_batch(macs, real, rounds)
            whole = replicated_commit_us(Path(tmp) / f"r{size}", size, n)
            rows.append(
                {
                    "body_chars": size,
                    "batch_bytes": sum(map(len, real)) // len(real),
                    "encode_us": encode * 1e6,
                    "macs_us": mac * 1e6,
                    "ratio": mac / encode,
                    "replicated_commit_us": whole,
                    "macs_share": mac * 1e6 / whole,
                }
            )
    if args.json:
        print(json.dumps({"machine": facts, "rows": rows}, indent=2))
        return 0
    print(testbed.describe(facts))
    print(
        f"{'body':>7} {'batch B':>8} {'encode µs':>10} {'MACs µs':>8} {'ratio':>6}"
        f" {'replicated commit µs':>21} {'MAC share':>9}"
    )
    for r in rows:
        print(
            f"{r['body_chars']:>7} {r['batch_bytes']:>8} {r['encode_us']:>10.1f}"
            f" {r['macs_us']:>8.1f} {r['ratio']:>6.2f} {r['replicated_commit_us']:>21.1f}"
            f" {r['macs_share']:>9.1%}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
