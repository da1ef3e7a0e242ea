"""Compaction (``morphz compact``) and the in-place rewrites forgetting needs, on real LMDB files.

A forgotten text must not be readable in ``data.mdb`` after compaction; the
store must be intact after the swap; compaction refuses while the store is in
use. The rewrite of a chunked text is checked on both backends.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from protocol.errors import NotFound, StoreLocked
from protocol.ids import ref_seq
from service.context import Context
from storage import CHUNK_CHARS, LmdbStore
from storage.compact import compact_context
from storage.lmdb.compact import compact_store

SECRET = "sk-live-ZEBRAQUOKKA42"
BODY_SECRET = "QUOKKAPASSPHRASE77"


def _fill(path: Path) -> tuple[str, int]:
    """A context holding SECRET in an observation and BODY_SECRET in a frame's two bodies,
    with enough other records that the file has many pages; its search index built."""
    with Context(LmdbStore.open(path)) as ctx:
        ctx.observe_many([("tool_result", f"noise {i} " * 50, "main") for i in range(200)])
        report = ctx.observe("tool_result", f"deploy log: key {SECRET} accepted " * 3)
        ctx.claim()
        ctx.commit(
            f"(context-tx (base-version {ctx.version()})"
            f' (derive cfg (from {report.ref}) (pass "{BODY_SECRET}")))'
        )
        ctx.commit(
            f'(context-tx (base-version {ctx.version()}) (revise cfg (pass "{BODY_SECRET}-v2")))'
        )
        assert ctx.search({"query": SECRET})["hits"] >= 1
        ctx.forget(report.ref, reason="leaked key")
        ctx.forget("cfg", reason="leaked passphrase")
        # The index's own catch-up after the forget rebuilt it without the content.
        return report.ref, ctx.version()


def _bytes(path: Path) -> bytes:
    return (path / "data.mdb").read_bytes()


def test_a_forgotten_text_is_not_in_the_data_file_after_compaction(tmp_path: Path) -> None:
    path = tmp_path / "ctx"
    ref, version = _fill(path)
    # Before: the rewritten records' old pages are free, not erased; LMDB leaves them be.
    assert SECRET.encode() in _bytes(path)
    report = compact_context(path)
    assert report["after"] <= report["before"] and report["index_dropped"]
    data = _bytes(path)
    for needle in (SECRET, BODY_SECRET, "ZEBRAQUOKKA42"):
        assert needle.encode() not in data, needle
    assert not (path / "index").exists()
    # The store is whole after the swap: same version, records, tombstones; writable.
    with Context(LmdbStore.open(path)) as ctx:
        assert ctx.version() == version
        assert len(ctx.state()["events"]) == 202  # and the recorded search
        assert ctx.event(ref)["forgotten"]["reason"] == "leaked key"
        assert ctx.frame("cfg")["envelope"]["forgotten"]["reason"] == "leaked passphrase"
        assert "noise 7" in ctx.read_event("@e8")["text"]
        assert ctx.search({"query": "noise"})["hits"] >= 1  # the index is rebuilt
        assert ctx.searcher.index.search(SECRET).hits == ()
        ctx.commit(f"(context-tx (base-version {ctx.version()}) (derive after (done)))")
    # The rebuilt index, compacted too, holds none of it either.
    compact_context(path)
    with Context(LmdbStore.open(path)) as ctx:
        ctx.search({"query": "noise"})
        ctx.searcher.close()
        index_data = (path / "index" / "data.mdb").read_bytes()
        assert SECRET.encode() not in index_data and b"zebraquokka42" not in index_data


def test_compaction_refuses_while_the_store_is_in_use(tmp_path: Path) -> None:
    path = tmp_path / "ctx"
    _fill(path)
    before = _bytes(path)
    with Context(LmdbStore.open(path, readonly=True)):
        with pytest.raises(StoreLocked):
            compact_context(path)  # open in this process (a reader)
    writer = Context(LmdbStore.open(path))
    with pytest.raises(StoreLocked):
        compact_context(path)
    writer.close()
    # Another process's writer: its flock on writer.lock (another open file description).
    fd = os.open(path / "writer.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(StoreLocked) as err:
            compact_store(path)
        assert err.value.code == "store_locked"
    finally:
        os.close(fd)
    assert _bytes(path) == before


def test_compaction_of_a_missing_store_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFound):
        compact_context(tmp_path / "nothing")


def test_compaction_refuses_while_the_index_is_open_here(tmp_path: Path) -> None:
    path = tmp_path / "ctx"
    _fill(path)
    from storage.search import LexicalIndex

    index = LexicalIndex.open(path)
    try:
        with pytest.raises(StoreLocked):
            compact_context(path)
    finally:
        index.close()
    assert (path / "index").exists()


def test_forgetting_a_chunked_text_replaces_every_chunk(make_ctx: object) -> None:
    ctx: Context = make_ctx()  # type: ignore[operator]
    long = ("A" * (CHUNK_CHARS - 5)) + SECRET + ("B" * (2 * CHUNK_CHARS))
    e = ctx.observe("tool_result", long)
    ctx.forget(e.ref, reason="leak")
    page = ctx.read_event(e.ref)
    assert page["text"].startswith("(forgotten hmac-sha256:") and not page["more"]
    assert ctx.read_event(e.ref, CHUNK_CHARS, 100)["text"] == ""
    seq = ref_seq(e.ref)
    assert ctx.backend.read(lambda v: v.event_chunk(seq, CHUNK_CHARS * 2, 10)) == ""
    assert ctx.backend.read(lambda v: v.event_content(seq)) == page["text"]


def test_compact_also_compacts_the_vector_index(tmp_path: Path) -> None:
    """The vectors of forgotten content leave the vector index's free pages too (on main
    before this change ``compact`` left ``vectors/`` as it was)."""
    import lmdb

    path = tmp_path / "ctx"
    _fill(path)
    vectors = path / "vectors"
    env = lmdb.open(str(vectors), map_size=1 << 26, max_dbs=4)
    vecs = env.open_db(b"vecs")
    marker = b"VECTOR-OF-FORGOTTEN-TEXT"
    with env.begin(write=True) as txn:
        for i in range(400):
            txn.put(i.to_bytes(8, "big"), marker * 40, db=vecs)
    with env.begin(write=True) as txn:  # the index worker dropped them after the forget
        for i in range(400):
            txn.delete(i.to_bytes(8, "big"), db=vecs)
    env.close()
    assert marker in (vectors / "data.mdb").read_bytes()
    report = compact_context(path)
    assert report["vectors_compacted"] and report["vectors_after"] < report["vectors_before"]
    assert marker not in (vectors / "data.mdb").read_bytes()
    env = lmdb.open(str(vectors), max_dbs=4)  # still a working environment
    with env.begin() as txn:
        assert txn.stat(env.open_db(b"vecs", txn=txn))["entries"] == 0
    env.close()
