"""The LMDB write view's inlined paths write and read exactly what the general ones did.

The write view reads events itself (noting their ids as indexed) and encodes a
changeset's ``lastmod`` version once; both are checked here against what the
read view and the raw tables hold afterwards, including across reopening.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.errors import StoreError
from protocol.forms import Symbol
from protocol.state import Event, Frame, Meta
from protocol.view import Changeset, ReadView, WriteView
from storage import LmdbStore


def event(seq: int, lifecycle: str = "active") -> Event:
    return Event(
        seq=seq,
        id=f"ev:{seq:020x}",
        kind="tool_result",
        session="main",
        time=1.0,
        size=3,
        tokens=1,
        preview="abc",
        lifecycle=lifecycle,
    )


def test_a_write_view_reads_events_as_the_read_view_does(tmp_path: Path) -> None:
    store = LmdbStore.open(str(tmp_path / "s"), sync=False)
    try:
        store.transact(lambda w: w.apply(Changeset(meta=Meta(next_seq=3), events=[event(1)])))

        def inside(w: WriteView) -> tuple[Event | None, ...]:
            return (w.event(1), w.event(2), w.event(0), w.event(-1), w.event(1 << 64))

        got = store.transact(inside)
        assert got == (event(1), None, None, None, None)

        # An event read in a write and written back updated keeps one index row.
        def retire(w: WriteView) -> None:
            e = w.event(1)
            assert e is not None
            e.lifecycle = "retired"
            w.apply(Changeset(events=[e]))

        store.transact(retire)
        assert store.read(lambda v: v.event(1)) == event(1, "retired")
        assert store.read(lambda v: v.event_seq(event(1).id)) == 1
    finally:
        store.close()


def test_a_write_view_refuses_an_event_read_after_its_callback(tmp_path: Path) -> None:
    store = LmdbStore.open(str(tmp_path / "s"), sync=False)
    try:
        kept: list[WriteView] = []
        store.transact(kept.append)
        with pytest.raises(StoreError, match="outside its read"):
            kept[0].event(1)
    finally:
        store.close()


def test_lastmod_rows_keep_each_keys_version(tmp_path: Path) -> None:
    path = str(tmp_path / "s")
    store = LmdbStore.open(path, sync=False)
    lastmod = {"f:a": 5, "f:b": 5, "e:@e1": 7, "r:a\x00supports\x00b": 5, "f:" + "x" * 600: 9}
    try:
        store.transact(lambda w: w.apply(Changeset(lastmod=lastmod)))
    finally:
        store.close()
    store = LmdbStore.open(path, readonly=True)
    try:

        def read(v: ReadView) -> dict[str, int]:
            return {key: v.lastmod(key) for key in [*lastmod, "f:never"]}

        assert store.read(read) == {**lastmod, "f:never": 0}
    finally:
        store.close()


def test_a_lastmod_version_outside_the_key_range_is_refused_and_writes_nothing(
    tmp_path: Path,
) -> None:
    store = LmdbStore.open(str(tmp_path / "s"), sync=False)
    try:
        for bad in ({"f:a": 3, "f:b": -1}, {"f:a": -1}, {"f:a": 1 << 64}):
            changes = Changeset(lastmod=bad)
            with pytest.raises(StoreError, match="unsigned 64-bit"):
                store.transact(lambda w: w.apply(changes))  # noqa: B023 (called at once)
        assert store.read(lambda v: v.lastmod("f:a")) == 0
    finally:
        store.close()


def test_a_frames_rows_reuse_its_key_and_land_where_reads_look(tmp_path: Path) -> None:
    from storage.lmdb.records import _lastmod_place
    from storage.lmdb.views import in_transaction

    ids = ["a", "y" * 500, "ü-ß"]
    lastmod: dict[str, int] = {}
    for i in ids:
        for key in (f"f:{i}", f"l:{i}", f"b:{i}\x00name", f"b:{i}\x00" + "n" * 60):
            lastmod[key] = 3
        lastmod[f"r:{i}\x00supports\x00a"] = 3
    frames = [Frame(id=i, revision=1, body=((Symbol("name"), 1),), sources=()) for i in ids]
    changes = Changeset(frames=frames, lastmod=lastmod, history=[(i, 3) for i in ids])
    path = str(tmp_path / "s")
    store = LmdbStore.open(path, sync=False)
    try:
        store.transact(lambda w: w.apply(changes))
    finally:
        store.close()
    store = LmdbStore.open(path, readonly=True)
    try:

        def read(v: ReadView) -> None:
            for i, written in zip(ids, frames, strict=True):
                got = v.frame(i)
                assert got is not None and got.to_record() == written.to_record()
                assert v.frame_history(i) == [3]
            for key in lastmod:
                assert v.lastmod(key) == 3, key
                place = _lastmod_place(key)
                assert place is not None
                raw = in_transaction(v, lambda txn, dbs: txn.get(place[1], db=dbs[place[0]]))  # noqa: B023
                assert raw == (3).to_bytes(8, "big"), key

        store.read(read)
    finally:
        store.close()
