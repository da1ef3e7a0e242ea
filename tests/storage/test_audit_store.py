"""The durable audit table on both backends, and on real LMDB files across reopening."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lmdb
import pytest

from protocol.errors import OutOfRange, StoreError
from protocol.governance import audit_entry, read_audit, record_audit
from protocol.view import Changeset
from service.context import Context
from storage import LmdbStore
from storage.lmdb_store import _DB_NAMES, _FORMAT, STORE_FORMAT
from storage.memory import MemoryBackend

ROOT = Path(__file__).resolve().parents[2]


def denial(holder: str = "mallory", at: float = 1000.0) -> dict[str, Any]:
    return audit_entry(
        "frame", "read", holder=holder, allowed=False, why="no grant", at=at, context="c"
    )


@pytest.fixture(params=["lmdb", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    backend: Any = (
        LmdbStore.open(tmp_path / "ctx", sync=False) if request.param == "lmdb" else MemoryBackend()
    )
    yield backend
    backend.close()


def test_append_and_page_back_without_touching_the_state(store: Any) -> None:
    ctx = Context(store)
    ctx.commit("(context-tx (base-version 0) (derive a (x)))")
    before = (ctx.meta().to_record(), ctx.state(), ctx.txlog(1))
    record_audit(store, [denial(at=1000.0), denial(holder="eve", at=1001.0)])
    record_audit(store, [denial(at=1002.0)])  # coalesced into row 1
    for i in range(5):
        entry = audit_entry("export_frame", "read", holder="curator", allowed=True, why=f"x{i}")
        record_audit(store, [entry])
    assert (ctx.meta().to_record(), ctx.state(), ctx.txlog(1)) == before
    rows = read_audit(store, 0, 100)
    assert [r["seq"] for r in rows] == [1, 2, 3, 4, 5, 6, 7]
    assert rows[0]["count"] == 2 and rows[0]["holder"] == "mallory" and rows[0]["context"] == "c"
    assert [r["seq"] for r in read_audit(store, 3, 2)] == [4, 5]
    assert read_audit(store, 7, 10) == []
    with pytest.raises(OutOfRange):
        read_audit(store, 0, 0)


def test_an_audit_entry_in_a_failed_write_is_not_kept(store: Any) -> None:
    def run(w: Any) -> None:
        w.apply(Changeset(audit=[denial()]))
        raise RuntimeError("the write fails after the append")

    with pytest.raises(RuntimeError):
        store.transact(run)
    assert read_audit(store) == []


def test_the_audit_survives_reopening_and_is_read_beside_the_writer(tmp_path: Path) -> None:
    path = tmp_path / "ctx"
    with LmdbStore.open(path) as s:
        record_audit(s, [denial(at=1000.0)])
    writer = LmdbStore.open(path)
    try:
        record_audit(writer, [denial(at=1001.0)])  # same window: coalesced durably
        code = textwrap.dedent(
            f"""
            from storage import LmdbStore
            from protocol.governance import read_audit
            with LmdbStore.open({str(path)!r}, readonly=True) as s:
                rows = read_audit(s)
                print(len(rows), rows[0]["count"])
            """
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
        )
        assert out.stdout.split() == ["1", "2"]
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
