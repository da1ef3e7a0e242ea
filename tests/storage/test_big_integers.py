"""Integers beyond 64 bits (up to the language's 40 digits) in a body are stored, read back
after reopening and replicated: they are a typed part of the language, never a crash."""

from __future__ import annotations

from pathlib import Path

import msgpack
import pytest

from protocol.errors import WireError
from protocol.wire import ext_default, ext_hook
from service.context import Context
from storage import LmdbStore
from storage.replication import decode_batch, encode_batch
from tests.storage.test_replication import Pair, dump

BIG = 10**39 + 7
NEGATIVE = -(10**30)


def _commit_big(ctx: Context) -> None:
    receipt = ctx.commit(
        f"(context-tx (base-version 0) (derive n (count {BIG}) (low {NEGATIVE}) (small 5)))"
    )
    assert receipt.committed, receipt.errors


def test_a_big_integer_in_a_body_commits_and_reads_back(ctx: Context) -> None:
    _commit_big(ctx)
    assert ctx.frame("n").body == f"(count {BIG}) (low {NEGATIVE}) (small 5)"


def test_a_big_integer_survives_reopening_the_store(tmp_path: Path) -> None:
    with Context(LmdbStore.open(tmp_path / "c"), name="c") as ctx:
        _commit_big(ctx)
    with Context(LmdbStore.open(tmp_path / "c"), name="c") as ctx:
        assert f"(count {BIG})" in ctx.frame("n").body
        assert ctx.version() == 1


def test_a_big_integer_is_replicated(tmp_path: Path) -> None:
    p = Pair(tmp_path)
    try:
        _commit_big(Context(p.store, name="c"))
        assert p.batches
        for data in p.batches:
            assert encode_batch(decode_batch(data)) == data
        p.follower.drain()
        assert dump(p.replica) == dump(p.primary)
    finally:
        p.close()


def test_only_the_big_integer_extension_is_read() -> None:
    assert msgpack.unpackb(msgpack.packb(BIG, default=ext_default), ext_hook=ext_hook) == BIG
    with pytest.raises(WireError):
        msgpack.unpackb(msgpack.packb(msgpack.ExtType(7, b"12")), ext_hook=ext_hook)
    with pytest.raises(WireError):  # a 64-bit integer never travels as the extension
        msgpack.unpackb(msgpack.packb(msgpack.ExtType(1, b"12")), ext_hook=ext_hook)
    with pytest.raises(WireError):
        msgpack.packb(10**41, default=ext_default)
