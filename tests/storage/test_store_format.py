"""Store format 2 on real LMDB files: a store written by the release before it (format 1)
is read as it is, migrated by the first writing open, and answers every read the same.

The fixture (``fixtures/format1-store.mdb.gz``, ``fixtures/format1-answers.json.gz``)
was written by that release running ``fixtures/store_format1.py``.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import lmdb
import pytest

from protocol.errors import StoreError
from service.context import Context
from storage import LmdbStore
from storage.lmdb.records import _DB_NAMES, MIGRATIONS, STORE_FORMAT, _enc
from tests.storage.fixtures.store_format1 import answers

FIXTURES = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).resolve().parents[2]


def old_store(tmp_path: Path) -> Path:
    """A copy of the format-1 fixture store; fails loudly if the fixture is missing."""
    data = FIXTURES / "format1-store.mdb.gz"
    assert data.is_file(), f"missing fixture {data}"
    path = tmp_path / "context"
    path.mkdir(mode=0o700)
    (path / "data.mdb").write_bytes(gzip.decompress(data.read_bytes()))
    return path


def expected() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(
        gzip.decompress((FIXTURES / "format1-answers.json.gz").read_bytes())
    )
    return doc


def raw_rows(path: Path) -> tuple[int, dict[str, int]]:
    """The format byte, the row count of the tables the migrations move rows between, and
    where the Meta record is (1: in ``meta``, 2: in the main database)."""
    env = lmdb.open(str(path), readonly=True, max_dbs=32, lock=False)
    try:
        with env.begin() as txn:
            meta = env.open_db(b"meta", txn=txn)
            fmt = txn.get(b"format", db=meta)
            assert fmt is not None
            counts = {
                name: txn.stat(env.open_db(name.encode(), txn=txn))["entries"]
                for name in ("history", "cites", "lastmod", "frames", "rel_rev", "events")
            }
            in_meta, in_main = txn.get(b"meta", db=meta), txn.get(b"\x00meta")
            assert (in_meta is None) != (in_main is None)
            counts["meta_record"] = 1 if in_main is None else 2
    finally:
        env.close()
    return fmt[0], counts


def test_an_old_store_is_read_migrated_once_and_answers_the_same(tmp_path: Path) -> None:
    path = old_store(tmp_path)
    want = expected()
    fmt, before = raw_rows(path)
    assert fmt == 1
    assert before["history"] == sum(len(h) for h in want["frame_history"].values()) > 0
    assert before["cites"] == sum(len(c) for c in want["cited_by"].values()) > 0
    assert before["lastmod"] > 0

    with LmdbStore.open(path, readonly=True) as ro:  # the old format, read as it is
        assert answers(ro) == want
    assert raw_rows(path) == (fmt, before)  # reading changed nothing

    with LmdbStore.open(path) as rw:  # the first writer migrates
        assert answers(rw) == want
    fmt, after = raw_rows(path)
    assert fmt == STORE_FORMAT == 4
    assert after["history"] == after["cites"] == after["lastmod"] == 0  # every row moved
    assert (before["meta_record"], after["meta_record"]) == (1, 2)
    assert after["rel_rev"] == before["rel_rev"] + before["cites"]
    moved = (after["frames"] - before["frames"]) + (after["events"] - before["events"])
    assert moved == before["history"] + before["lastmod"]
    with LmdbStore.open(path, readonly=True) as ro:
        assert answers(ro) == want
    with LmdbStore.open(path) as rw:  # a second writing open has nothing to migrate
        assert answers(rw) == want
    assert raw_rows(path) == (4, after)


def test_writes_after_the_migration_read_back_in_the_new_layout(tmp_path: Path) -> None:
    path = old_store(tmp_path)
    want = expected()
    with LmdbStore.open(path, sync=False) as store:
        ctx = Context(store)
        v = ctx.version()
        tx = (
            f"(context-tx (base-version {v}) (client-id c-3)"
            " (revise release (from plan/v2) (stage archived))"
            " (derive release/x (from release) (note done)) (relate release/x supports release))"
        )
        receipt = ctx.commit(tx)
        assert receipt.committed, receipt.to_dict()
        assert ctx.commit(tx).duplicate  # exactly once, across the migration
        got = answers(store)
    assert got["frame_history"]["release"] == [*want["frame_history"]["release"], v + 1]
    assert got["frame_history"]["release/x"] == [v + 1]
    assert got["frame_at"]["release"][str(v)] == want["frame_at"]["release"][str(v)]
    assert got["frame_at"]["release"][str(v + 1)]["body"] != want["frame"]["release"]["body"]
    assert got["cited_by"]["plan/v2"] == ["release"]
    assert got["cited_by"]["release"] == ["plan/v1", "release/x"]
    edges = [["release/x", "supports"], ["test-result", "supports"]]
    assert got["relations_to"]["release"] == edges
    assert [f["id"] for f in got["frames"]] == sorted(
        [f["id"] for f in want["frames"]] + ["release/x"]
    )
    assert got["client"]["c-3"][0] == v + 1
    for key in ("events", "content", "chunk", "traces", "inbox", "due"):
        assert got[key] == want[key], key


def test_a_reader_opened_before_the_migration_follows_it(tmp_path: Path) -> None:
    path = old_store(tmp_path)
    want = expected()
    with LmdbStore.open(path, readonly=True) as ro:
        assert answers(ro) == want
        child = subprocess.run(  # a writer in another process migrates the store
            [
                sys.executable,
                "-c",
                textwrap.dedent(
                    f"""
                    from storage import LmdbStore
                    LmdbStore.open({str(path)!r}).close()
                    """
                ),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert child.returncode == 0, child.stderr
        # The migration emptied history and cites: only a reader that follows it to the
        # new layout still finds every frame's history and every citation.
        assert answers(ro) == want
    assert raw_rows(path)[0] == 4


def test_a_failed_migration_leaves_the_old_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = old_store(tmp_path)
    before = raw_rows(path)

    def half(txn: Any, dbs: dict[str, Any]) -> None:  # after the first step has run
        for key, _ in txn.cursor(db=dbs["lastmod"]):
            txn.put(key + b"\x02f", b"\x00" * 8, db=dbs["frames"])
        raise OSError("disk went away halfway")

    monkeypatch.setitem(MIGRATIONS, 2, half)
    with pytest.raises(OSError, match="halfway"):
        LmdbStore.open(path)
    assert raw_rows(path) == before  # nothing of it was written
    monkeypatch.undo()
    with LmdbStore.open(path) as rw:  # the writer lock and environment were released
        assert answers(rw) == expected()


def test_a_format_from_the_future_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = old_store(tmp_path)
    env = lmdb.open(str(path), max_dbs=32)
    with env.begin(write=True) as txn:
        txn.put(b"format", bytes([5]), db=env.open_db(b"meta", txn=txn))
    env.close()
    for readonly in (True, False):
        with pytest.raises(StoreError, match="format b'\\\\x05', not 1 or 2 or 3 or 4"):
            LmdbStore.open(path, readonly=readonly)
    assert raw_rows(path)[0] == 5


def test_a_format_2_store_moves_its_lastmod_rows_and_keeps_a_long_key(tmp_path: Path) -> None:
    """Format 2 (history and citations moved, lastmod not yet): the writing open moves
    the lastmod rows; a row whose key was hashed stays where it was and is still read."""
    path = old_store(tmp_path)
    long_key = "f:" + "é" * 300  # 602 bytes: stored hashed, its text is not in the store
    env = lmdb.open(str(path), max_dbs=32)
    with env.begin(write=True) as txn:
        dbs = {name: env.open_db(name.encode(), txn=txn) for name in _DB_NAMES}
        MIGRATIONS[1](txn, dbs)
        txn.put(_enc(long_key, 400), (41).to_bytes(8, "big"), db=dbs["lastmod"])
    env.close()
    assert raw_rows(path)[0] == 2
    want = expected()
    with LmdbStore.open(path, readonly=True) as ro:
        assert answers(ro) == want
        assert ro.read(lambda v: v.lastmod(long_key)) == 41
    with LmdbStore.open(path) as rw:
        assert answers(rw) == want
        assert rw.read(lambda v: v.lastmod(long_key)) == 41
        assert rw.read(lambda v: v.lastmod("f:" + "é" * 299)) == 0
    fmt, after = raw_rows(path)
    assert fmt == 4 and after["lastmod"] == 1
