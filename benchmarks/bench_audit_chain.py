"""The cost of the audit chain: appending audit entries with the HMAC chain beside without it.

Two figures, each beside its baseline measured in the same run, rounds interleaved:

* **rule**: :func:`protocol.governance.append_audit` on an in-memory table,
  one entry per call (the denial path) and 64 per call, with an audit key
  (every row MAC'd and chained) beside ``key=None`` (the same rule unchained)
  → µs per entry (CPU time);
* **durable**: ``record_audit`` through a real LMDB store (one fsync'd write per
  call, one entry each) with the chain beside the store's writer with the chain
  switched off → µs per entry (wall time: the fsync is the cost).

And the time ``verify_chain`` takes per row. Timings are printed, never asserted.

    .venv/bin/python benchmarks/bench_audit_chain.py [--quick] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import testbed  # first: puts this checkout on sys.path

import storage.lmdb.views as lmdb_views
from protocol.governance import append_audit, audit_entry, verify_chain
from service.governance import record_audit
from storage import LmdbStore

KEY = bytes(range(32))


class Rows:
    """A dict-backed audit table (what a store offers inside a write)."""

    def __init__(self) -> None:
        self.rows: dict[int, dict[str, Any]] = {}
        self.st: dict[str, Any] | None = None

    def get(self, seq: int) -> dict[str, Any] | None:
        return self.rows.get(seq)

    def put(self, seq: int, record: dict[str, Any]) -> None:
        self.rows[seq] = record

    def delete(self, seq: int) -> None:
        del self.rows[seq]

    def after(self, seq: int) -> Iterator[tuple[int, dict[str, Any]]]:
        return ((n, r) for n, r in sorted(self.rows.items()) if n > seq)

    def state(self) -> dict[str, Any] | None:
        return self.st

    def set_state(self, state: dict[str, Any]) -> None:
        self.st = state


def entry(i: int) -> dict[str, Any]:
    return audit_entry(
        "frame",
        "read",
        holder=f"agent-{i % 50}",
        allowed=i % 3 != 0,
        why=f"agent-{i % 50} holds no read grant on context 'payroll' of tenant 'acme'",
        at=1000.0 + i,
        context="payroll",
        tenant="acme",
    )


def rule_cost(n: int, batch: int, key: bytes | None) -> float:
    rows = Rows()
    items = [entry(i) for i in range(n)]
    t0 = time.process_time()
    for i in range(0, n, batch):
        append_audit(rows, items[i : i + batch], now=0.0, key=key)
    return (time.process_time() - t0) / n * 1e6


def durable_cost(root: str, n: int, chained: bool) -> float:
    real = lmdb_views.audit_key
    if not chained:
        lmdb_views.audit_key = lambda: None  # type: ignore[assignment,return-value]
    path = tempfile.mkdtemp(dir=root)
    store = LmdbStore.open(os.path.join(path, "ctx"))
    try:
        t0 = time.perf_counter()
        for i in range(n):
            record_audit(store, [entry(i)])
        return (time.perf_counter() - t0) / n * 1e6
    finally:
        store.close()
        lmdb_views.audit_key = real
        shutil.rmtree(path, ignore_errors=True)


def interleaved(rounds: int, on: Callable[[], float], off: Callable[[], float]) -> dict[str, Any]:
    ons, offs = [], []
    for _ in range(rounds):
        ons.append(on())
        offs.append(off())
    return {
        "chained_us": statistics.median(ons),
        "unchained_us": statistics.median(offs),
        "ratio": statistics.median(a / b for a, b in zip(ons, offs, strict=True)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer entries and rounds")
    ap.add_argument("--json", action="store_true", help="one JSON document of figures")
    ap.add_argument("--dir", help="where the scratch stores go")
    args = ap.parse_args()
    n, durable_n, rounds = (2_000, 50, 3) if args.quick else (20_000, 300, 5)
    root = tempfile.mkdtemp(prefix="bench-audit-", dir=args.dir or testbed.scratch_parent())
    try:
        figures: dict[str, Any] = {"machine": testbed.machine(root)}
        for batch in (1, 64):
            figures[f"rule_batch_{batch}"] = interleaved(
                rounds,
                lambda b=batch: rule_cost(n, b, KEY),
                lambda b=batch: rule_cost(n, b, None),
            )
        figures["durable_single"] = interleaved(
            rounds,
            lambda: durable_cost(root, durable_n, True),
            lambda: durable_cost(root, durable_n, False),
        )
        rows = Rows()
        append_audit(rows, [entry(i) for i in range(n)], now=0.0, key=KEY)
        listed = sorted(rows.rows.items())
        t0 = time.process_time()
        report = verify_chain(listed, [KEY])
        figures["verify_us_per_row"] = (time.process_time() - t0) / len(listed) * 1e6
        figures["verify_ok"] = report.ok
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(testbed.describe(figures["machine"]))
    for name in ("rule_batch_1", "rule_batch_64", "durable_single"):
        f = figures[name]
        print(
            f"{name:<16} chained {f['chained_us']:8.1f} us/entry   unchained "
            f"{f['unchained_us']:8.1f} us/entry   ratio {f['ratio']:.2f}"
        )
    print(f"verify_chain     {figures['verify_us_per_row']:.1f} us/row (ok={figures['verify_ok']})")


if __name__ == "__main__":
    main()
