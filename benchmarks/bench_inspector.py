"""The inspector's graph page on a large context, beside the API call it wraps.

Builds a context of ``--frames`` frames (default 100,000; ``--quick`` 10,000) written by
transactions of ``--per-tx`` derives each (so the log has frames/per-tx versions), each
frame related to the previous one and every tenth to a hub of its transaction. Then, in
the same run, in rounds (so load drift hits every side alike), it times:

* **service**: ``service.inspection.graph`` on the open context (what the pages wrap);
* **json**: ``GET /inspect/api/c/big/graph`` (the page's JSON twin) over loopback HTTP
  from ``morphz inspect``'s app served by uvicorn, read with httpx;
* **page**: ``GET /inspect/c/big/graph``, the HTML page (data and rendering);
* the same three **as of** the middle version (the version slider: relations rebuilt
  from the log; the first move, cold, is timed apart) and **centred** on a frame in the
  middle.

The contexts page and ``Store.info`` (which count every frame) are timed once, for the
record. Timings are printed (median and p95 of ``--rounds``), never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _fid(i: int, per_tx: int) -> str:
    """Frame *i*: the first of each transaction is its hub."""
    return f"t{i // per_tx}/hub" if i % per_tx == 0 else f"t{i // per_tx}/f{i}"


def build(store: Path, frames: int, per_tx: int) -> int:
    import morphz

    with morphz.open_context(store, "big", sync=False) as ctx:
        n = 0
        batch: list[str] = []
        version = ctx.version()
        while n < frames:
            ops = []
            hub = f"t{n // per_tx}/hub"
            for i in range(n, min(n + per_tx, frames)):
                fid = _fid(i, per_tx)
                ops.append(f"(derive {fid} (note (frame {i}) (topic t{i % 97})))")
                if i > 0:
                    ops.append(f"(relate {fid} follows {_fid(i - 1, per_tx)})")
                if i % 10 == 5:
                    ops.append(f"(relate {fid} part-of {hub})")
            n = min(n + per_tx, frames)
            version += 1
            batch.append(f"(context-tx (base-version {version - 1}) {' '.join(ops)})")
            if len(batch) == 100:
                for r in ctx.commit_many(batch):
                    assert r.committed, r
                batch = []
        if batch:
            for r in ctx.commit_many(batch):
                assert r.committed, r
        return int(ctx.version())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    return {"median_ms": statistics.median(ordered) * 1000, "p95_ms": p95 * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--frames", type=int, default=100_000)
    parser.add_argument("--per-tx", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="10,000 frames, 5 rounds")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    args = parser.parse_args()
    if args.quick:
        args.frames, args.rounds = 10_000, 5

    import httpx
    import uvicorn

    import morphz
    from morphz.cli.inspect import inspect_app
    from service import inspection

    with tempfile.TemporaryDirectory(dir=args.dir or os.getcwd(), prefix=".bench-inspect-") as tmp:
        store = Path(tmp) / "store"
        t0 = time.perf_counter()
        versions = build(store, args.frames, args.per_tx)
        built = time.perf_counter() - t0
        middle = versions // 2
        centre = f"t{middle}/f{middle * args.per_tx + 3}"

        port = _free_port()
        server = uvicorn.Server(
            uvicorn.Config(inspect_app(str(store)), host="127.0.0.1", port=port, log_level="error")  # type: ignore[arg-type]
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        base = f"http://127.0.0.1:{port}/inspect"
        cases = {
            "now": {},
            "as_of_middle": {"version": middle},
            "centred": {"center": centre},
        }
        samples: dict[str, list[float]] = {}
        nodes: dict[str, int] = {}
        with (
            morphz.open_context(store, "big", readonly=True) as ctx,
            httpx.Client(timeout=60) as http,
        ):
            # The first slider move reads the log; later ones read its relation changes from
            # memory (each process keeps them per context). Timed once, cold, on both sides.
            t = time.perf_counter()
            inspection.graph(ctx, version=middle)
            cold_service = time.perf_counter() - t
            t = time.perf_counter()
            assert http.get(base + "/api/c/big/graph", params={"version": middle}).is_success
            cold_json = time.perf_counter() - t
            for _ in range(args.rounds):
                for case, params in cases.items():
                    t = time.perf_counter()
                    g = inspection.graph(ctx, **params)  # type: ignore[arg-type]
                    samples.setdefault(f"{case}/service", []).append(time.perf_counter() - t)
                    nodes[case] = len(g["nodes"])
                    t = time.perf_counter()
                    r = http.get(base + "/api/c/big/graph", params=params)
                    samples.setdefault(f"{case}/json", []).append(time.perf_counter() - t)
                    assert r.status_code == 200, r.text
                    t = time.perf_counter()
                    r = http.get(base + "/c/big/graph", params=params)
                    samples.setdefault(f"{case}/page", []).append(time.perf_counter() - t)
                    assert r.status_code == 200, r.text
            t = time.perf_counter()
            r = http.get(base + "/")
            contexts_page = time.perf_counter() - t
            assert r.status_code == 200
        server.should_exit = True
        thread.join(10)

    figures: dict[str, Any] = {
        "frames": args.frames,
        "versions": versions,
        "build_s": round(built, 2),
        "nodes_drawn": nodes,
        "load_1m": os.getloadavg()[0],
        "contexts_page_ms": round(contexts_page * 1000, 1),
        "as_of_middle_cold_ms": {
            "service": round(cold_service * 1000, 1),
            "json": round(cold_json * 1000, 1),
        },
        "timings": {k: {m: round(v, 2) for m, v in _stats(s).items()} for k, s in samples.items()},
    }
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(
        f"inspector graph page: {args.frames:,} frames, {versions:,} versions"
        f" (built in {built:.1f} s), load {figures['load_1m']:.2f}, {args.rounds} rounds"
    )
    head = ("service (baseline)", "JSON twin", "HTML page", "page/service")
    print(f"{'case':<14}{head[0]:>20}{head[1]:>14}{head[2]:>14}{head[3]:>14}")
    for case in cases:
        t = figures["timings"]
        s, j, p = (t[f"{case}/{k}"]["median_ms"] for k in ("service", "json", "page"))
        print(f"{case:<14}{s:>17.1f} ms{j:>11.1f} ms{p:>11.1f} ms{p / max(s, 1e-9):>13.1f}x")
    cold = figures["as_of_middle_cold_ms"]
    print(f"as_of_middle, first move (cold): service {cold['service']} ms, JSON {cold['json']} ms")
    print("p95 (ms): " + ", ".join(f"{k} {v['p95_ms']:.1f}" for k, v in figures["timings"].items()))
    print(
        f"nodes drawn: {nodes}; contexts page (counts every frame):"
        f" {figures['contexts_page_ms']} ms"
    )


if __name__ == "__main__":
    main()
