"""Durability under SIGKILL: what a writer acknowledged survives, and nothing is half-written.

A child process (``crash_writer.py``) commits one item per durable transaction
and prints ``ACK i version`` after each commit returns. The parent kills it with
SIGKILL at a random moment, reopens the store and checks, over several rounds
on the same store:

* every acknowledged item is there with all of its transaction's effects;
* every item that is there has all of its effects (all or nothing): its log
  record, its retired observation, its edge; no effect exists without its item;
* the version counts the log records exactly, and the log has no gaps;
* resubmitting the last acknowledged transaction with its client id is a
  duplicate that does not bump the version.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from protocol.errors import NotFound
from service.store import Store

WRITER = Path(__file__).with_name("crash_writer.py")
CONTEXT = "ctx"
ROUNDS = 5
READY_TIMEOUT = 60.0


class Child:
    """The writer process and the lines it printed, read on a thread."""

    def __init__(self, store: Path, log: Path) -> None:
        self.lines: list[str] = []
        self.ready = threading.Event()
        self._err = log.open("wb")
        env = {k: v for k, v in os.environ.items() if k != "MORPHZ_STORE"}
        self.proc = subprocess.Popen(
            [sys.executable, str(WRITER), str(store), CONTEXT],
            stdout=subprocess.PIPE,
            stderr=self._err,
            text=True,
            env=env,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if line.startswith("READY"):
                self.ready.set()
        self.ready.set()  # EOF: do not leave the parent waiting

    def kill(self) -> int:
        self.proc.send_signal(signal.SIGKILL)
        code = self.proc.wait(timeout=READY_TIMEOUT)
        self._reader.join(timeout=READY_TIMEOUT)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        self._err.close()
        return code


def _run_round(store: Path, log: Path, delay: float) -> tuple[int, list[tuple[int, int]]]:
    """Start the writer, kill it *delay* seconds after it is ready; its start index and ACKs."""
    child = Child(store, log)
    try:
        if not child.ready.wait(READY_TIMEOUT) or not any(
            x.startswith("READY") for x in child.lines
        ):
            raise AssertionError(f"writer never got ready: {child.lines} {log.read_text()}")
        time.sleep(delay)
    finally:
        code = child.kill()
    assert code == -signal.SIGKILL, (
        f"the writer stopped by itself (exit {code}): {child.lines[-3:]} {log.read_text()}"
    )
    ready = [x for x in child.lines if x.startswith("READY")]
    assert len(ready) == 1, child.lines
    start = int(ready[0].split()[1])
    acks = []
    for line in child.lines:
        if line.startswith("ACK "):
            _, i, v = line.split()
            acks.append((int(i), int(v)))
        else:
            assert line.startswith("READY"), f"unexpected writer output: {line!r}"
    return start, acks


def _check_store(store: Path, acked: dict[int, int]) -> int:
    """Reopen the store and check every invariant; return the number of items."""
    ctx = Store(store).open(CONTEXT)  # raises StoreLocked if the dead child kept the lock
    try:
        state = ctx.state()
        version = state["version"]
        items = {
            int(f["id"].removeprefix("item/")): f
            for f in state["frames"]
            if f["id"].startswith("item/")
        }
        n = len(items)
        assert set(items) == set(range(n)), f"item numbering has gaps: {sorted(items)}"

        # Every acknowledged commit survived, at the version it was acknowledged at.
        missing = sorted(set(acked) - set(items))
        assert not missing, f"acknowledged items lost: {missing[:10]}"

        # The version counts the log exactly: 1..version present, nothing after.
        assert version == n, f"version {version} but {n} items"
        for v in range(1, version + 1):
            rec = ctx.txlog(v)
            assert rec["version"] == v
            assert rec["client_id"] == f"w-{v - 1}", rec
            assert rec["receipt"]["status"] == "committed"
            assert rec["receipt"]["version"] == v
        with pytest.raises(NotFound):
            ctx.txlog(version + 1)

        # All or nothing, item by item.
        relations = {tuple(r) for r in state["relations"]}
        expected_relations = set()
        observations = set()
        for i in range(n):
            prev = "root" if i == 0 else f"item/{i - 1}"
            fid = f"item/{i}"
            f = ctx.frame(fid)
            assert (f["revision"], f["lifecycle"]) == (1, "active"), f
            assert f["body"] == f"(n {i})"
            if i in acked:
                assert f["created_version"] == acked[i], (i, f["created_version"], acked[i])
            rec = ctx.txlog(f["created_version"])
            assert rec["client_id"] == f"w-{i}"
            assert any(w["frame"] == fid and w["op"] == "derive" for w in rec["writes"])
            obs, source = f["sources"]
            assert source == prev
            assert obs.startswith("@e"), f["sources"]
            event = ctx.event(obs)
            assert event["lifecycle"] == "retired", (fid, event)
            assert ctx.read_event(obs)["text"] == f"result {i}"
            assert obs in rec["receipt"]["retired_now"]
            assert (fid, "follows", prev) in relations, fid
            expected_relations.add((fid, "follows", prev))
            observations.add(obs)
        if n:
            assert ctx.frame("root")["created_version"] == 1
        frame_ids = {f["id"] for f in state["frames"]}
        assert frame_ids == {f"item/{i}" for i in range(n)} | ({"root"} if n else set())

        # No effect without its item: no stray edge, no retired observation left over
        # from a transaction that did not commit.
        assert relations == expected_relations
        retired = {e["ref"] for e in state["events"] if e["lifecycle"] == "retired"}
        assert retired == observations

        # A retry of the last acknowledged transaction is recognised, not re-applied.
        if acked:
            last = max(acked)
            rec = ctx.txlog(acked[last])
            again = ctx.commit(rec["text"], client_id=f"w-{last}")
            assert again.committed and again.duplicate, again
            assert again.version == acked[last]
            assert ctx.version() == version
        return n
    finally:
        ctx.close()


def test_sigkilled_writer_keeps_every_ack_and_leaves_nothing_partial(tmp_path: Path) -> None:
    seed = int.from_bytes(os.urandom(4), "big")
    print(f"durability seed {seed}")  # shown if the test fails
    rng = random.Random(seed)
    store = tmp_path / "store"
    acked: dict[int, int] = {}
    items = 0
    for round_no in range(ROUNDS):
        delay = rng.uniform(0.05, 0.6)
        start, acks = _run_round(store, tmp_path / f"writer-{round_no}.err", delay)
        # The writer continued exactly where the store was.
        assert start == items, (round_no, start, items)
        for k, (i, v) in enumerate(acks):
            assert i == start + k and v == i + 1, (round_no, acks[: k + 1])
            acked[i] = v
        items = _check_store(store, acked)
        assert items >= start + len(acks)
        print(f"round {round_no}: killed after {delay:.2f} s, {len(acks)} acks, {items} items")
    assert acked, "no commit was acknowledged in any round: the test checked nothing"
