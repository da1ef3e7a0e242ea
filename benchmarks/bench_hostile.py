"""Hostile bytes at the doors of a context: each decoder's time at two sizes, beside benign input.

Three doors, each timed in CPU seconds of this process (best of a few calls, so a
busy machine moves the figures less than wall time would), with the load average:

* the transaction text (:func:`protocol.txlang.parse_tx`): hostile texts (runs of
  ``(``, ``)``, ``"``, comments, escapes, tiny atoms) at *n* and *4n* characters,
  beside a benign transaction of the same size; a linear reader takes about 4× as
  long at 4n, a quadratic one 16×;
* the msgpack wire form (:func:`protocol.txwire.submitted_from_msgpack`): hostile
  payloads (empty arrays, one-key maps, a body of tiny atoms) at two sizes, beside a
  benign payload of the same size (one long transaction text);
* field edits on one frame (a real LMDB store): one ``set`` of a frame of many fields
  beside 64 ``set`` of it in one transaction (each edit reuses the body's field index,
  so 64 cost about what one does), and 1,024 of them, refused ``work_limit`` after
  counting their work (they held the writer for minutes before that bound).

    .venv/bin/python benchmarks/bench_hostile.py [--quick] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import testbed  # first: puts this checkout on sys.path

from protocol.errors import MorphzError
from protocol.txlang import parse_tx
from protocol.txwire import submitted_from_msgpack
from service.store import open_context


def cpu(fn: Callable[[], Any], repeat: int) -> tuple[float, str]:
    """Best CPU seconds of *repeat* calls of *fn*, and how the last call ended."""
    best, outcome = float("inf"), "ok"
    for _ in range(repeat):
        start = time.process_time()
        try:
            fn()
            outcome = "ok"
        except MorphzError as e:
            outcome = e.code
        best = min(best, time.process_time() - start)
    return best, outcome


def tx_of(inner: str) -> str:
    return f"(context-tx (base-version 1) (derive a {inner}))"


TEXTS: dict[str, Callable[[int], str]] = {
    "benign fields": lambda n: tx_of("".join(f"(k{i:07d} v)" for i in range(n // 13))),
    "open parens": lambda n: "(" * n,
    "close parens": lambda n: ")" * n,
    "quotes": lambda n: '"' * n,
    "comments": lambda n: ";x\n" * (n // 3),
    "escapes \\n": lambda n: tx_of('"' + "\\n" * (n // 2) + '"'),
    "escapes \\u": lambda n: tx_of('"' + "\\u4e00" * (n // 6) + '"'),
    "tiny atoms": lambda n: tx_of("(" + " x" * (n // 2) + ")"),
}


def mp(body: bytes) -> bytes:
    return bytes([1]) + body


def array(count: int, item: bytes) -> bytes:
    return mp(bytes([0xDD]) + struct.pack(">I", count) + item * count)


def benign_payload(size: int) -> bytes:
    import msgpack

    doc = {"base_version": 1, "text": "r" * size, "ops": [{"op": "protect", "id": "a"}]}
    return mp(msgpack.packb(doc))


def atoms_payload(size: int) -> bytes:
    import msgpack

    doc = {"base_version": 1, "ops": [{"op": "derive", "id": "a", "body": ["x"] * (size // 2)}]}
    return mp(msgpack.packb(doc))


PAYLOADS: dict[str, Callable[[int], bytes]] = {
    "benign text": benign_payload,
    "empty arrays": lambda n: array(n, b"\x90"),
    "one-key maps": lambda n: array(n // 4, b"\x81\xa1k\xc0"),
    "body of atoms": atoms_payload,
}


def grow(
    name: str, make: Callable[[int], Any], decode: Callable[[Any], Any], n: int
) -> dict[str, Any]:
    small, outcome = cpu(lambda: decode(make(n)), 3)
    large, _ = cpu(lambda: decode(make(4 * n)), 2)
    return {"case": name, "n": n, "small_ms": small * 1e3, "large_ms": large * 1e3,
            "ratio": large / small if small > 0 else 0.0, "outcome": outcome}  # fmt: skip


def edits(fields: int) -> list[dict[str, Any]]:
    body = "".join(f"(a{i} x)" for i in range(fields))
    out = []
    with tempfile.TemporaryDirectory(dir=testbed.scratch_parent()) as root:
        with open_context(Path(root), "bench", create=True) as ctx:
            version = ctx.commit(f"(context-tx (base-version 0) (derive f {body}))").version
            for count in (1, 64, 1024):
                text = f"(context-tx (base-version {version}) " + "(set f (a1 y))" * count + ")"
                start = time.process_time()
                receipt = ctx.commit(text)
                took = time.process_time() - start
                version = receipt.version
                code = receipt.errors[0].code if receipt.errors else receipt.status
                out.append({"fields": fields, "edits": count, "ms": took * 1e3, "outcome": code})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    n_text = 200_000 if args.quick else 1_000_000
    n_wire = 62_500 if args.quick else 250_000  # 4n stays within a container's 1 Mi items
    fields = 50_000 if args.quick else 200_000
    load_before = os.getloadavg()[0]
    texts = [grow(k, f, parse_tx, n_text) for k, f in TEXTS.items()]
    wires = [grow(k, f, submitted_from_msgpack, n_wire) for k, f in PAYLOADS.items()]
    edit_rows = edits(fields)
    load_after = os.getloadavg()[0]
    report = {"load": [load_before, load_after], "texts": texts, "payloads": wires,
              "edits": edit_rows, "machine": testbed.machine(testbed.scratch_parent())}  # fmt: skip
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"load average {load_before:.2f} before, {load_after:.2f} after (1 min)")
    for title, rows, unit in (("parse_tx", texts, "chars"), ("msgpack", wires, "bytes")):
        print(f"\n{title}: CPU ms at n and 4n {unit} (linear: about 4x)")
        for r in rows:
            print(f"  {r['case']:16s} n={r['n']:>9,} {r['small_ms']:9.1f} {r['large_ms']:9.1f}"
                  f"  x{r['ratio']:5.1f}  {r['outcome']}")  # fmt: skip
    print(f"\nfield edits of one frame of {fields:,} fields, one transaction each (CPU ms)")
    for r in edit_rows:
        print(f"  {r['edits']:5d} set  {r['ms']:9.1f}  {r['outcome']}")


if __name__ == "__main__":
    main()
