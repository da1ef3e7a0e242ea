"""``morphz serve`` as a user runs it: it says where it serves only once it answers there,
the replica itself listening on --port (direct ingress), and SIGTERM (what a process
manager sends) stops it cleanly with exit 0.

It runs as a child process that starts its own local Ray cluster (no address given), as
the walk-through in docs/http.md does.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from service.store import open_context
from tests.servers.test_mcp import free_port, server_env

pytestmark = pytest.mark.subprocess


def test_serve_prints_its_address_when_it_answers_and_sigterm_exits_cleanly(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    with open_context(store, "default", create=True):
        pass
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "morphz", "--store", str(store), "serve", "--port", str(port)],
        env=server_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    try:
        deadline = time.monotonic() + 180
        while True:
            line = proc.stderr.readline()
            assert line or proc.poll() is None, f"morphz serve exited {proc.returncode}"
            if "morphz: serving" in line:
                break
            assert time.monotonic() < deadline, "morphz serve never said it serves"
        assert f"http://127.0.0.1:{port}/v1" in line
        # said only once it answers: the very next request is served
        r = httpx.get(f"http://127.0.0.1:{port}/v1/contexts", timeout=10)
        assert r.status_code == 200 and r.json()["contexts"][0]["name"] == "default"
        # the replica itself listens on --port (direct ingress): a commit goes through it
        r = httpx.post(
            f"http://127.0.0.1:{port}/v1/contexts/default/transactions",
            content="(context-tx (base-version 0) (derive note (said hi)))",
            headers={"content-type": "text/plain", "x-morphz-request": "1"},
            timeout=30,
        )
        assert r.status_code == 200 and r.json()["status"] == "committed", r.text
        assert _listener(port).startswith("ray::ServeRepli")  # not Serve's proxy
        # a refusal at the edge lands in the chained edge log, which verifies
        forged = httpx.get(
            f"http://127.0.0.1:{port}/v1/contexts", headers={"host": "evil.example"}, timeout=10
        )
        assert forged.status_code == 421
        edge = store / ".edge-audit"
        while True:  # written within a flush (0.5 s) and a write
            verified = subprocess.run(
                [sys.executable, "-m", "morphz", "--store", str(edge), "--json", "audit",
                 "edge", "--verify"], capture_output=True, text=True, timeout=120,
                env=server_env(),
            )  # fmt: skip
            if verified.returncode == 0 and json.loads(verified.stdout)["checked"] >= 1:
                break
            assert time.monotonic() < deadline + 60, verified
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=120)
        rest = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    assert code == 0, rest[-2000:]
    assert "interrupted" not in rest and "morphz: stopped (SIGTERM)" in rest


def _listener(port: int) -> str:
    """The name (``/proc/PID/comm``) of the process listening on TCP *port* of loopback."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            cols = row.split()
            if cols[1].endswith(f":{port:04X}") and cols[3] == "0A":  # LISTEN
                inodes.add(f"socket:[{cols[9]}]")
    assert inodes, f"nothing listens on {port}"
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if any(str(fd.readlink()) in inodes for fd in (proc / "fd").iterdir()):
                return (proc / "comm").read_text().strip()
        except OSError:  # gone, or not ours to read
            continue
    raise AssertionError(f"no process holds the listener on {port}")
