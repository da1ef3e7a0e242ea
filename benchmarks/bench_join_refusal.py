"""How long a process takes to learn that a Ray cluster refuses it for want of a token.

A head is started with ``RAY_AUTH_MODE=token`` (its token given in its environment, no
token file written); a child process without the token then tries to join it:

* measured: ``actors.client.joining.init_ray`` (the probe of the GCS before the join);
* baseline: Ray's own ``ray.init(address=…)``, the join without the probe.

Each side is a fresh interpreter (import time included, as a user meets it), run
``--runs`` times in alternation. Figures are printed, never asserted.

    .venv/bin/python benchmarks/bench_join_refusal.py [--quick] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

RAY = [sys.executable, "-c", "import sys; from ray.scripts.scripts import main; sys.exit(main())"]
MEASURED = (
    "from actors.client.joining import init_ray\n"
    "from protocol.errors import TransportError\n"
    "try:\n    init_ray({addr!r})\nexcept TransportError as e:\n    print(e.code)\n"
)
BASELINE = (
    "import ray\n"
    "try:\n    ray.init(address={addr!r}, log_to_driver=False)\n"
    "except Exception as e:\n    print(type(e).__name__)\n"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def timed(code: str, env: dict[str, str]) -> tuple[float, str]:
    t = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    return time.monotonic() - t, p.stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one run of each side")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    runs = 1 if args.quick else args.runs
    temp = tempfile.mkdtemp(prefix="mzr-")
    port = free_port()
    base = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN")}
    head = subprocess.Popen(
        [*RAY, "start", "--head", "--block", f"--port={port}", "--num-cpus=1"]
        + ["--include-dashboard=false", "--disable-usage-stats"],
        env={
            **base,
            "RAY_TMPDIR": temp,
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": secrets.token_hex(32),
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    addr = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or head.poll() is not None:
                    raise SystemExit("ray start --head did not come up") from None
                time.sleep(0.2)
        time.sleep(2)
        env = {**base, "RAY_AUTH_MODE": "disabled", "RAY_TMPDIR": temp}
        measured, baseline = [], []
        for _ in range(runs):
            measured.append(timed(MEASURED.format(addr=addr), env))
            baseline.append(timed(BASELINE.format(addr=addr), env))
    finally:
        head.send_signal(signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            head.kill()
    m = statistics.median(t for t, _ in measured)
    b = statistics.median(t for t, _ in baseline)
    doc = {
        "runs": runs,
        "probe_s": round(m, 2),
        "probe_outcome": measured[0][1],
        "ray_join_s": round(b, 2),
        "ray_join_outcome": baseline[0][1],
        "ratio": round(b / m, 1) if m else None,
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }
    if args.json:
        print(json.dumps(doc))
    else:
        print(f"refused join, measured (probe): {m:.2f} s ({doc['probe_outcome']})")
        print(f"refused join, baseline (ray.init): {b:.2f} s ({doc['ray_join_outcome']})")
        print(f"ratio {doc['ratio']}x, load {doc['loadavg_1m']}")


if __name__ == "__main__":
    main()
