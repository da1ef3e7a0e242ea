"""``morphz serve`` as a user runs it: it says where it serves only once it answers there,
the replica itself listening on --port (direct ingress), Serve's line per request kept
out of the replica's log unless ``--access-log``, and SIGTERM (what a process manager
sends) stops it cleanly with exit 0.

It runs as a child process that starts its own local Ray cluster (no address given), as
the walk-through in docs/http.md does.
"""

from __future__ import annotations

import contextlib
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
    proc = _serve(store, port)
    assert proc.stderr is not None
    try:
        deadline = time.monotonic() + 180
        line = _serving(proc, deadline)
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
        replica = _listener(port)
        assert _comm(replica).startswith("ray::ServeRepli")  # not Serve's proxy
        # no access log by default: the replica's log has its own lines, none per request
        log = _replica_log(replica)
        assert "replica" in log.name and log.read_text(errors="replace").strip()
        assert not _access_lines(log), _access_lines(log)
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


def test_serve_access_log_writes_a_line_per_request(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with open_context(store, "default", create=True):
        pass
    port = free_port()
    proc = _serve(store, port, "--access-log")
    assert proc.stderr is not None
    try:
        _serving(proc, time.monotonic() + 180)
        for i in range(2):
            r = httpx.post(
                f"http://127.0.0.1:{port}/v1/contexts/default/transactions",
                content=f"(context-tx (base-version {i}) (derive note{i} (said hi)))",
                headers={"content-type": "text/plain", "x-morphz-request": "1"},
                timeout=30,
            )
            assert r.status_code == 200, r.text
        log = _replica_log(_listener(port))
        deadline = time.monotonic() + 30
        while len(_access_lines(log)) < 2:  # a logging handler writes as it goes
            assert time.monotonic() < deadline, log.read_text(errors="replace")[-2000:]
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stderr.close()


ACCESS_LINE = "POST /v1/contexts/{context}/transactions 200 "
"""How Serve's access log writes a commit: method, route (its pattern), status, latency."""


def _access_lines(log: Path) -> list[str]:
    return [x for x in log.read_text(errors="replace").splitlines() if ACCESS_LINE in x]


def _serve(store: Path, port: int, *options: str) -> subprocess.Popen[str]:
    """``morphz --store STORE serve --port PORT [options]`` in a child process."""
    return subprocess.Popen(
        [sys.executable, "-m", "morphz", "--store", str(store), "serve", "--port", str(port),
         *options],
        env=server_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def _serving(proc: subprocess.Popen[str], deadline: float) -> str:
    """The line *proc* prints once it answers (failing when it exits or never says it)."""
    assert proc.stderr is not None
    while True:
        line = proc.stderr.readline()
        assert line or proc.poll() is None, f"morphz serve exited {proc.returncode}"
        if "morphz: serving" in line:
            return line
        assert time.monotonic() < deadline, "morphz serve never said it serves"


def _replica_log(pid: int) -> Path:
    """The log file Serve's replica (process *pid*) writes: the one it holds open under
    the Ray session's ``logs/serve``."""
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = fd.readlink()
            if target.parent.name == "serve" and target.name.startswith("replica_"):
                return target
    raise AssertionError(f"process {pid} holds no replica log open")


def _comm(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


def _listener(port: int) -> int:
    """The process listening on TCP *port* of loopback."""
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
                return int(proc.name)
        except OSError:  # gone, or not ours to read
            continue
    raise AssertionError(f"no process holds the listener on {port}")
