"""What only the LMDB store does: writer lock, read-only opens, map growth, error translation,
and its audit table across reopening and on stores older than the table."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import lmdb
import pytest

import storage
from protocol.errors import StoreError, StoreLocked
from protocol.governance import audit_entry
from protocol.state import Event, Frame, Meta
from protocol.view import Changeset, ReadView, WriteView
from service.governance import read_audit, record_audit
from storage import LmdbStore
from storage.lmdb.records import _DB_NAMES, _FORMAT, STORE_FORMAT

ROOT = Path(__file__).resolve().parents[2]
MB = 1 << 20


def run_child(code: str) -> subprocess.CompletedProcess[str]:
    """Run *code* in a fresh Python process that can import the project."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )


def event(seq: int) -> Event:
    return Event(
        seq=seq,
        id=f"ev:{seq:020x}",
        kind="tool_result",
        session="s",
        time=0.0,
        size=0,
        tokens=0,
        preview="",
    )


def put_text(store: LmdbStore, seq: int, text: str) -> None:
    store.transact(lambda w: w.apply(Changeset(events=[event(seq)], contents=[(seq, text)])))


def test_package_exports_are_sorted() -> None:
    assert storage.__all__ == sorted(storage.__all__)
    assert all(hasattr(storage, name) for name in storage.__all__)


def test_open_creates_and_exists(tmp_path: Path) -> None:
    path = tmp_path / "a" / "ctx"
    assert not LmdbStore.exists(path)
    with pytest.raises(StoreError):
        LmdbStore.open(path, create=False)
    with pytest.raises(StoreError):
        LmdbStore.open(path, readonly=True)
    assert not path.exists()
    with LmdbStore.open(path) as store:
        assert LmdbStore.exists(path) and LmdbStore.exists(str(path))
        assert (path / "writer.lock").is_file()
        assert not store.readonly
    assert not LmdbStore.exists(tmp_path)


def test_durable_by_default(tmp_path: Path) -> None:
    with LmdbStore.open(tmp_path / "ctx") as store:
        flags = store._shared.env.flags()
        assert flags["sync"] and flags["metasync"]
        assert store.map_size >= 64 * MB


def test_second_writer_in_same_process_is_locked(tmp_path: Path) -> None:
    path = tmp_path / "ctx"
    first = LmdbStore.open(path, sync=False)
    with pytest.raises(StoreLocked) as info:
        LmdbStore.open(path, sync=False)
    assert str(path) in info.value.message and info.value.code == "store_locked"
    with pytest.raises(StoreLocked):
        LmdbStore.open(tmp_path / "." / "ctx", sync=False)  # another spelling of the same path
    first.transact(lambda w: w.apply(Changeset(meta=Meta(version=3))))
    first.close()
    with LmdbStore.open(path, sync=False) as again:
        assert again.read(lambda v: v.meta().version) == 3


CHILD_WRITER = """
from protocol.errors import StoreLocked
from storage import LmdbStore
try:
    store = LmdbStore.open({path!r}, sync=False)
except StoreLocked as e:
    print("locked:", e.message)
else:
    print("opened", store.read(lambda v: v.meta().version))
    store.close()
"""


def test_second_writer_in_child_process_is_locked(tmp_path: Path) -> None:
    path = tmp_path / "ctx"
    store = LmdbStore.open(path, sync=False)
    store.transact(lambda w: w.apply(Changeset(meta=Meta(version=5))))
    child = run_child(CHILD_WRITER.format(path=str(path)))
    assert child.returncode == 0, child.stderr
    assert child.stdout.startswith("locked:") and str(path) in child.stdout
    store.close()
    child = run_child(CHILD_WRITER.format(path=str(path)))
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "opened 5"


def test_readonly_beside_writer_in_same_process(tmp_path: Path) -> None:
    path = tmp_path / "ctx"
    writer = LmdbStore.open(path, sync=False)
    writer.transact(lambda w: w.apply(Changeset(meta=Meta(version=1), frames=[_frame("a")])))
    reader = LmdbStore.open(path, readonly=True)
    assert reader.readonly
    assert reader.read(lambda v: (v.meta().version, v.frame("a"))) == (1, _frame("a"))
    writer.transact(lambda w: w.apply(Changeset(meta=Meta(version=2))))
    assert reader.read(lambda v: v.meta().version) == 2
    with pytest.raises(StoreError):
        reader.transact(lambda w: None)
    with pytest.raises(StoreError):
        reader.outbox_ack(1)
    writer.close()
    assert reader.read(lambda v: v.meta().version) == 2  # the environment outlives the writer
    with LmdbStore.open(path, sync=False) as writer2:  # and a new writer can take it over
        writer2.transact(lambda w: w.apply(Changeset(meta=Meta(version=3))))
        assert reader.read(lambda v: v.meta().version) == 3
    reader.close()


def test_writer_cannot_join_a_readonly_environment_in_same_process(tmp_path: Path) -> None:
    path = tmp_path / "ctx"
    LmdbStore.open(path).close()
    with LmdbStore.open(path, readonly=True):
        with pytest.raises(StoreError):
            LmdbStore.open(path)
    LmdbStore.open(path).close()


CHILD_READER = """
from storage import LmdbStore
with LmdbStore.open({path!r}, readonly=True) as store:
    print(store.read(lambda v: (v.meta().version, v.event_content(1))))
"""


def test_readonly_in_child_process_beside_writer(tmp_path: Path) -> None:
    path = tmp_path / "ctx"
    with LmdbStore.open(path) as writer:
        writer.transact(
            lambda w: w.apply(
                Changeset(meta=Meta(version=9), events=[event(1)], contents=[(1, "已提交")])
            )
        )
        child = run_child(CHILD_READER.format(path=str(path)))
        assert child.returncode == 0, child.stderr
        assert child.stdout.strip() == "(9, '已提交')"


def test_map_grows_by_itself(tmp_path: Path) -> None:
    path = tmp_path / "ctx"
    piece = "0123456789abcdef" * (MB // 16)  # 1 MiB of ASCII
    store = LmdbStore.open(path, sync=False, map_size=256 * 1024)
    start = store.map_size
    for seq in range(1, 41):
        put_text(store, seq, piece)

    def big(w: WriteView) -> None:  # one transaction larger than the whole map so far
        w.apply(Changeset(events=[event(41)], contents=[(41, "文" * (10 * MB // 3))]))

    store.transact(big)
    assert store.map_size > start
    store.close()
    with LmdbStore.open(path, sync=False) as again:
        assert again.read(lambda v: v.event_content(7)) == piece
        assert again.read(lambda v: v.event_content(41)) == "文" * (10 * MB // 3)
        assert again.read(lambda v: [e.seq for e in v.iter_events()]) == list(range(1, 42))


def test_map_growth_survives_a_swallowed_error(tmp_path: Path) -> None:
    store = LmdbStore.open(tmp_path / "ctx", sync=False, map_size=256 * 1024)
    attempts = []

    def careless(w: WriteView) -> str:
        attempts.append(1)
        try:
            w.apply(Changeset(events=[event(1)], contents=[(1, "x" * (2 * MB))]))
        except StoreError:
            return "swallowed"
        return "ok"

    assert store.transact(careless) == "ok"
    assert len(attempts) > 1
    assert store.read(lambda v: len(v.event_content(1) or "")) == 2 * MB
    store.close()


CHILD_GROWER = """
from protocol.state import Event
from protocol.view import Changeset
from storage import LmdbStore
with LmdbStore.open({path!r}, sync=False) as store:
    for seq in range(1, 21):
        ev = Event(seq=seq, id="ev:%020x" % seq, kind="external", session="s", time=0.0,
                   size=0, tokens=0, preview="")
        store.transact(lambda w: w.apply(Changeset(events=[ev], contents=[(seq, "y" * (1 << 20))])))
    print(store.map_size)
"""


def test_reader_adopts_a_map_grown_by_another_process(tmp_path: Path) -> None:
    path = tmp_path / "ctx"
    LmdbStore.open(path, sync=False, map_size=256 * 1024).close()
    with LmdbStore.open(path, readonly=True, map_size=256 * 1024) as reader:
        assert reader.read(lambda v: v.event(1)) is None
        child = run_child(CHILD_GROWER.format(path=str(path)))
        assert child.returncode == 0, child.stderr
        assert int(child.stdout) > reader.map_size
        assert reader.read(lambda v: len(v.event_content(20) or "")) == 1 << 20
        assert reader.map_size == int(child.stdout)


def test_reads_in_other_threads_during_map_growth(tmp_path: Path) -> None:
    store = LmdbStore.open(tmp_path / "ctx", sync=False, map_size=256 * 1024)
    put_text(store, 1, "seed")
    start = store.map_size
    stop = threading.Event()
    errors: list[BaseException] = []
    reads = [0]

    def slow_read(v: ReadView) -> list[int]:
        seqs = [e.seq for e in v.iter_events()]
        time.sleep(0.001)  # hold the snapshot while the writer wants to grow the map
        assert v.event_content(1) == "seed"
        return seqs

    def reader() -> None:
        try:
            while not stop.is_set():
                seqs = store.read(slow_read)
                assert seqs == list(range(1, len(seqs) + 1))
                reads[0] += 1
                # Spinning without a pause starves the writer of py-lmdb's internal locks.
                time.sleep(0.0005)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for seq in range(2, 22):
            put_text(store, seq, "z" * (512 * 1024))
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors and reads[0] > 0
    assert store.map_size >= 8 * start
    assert store.read(lambda v: len(list(v.iter_events()))) == 21
    store.close()


def test_transact_inside_read_cannot_grow_and_says_so(tmp_path: Path) -> None:
    store = LmdbStore.open(tmp_path / "ctx", sync=False, map_size=256 * 1024)
    with pytest.raises(StoreError, match="transact"):
        store.read(lambda v: put_text(store, 1, "x" * (2 * MB)))
    put_text(store, 1, "x" * (2 * MB))  # outside a read it grows as usual
    store.close()


def test_lmdb_errors_are_translated(tmp_path: Path) -> None:
    path = tmp_path / "ctx"
    path.mkdir()
    (path / "data.mdb").write_bytes(b"not an lmdb file at all" * 1000)
    with pytest.raises(StoreError) as info:
        LmdbStore.open(path)
    assert isinstance(info.value.__cause__, lmdb.Error)
    assert info.value.code == "store_error"
    # the failed open released the writer lock
    (path / "data.mdb").unlink()
    LmdbStore.open(path).close()


def test_lmdb_errors_inside_views_are_translated(tmp_path: Path) -> None:
    store = LmdbStore.open(tmp_path / "ctx", sync=False)
    seen: list[BaseException] = []

    def empty_key(w: WriteView) -> None:
        try:  # LMDB refuses empty keys; ids are validated before they get here
            w.apply(Changeset(frames=[_frame("")]))
        except StoreError as e:
            seen.append(e)
            raise

    with pytest.raises(StoreError):
        store.transact(empty_key)
    assert isinstance(seen[0].__cause__, lmdb.Error)
    with pytest.raises(StoreError):  # numbers past 64 bits cannot be keys
        store.transact(lambda w: w.apply(Changeset(txlog={"version": 1 << 70})))
    assert store.read(lambda v: list(v.iter_frames())) == []
    store.close()


def test_unknown_format_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ctx"
    LmdbStore.open(path).close()
    env = lmdb.open(str(path), max_dbs=32)
    with env.begin(write=True) as txn:
        txn.put(b"format", b"\x63", db=env.open_db(b"meta", txn=txn))
    env.close()
    with pytest.raises(StoreError, match="format"):
        LmdbStore.open(path)
    with pytest.raises(StoreError, match="format"):
        LmdbStore.open(path)


def _frame(frame_id: str) -> Frame:
    return Frame(id=frame_id, revision=1, body=(), sources=())


def denial(holder: str = "mallory", at: float = 1000.0) -> dict[str, Any]:
    return audit_entry(
        "frame", "read", holder=holder, allowed=False, why="no grant", at=at, context="c"
    )


def test_the_audit_survives_reopening_and_is_read_beside_the_writer(tmp_path: Path) -> None:
    path = tmp_path / "ctx"
    with LmdbStore.open(path) as s:
        record_audit(s, [denial(at=1000.0)])
    writer = LmdbStore.open(path)
    try:
        # same window: a new row that coalesces the first (rows are never rewritten)
        record_audit(writer, [denial(at=1001.0)])
        out = run_child(
            textwrap.dedent(
                f"""
                from storage import LmdbStore
                with LmdbStore.open({str(path)!r}, readonly=True) as s:
                    rows = s.audit_read(0, 100)
                    print(len(rows), rows[0][1]["count"], rows[1][1]["coalesces"])
                """
            )
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["2", "1", "1"]
    finally:
        writer.close()


def test_an_older_store_without_the_audit_table_reads_empty(tmp_path: Path) -> None:
    path = tmp_path / "old"
    env = lmdb.open(str(path), max_dbs=32, map_size=1 << 20)
    with env.begin(write=True) as txn:
        dbs = {name: env.open_db(name.encode(), txn=txn) for name in _DB_NAMES}
        txn.put(_FORMAT, bytes([STORE_FORMAT]), db=dbs["meta"])
    env.close()
    with LmdbStore.open(path, readonly=True) as ro:
        assert read_audit(ro) == []
        with pytest.raises(StoreError):
            record_audit(ro, [denial()])
    with LmdbStore.open(path) as rw:  # the first writer creates the table
        record_audit(rw, [denial()])
        assert len(read_audit(rw)) == 1
