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

Then the cost of the directory's **epoch certificates per promotion** (2 followers):
the directory signs 4 times (the fence, the chosen follower's seal, the new entry's
epoch certificate, the entry's GCS record) and members check 5 certificates (two
fences, the seal, the promotion, the other follower's snapshot install), with
Ed25519 (:mod:`storage.replication.epochs`, the public keys read from the environment
as on a node) beside the same counts of HMAC-SHA256 control MACs, the retired scheme,
measured in the same run.

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
from storage.replication import Follower, ReplicatedStore, decode_batch, encode_batch, epochs
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


SIGNS, CHECKS = 4, 5
"""Signatures the directory makes and certificates members check in one promotion."""


def promotion_us(rounds: int, n: int) -> dict[str, float]:
    """CPU µs of one promotion's epoch certificates: Ed25519 (this scheme) beside HMAC (the
    retired one), best of *rounds* passes of *n* promotions."""
    import os

    from protocol import capabilities
    from storage import keys

    seed = bytes(range(32))
    os.environ[keys.DIRECTORY_PUBLIC_KEYS_ENV] = capabilities.public_key(seed).hex()
    member = "morphz:c#f0@e0"

    def ed25519(epoch: int) -> None:
        made = (("fence", ""), ("seal", member), ("epoch", member), ("epoch", member))
        certs = [epochs.sign(seed, "c", epoch, p, m) for p, m in made]
        for cert, accept in ((certs[0], ("fence", "epoch")), (certs[0], ("fence", "epoch")),
                             (certs[1], ("seal",)), (certs[2], ("epoch",)),
                             (certs[2], ("epoch",))):  # fmt: skip
            epochs.check_epoch("c", epoch, cert, accept)

    def hmac_baseline(epoch: int) -> None:
        macs = [control_mac(KEY, "epoch", epoch) for _ in range(SIGNS)]
        for _ in range(CHECKS):
            check_control(KEY, macs[0], "epoch", epoch)

    def sign_only(epoch: int) -> None:
        epochs.sign(seed, "c", epoch, "epoch", member)

    cert = epochs.sign(seed, "c", 1, "epoch", member)

    def check_only(epoch: int) -> None:
        epochs.check_epoch("c", 1, cert, ("epoch",))

    items = list(range(1, n + 1))
    return {
        "ed25519_promotion_us": per_batch(ed25519, items, rounds) * 1e6,  # type: ignore[arg-type]
        "hmac_promotion_us": per_batch(hmac_baseline, items, rounds) * 1e6,  # type: ignore[arg-type]
        "ed25519_sign_us": per_batch(sign_only, items, rounds) * 1e6,  # type: ignore[arg-type]
        "ed25519_check_us": per_batch(check_only, items, rounds) * 1e6,  # type: ignore[arg-type]
    }


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
    promotion = promotion_us(rounds, n)
    if args.json:
        print(json.dumps({"machine": facts, "rows": rows, "promotion": promotion}, indent=2))
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
    p = promotion
    print(
        f"epoch certificates per promotion ({SIGNS} signed, {CHECKS} checked):"
        f" Ed25519 {p['ed25519_promotion_us']:.1f} µs, HMAC baseline"
        f" {p['hmac_promotion_us']:.1f} µs (one Ed25519 sign {p['ed25519_sign_us']:.1f} µs,"
        f" one member check {p['ed25519_check_us']:.1f} µs)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
