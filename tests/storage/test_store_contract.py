"""The store contract, run against both backends: a real LmdbStore and the MemoryBackend.

Whatever the layers above can observe through the :class:`storage.Backend`
protocol (``read``/``transact``, the outbox, the audit table, ``readonly``,
``close``) must be the same on both (STYLE: one seam, one conformance suite).
What only LMDB does is in ``test_lmdb_specific.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from protocol.errors import OutOfRange, StoreError
from protocol.forms import Symbol
from protocol.governance import audit_entry
from protocol.ids import is_frame_id, is_label
from protocol.state import RETIRED, Event, Frame, Meta
from protocol.tx import edge_key
from protocol.view import Changeset, ReadView, WriteView
from service.context import Context
from service.governance import read_audit, record_audit
from storage import CHUNK_CHARS, Backend, LmdbStore
from storage.memory import MemoryBackend

T = TypeVar("T")


@pytest.fixture(params=["lmdb", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    backend: Backend
    if request.param == "lmdb":
        backend = LmdbStore.open(tmp_path / "ctx", sync=False)
    else:
        backend = MemoryBackend()
    yield backend
    backend.close()


def apply(store: Backend, **fields: Any) -> None:
    store.transact(lambda w: w.apply(Changeset(**fields)))


def frame(frame_id: str, revision: int = 1, *body: Any, **fields: Any) -> Frame:
    return Frame(id=frame_id, revision=revision, body=body, sources=(), **fields)


def event(seq: int, **fields: Any) -> Event:
    base: dict[str, Any] = {
        "id": f"ev:{seq:020x}",
        "kind": "user_message",
        "session": "s1",
        "time": 1700000000.5,
        "size": 5,
        "tokens": 2,
        "preview": "hello",
    }
    base.update(fields)
    return Event(seq=seq, **base)


PROTOCOL_MEMBERS = (
    "readonly",
    "read",
    "transact",
    "has_meta",
    "outbox_read",
    "outbox_ack",
    "outbox_last",
    "audit_read",
    "audit_newest",
    "close",
)
"""Every member :class:`storage.Backend` declares; both backends must offer each."""


def denial(holder: str = "mallory", at: float = 1000.0) -> dict[str, Any]:
    return audit_entry(
        "frame", "read", holder=holder, allowed=False, why="no grant", at=at, context="c"
    )


def allowed(i: int) -> dict[str, Any]:
    return audit_entry("export_frame", "read", holder="curator", allowed=True, why=f"x{i}", at=1.0)


def cjk(n: int, start: int = 0x4E00) -> str:
    """*n* distinct-ish Chinese characters (three UTF-8 bytes each)."""
    return "".join(chr(start + (i * 7) % 20000) for i in range(n))


WIDE = "\U00020000"  # a CJK Extension B letter: four UTF-8 bytes
LONG_CN = "发布" * 64  # 128 characters, 384 bytes
HUGE_A = WIDE * 127 + "a"  # 128 characters, 509 bytes: a hashed key
HUGE_B = WIDE * 127 + "b"
HUGE_C = WIDE * 126 + "甲z"


class TestStoreContract:
    def test_fresh_store_is_empty(self, store: Backend) -> None:
        assert store.has_meta() is False
        assert store.outbox_last() == 0
        assert store.outbox_read(0, 10) == []

        def check(v: ReadView) -> None:
            assert v.meta() == Meta()
            assert v.frame("release") is None
            assert v.event(1) is None
            assert v.event(-1) is None
            assert v.event_seq("ev:00000000000000000001") is None
            assert v.event_content(1) is None
            assert v.event_chunk(1, 0, 10) is None
            assert v.has_relation("a", "b", "c") is False
            assert v.relations_from("a") == [] and v.relations_to("a") == []
            assert v.lastmod("f:release") == 0
            assert v.client("c1") is None
            assert v.txlog(1) is None
            assert v.due(1 << 40) == []
            assert v.inbox() == []
            assert v.frame_history("release") == []
            assert list(v.iter_frames()) == []
            assert list(v.iter_events()) == []
            assert list(v.iter_relations()) == []

        store.read(check)

    def test_meta_roundtrip(self, store: Backend) -> None:
        meta = Meta(version=7, tick=3, window=12, next_seq=42, history_keep=500, created=1.25)
        apply(store, meta=meta)
        assert store.has_meta() is True
        got = store.read(lambda v: v.meta())
        assert got == meta and got is not meta
        apply(store, meta=Meta(version=8))
        assert store.read(lambda v: v.meta()).version == 8

    def test_frames_put_get_and_order(self, store: Backend) -> None:
        body = (Symbol("fact"), (Symbol("region"), Symbol("cn-shanghai")), "quoted", -3, ())
        ids = ["release", "deployment/target-v2", "发布/流程", LONG_CN, HUGE_B, HUGE_A, HUGE_C, "a"]
        assert all(is_frame_id(i) for i in ids)
        frames = [
            Frame(
                id=i,
                revision=2,
                body=body,
                sources=("ev:00000000000000000001", "release"),
                lifecycle=RETIRED,
                protected=True,
                due_tick=9,
                retire_reason="superseded",
            )
            for i in ids
        ]
        apply(store, frames=frames)

        def check(v: ReadView) -> None:
            for f in frames:
                got = v.frame(f.id)
                assert got == f
                assert isinstance(got.body[0], Symbol) and not isinstance(got.body[2], Symbol)
            assert [f.id for f in v.iter_frames()] == sorted(ids)

        store.read(check)
        apply(store, frames=[frame(HUGE_A, 3, Symbol("compact"))])
        revised = store.read(lambda v: v.frame(HUGE_A))
        assert (
            revised is not None and revised.revision == 3 and revised.body == (Symbol("compact"),)
        )
        assert store.read(lambda v: v.frame(HUGE_B)) == frames[4]

    def test_returned_records_are_fresh_objects(self, store: Backend) -> None:
        apply(store, frames=[frame("a", 1, Symbol("x"))], events=[event(1, extra={"k": [1]})])

        def mutate(v: ReadView) -> None:
            f, e = v.frame("a"), v.event(1)
            assert f is not None and e is not None
            f.revision = 99
            e.extra["k"].append(2)

        store.read(mutate)
        assert store.read(lambda v: v.frame("a")).revision == 1  # type: ignore[union-attr]
        assert store.read(lambda v: v.event(1)).extra == {"k": [1]}  # type: ignore[union-attr]

    def test_events_and_id_index(self, store: Backend) -> None:
        events = [event(s, extra={"tool": "pytest", "n": s}) for s in (3, 1, 2, 10)]
        apply(store, events=events)

        def check(v: ReadView) -> None:
            for e in events:
                assert v.event(e.seq) == e
                assert v.event_seq(e.id) == e.seq
            assert [e.seq for e in v.iter_events()] == [1, 2, 3, 10]
            assert [e.seq for e in v.iter_events(3)] == [3, 10]
            assert [e.seq for e in v.iter_events(11)] == []

        store.read(check)
        retired = event(2, lifecycle=RETIRED, retired_version=4, delivered=True)
        apply(store, events=[retired])
        assert store.read(lambda v: v.event(2)) == retired
        assert store.read(lambda v: v.event_seq(retired.id)) == 2

    def test_contents_chunked_reads(self, store: Backend) -> None:
        text = cjk(3 * CHUNK_CHARS + 100)
        apply(store, events=[event(1), event(2)], contents=[(1, text), (2, "")])

        def check(v: ReadView) -> None:
            assert v.event_content(1) == text
            assert v.event_chunk(1, 0, 10) == text[:10]
            assert v.event_chunk(1, 0, CHUNK_CHARS) == text[:CHUNK_CHARS]
            edge = CHUNK_CHARS - 5
            assert v.event_chunk(1, edge, 10) == text[edge : edge + 10]
            assert v.event_chunk(1, CHUNK_CHARS, 3) == text[CHUNK_CHARS : CHUNK_CHARS + 3]
            assert v.event_chunk(1, 5, 2 * CHUNK_CHARS + 7) == text[5 : 2 * CHUNK_CHARS + 12]
            assert v.event_chunk(1, len(text) - 4, 100) == text[-4:]
            assert v.event_chunk(1, len(text), 10) == ""
            assert v.event_chunk(1, len(text) + 5 * CHUNK_CHARS, 10) == ""
            assert v.event_chunk(1, 1 << 62, 10) == ""
            assert v.event_chunk(1, 7, 0) == ""
            assert v.event_chunk(1, 0, 1 << 62) == text
            assert v.event_content(2) == ""
            assert v.event_chunk(2, 0, 10) == ""
            assert v.event_chunk(3, 0, 10) is None
            with pytest.raises(OutOfRange):
                v.event_chunk(1, -1, 5)
            with pytest.raises(OutOfRange):
                v.event_chunk(1, 0, -5)

        store.read(check)

    def test_multi_megabyte_event(self, store: Backend) -> None:
        text = ("regression tests: 412 passed; 回归测试全部通过。\n" * 90_000)[:3_500_000]
        apply(store, events=[event(1)], contents=[(1, text)])

        def check(v: ReadView) -> None:
            assert v.event_content(1) == text
            middle = len(text) // 2
            assert v.event_chunk(1, middle, 50_000) == text[middle : middle + 50_000]
            assert v.event_chunk(1, len(text) - 3, 10) == text[-3:]

        store.read(check)

    def test_event_content_is_immutable(self, store: Backend) -> None:
        apply(store, events=[event(1)], contents=[(1, "original")])
        with pytest.raises(StoreError):
            apply(store, contents=[(1, "rewritten")])
        assert store.read(lambda v: v.event_content(1)) == "original"

    def test_relations(self, store: Backend) -> None:
        long_label = WIDE * 128
        assert is_label(long_label) and is_frame_id(LONG_CN)
        edges = [
            ("test-result", "supports", "release"),
            ("release", "supersedes", "release-v1"),
            ("test-result", "blocks", "release"),
            ("test-result", "supports", "deploy"),
            (LONG_CN, long_label, HUGE_A),
            (LONG_CN, "supports", "release"),
            (HUGE_A, long_label, LONG_CN),
            (HUGE_B, "after", HUGE_A),
            (HUGE_C, "x", "release"),
            ("发布/流程", "依赖", LONG_CN),
        ]
        apply(store, rel_add=edges)

        def check(v: ReadView) -> None:
            for s, label, o in edges:
                assert v.has_relation(s, label, o)
            assert not v.has_relation("release", "supports", "test-result")
            assert v.relations_from("test-result") == [
                ("blocks", "release"),
                ("supports", "deploy"),
                ("supports", "release"),
            ]
            assert v.relations_to("release") == sorted(
                [
                    ("test-result", "supports"),
                    ("test-result", "blocks"),
                    (LONG_CN, "supports"),
                    (HUGE_C, "x"),
                ]
            )
            assert v.relations_from(LONG_CN) == sorted(
                [(long_label, HUGE_A), ("supports", "release")]
            )
            assert v.relations_to(HUGE_A) == sorted([(LONG_CN, long_label), (HUGE_B, "after")])
            assert v.relations_to(LONG_CN) == sorted([(HUGE_A, long_label), ("发布/流程", "依赖")])
            assert v.relations_from(HUGE_B) == [("after", HUGE_A)]
            assert v.relations_from("test") == []  # a prefix of a subject is not that subject
            assert list(v.iter_relations()) == sorted(edges)

        store.read(check)
        apply(store, rel_del=[(LONG_CN, long_label, HUGE_A), ("test-result", "blocks", "release")])

        def after(v: ReadView) -> None:
            assert not v.has_relation(LONG_CN, long_label, HUGE_A)
            assert v.relations_from(LONG_CN) == [("supports", "release")]
            assert v.relations_to(HUGE_A) == [(HUGE_B, "after")]
            assert ("test-result", "blocks") not in v.relations_to("release")
            assert len(list(v.iter_relations())) == len(edges) - 2

        store.read(after)

    def test_deletions_apply_before_additions(self, store: Backend) -> None:
        apply(store, rel_add=[("a", "l", "b")], due_add=[(5, "a", 1, 1)], inbox_add=[1])
        apply(
            store,
            rel_del=[("a", "l", "b")],
            rel_add=[("a", "l", "b")],
            due_del=[(5, "a")],
            due_add=[(5, "a", 2, 3)],
            inbox_del=[1],
            inbox_add=[1],
        )

        def check(v: ReadView) -> None:
            assert v.has_relation("a", "l", "b")
            assert v.due(5) == [(5, "a", 2, 3)]
            assert v.inbox() == [1]

        store.read(check)

    def test_lastmod_clients_txlog(self, store: Backend) -> None:
        long_edge = edge_key(LONG_CN, WIDE * 128, HUGE_A)
        apply(store, lastmod={"f:release": 3, "e:@e42": 4, long_edge: 5})
        apply(store, lastmod={"f:release": 6})
        apply(store, client=("client-1", 6, b"\x00\xffdigest"))
        apply(store, client=("c" * 200, 7, bytearray(b"d2")))
        record = {
            "version": 6,
            "reason": "正式发布",
            "ops": [{"op": "derive", "id": "release"}],
            "digest": b"\x01\x02",
            "rebased": False,
            "score": 0.5,
            "none": None,
            "keys": ("f:release",),
        }
        apply(store, txlog=record)

        def check(v: ReadView) -> None:
            assert v.lastmod("f:release") == 6
            assert v.lastmod("e:@e42") == 4
            assert v.lastmod(long_edge) == 5
            assert v.lastmod(edge_key(LONG_CN, WIDE * 128, HUGE_B)) == 0
            assert v.client("client-1") == (6, b"\x00\xffdigest")
            assert v.client("c" * 200) == (7, b"d2")
            assert v.client("client-2") is None
            got = v.txlog(6)
            # msgpack has one sequence type: tuples come back as lists.
            assert got == {**record, "keys": ["f:release"]}
            assert v.txlog(5) is None

        store.read(check)
        with pytest.raises(StoreError):
            apply(store, txlog={"reason": "no version"})

    def test_history_ordering_and_as_of_reads(self, store: Backend) -> None:
        def write(*rows: tuple[str, int]) -> None:
            for frame_id, version in rows:
                apply(store, frames=[frame(frame_id, version)], history=[(frame_id, version)])

        write(("a", 5), ("a", 2), ("ab", 3), (HUGE_A, 9), (HUGE_B, 1))
        write(("a", 300), ("a", 1 << 40), (HUGE_A, 4))

        def check(v: ReadView) -> None:
            assert v.frame_history("a") == [2, 5, 300, 1 << 40]
            assert v.frame_history("ab") == [3]
            assert v.frame_history(HUGE_A) == [4, 9]
            assert v.frame_history(HUGE_B) == [1]
            assert v.frame_history("b") == []
            # As-of reads return the record kept at the last version at or before.
            at = v.frame_at
            assert at("a", 1) is None
            assert [at("a", n).revision for n in (2, 4, 5, 299, 300, 1 << 41)] == [  # type: ignore[union-attr]
                2,
                2,
                5,
                5,
                300,
                1 << 40,
            ]
            assert at("ab", 2) is None and at("ab", 3).revision == 3  # type: ignore[union-attr]
            assert at(HUGE_A, 8).revision == 4  # type: ignore[union-attr]
            assert at(HUGE_B, 100).revision == 1  # type: ignore[union-attr]
            assert at("b", 100) is None

        store.read(check)

    def test_due_range_scans(self, store: Backend) -> None:
        apply(
            store,
            due_add=[
                (108, "release", 1, 2),
                (100, "b", 1, 1),
                (100, "a", 2, 1),
                (300, HUGE_A, 1, 7),
            ],
        )

        def check(v: ReadView) -> None:
            assert v.due(99) == []
            assert v.due(100) == [(100, "a", 2, 1), (100, "b", 1, 1)]
            assert v.due(108) == [(100, "a", 2, 1), (100, "b", 1, 1), (108, "release", 1, 2)]
            assert v.due(1 << 62)[-1] == (300, HUGE_A, 1, 7)
            assert v.due(-1) == []

        store.read(check)
        apply(store, due_del=[(100, "a"), (300, HUGE_A), (5, "absent")])
        assert store.read(lambda v: v.due(1000)) == [(100, "b", 1, 1), (108, "release", 1, 2)]

    def test_inbox_ordering(self, store: Backend) -> None:
        apply(store, inbox_add=[10, 2, 3])
        apply(store, inbox_add=[300, 1])
        assert store.read(lambda v: v.inbox()) == [1, 2, 3, 10, 300]
        apply(store, inbox_del=[2, 300, 999])
        assert store.read(lambda v: v.inbox()) == [1, 3, 10]

    def test_outbox_read_and_ack(self, store: Backend) -> None:
        for v in range(1, 4):
            apply(store, outbox={"version": v, "frames": [f"f{v}"], "events": []})

        def two(w: WriteView) -> None:
            w.apply(Changeset(outbox={"version": 4, "frames": [], "events": [4]}))
            w.apply(Changeset(outbox={"version": 5, "frames": ["发布"], "events": []}))

        store.transact(two)
        assert store.outbox_last() == 5
        assert [n for n, _ in store.outbox_read(0, 2)] == [1, 2]
        assert store.outbox_read(2, 2) == [
            (3, {"version": 3, "frames": ["f3"], "events": []}),
            (4, {"version": 4, "frames": [], "events": [4]}),
        ]
        assert store.outbox_read(0, 0) == []
        store.outbox_ack(3)
        assert [n for n, _ in store.outbox_read(0, 100)] == [4, 5]
        store.outbox_ack(5)
        assert store.outbox_read(0, 100) == []
        assert store.outbox_last() == 5  # numbering never restarts
        apply(store, outbox={"version": 6, "frames": [], "events": []})
        assert store.outbox_read(0, 100) == [(6, {"version": 6, "frames": [], "events": []})]

    def test_failed_transact_leaves_nothing(self, store: Backend) -> None:
        apply(store, meta=Meta(version=1), frames=[frame("keep")], lastmod={"f:keep": 1})

        class Boom(Exception):
            pass

        def fail(w: WriteView) -> None:
            w.apply(
                Changeset(
                    meta=Meta(version=2),
                    frames=[frame("new"), frame("keep", 2)],
                    events=[event(1)],
                    contents=[(1, "x" * (CHUNK_CHARS + 1))],
                    rel_add=[("keep", "l", "new")],
                    rel_del=[],
                    lastmod={"f:keep": 2, "f:new": 2},
                    due_add=[(9, "keep", 1, 1)],
                    inbox_add=[1],
                    client=("c1", 2, b"d"),
                    txlog={"version": 2},
                    history=[("keep", 2)],
                    outbox={"version": 2},
                )
            )
            assert w.frame("new") is not None
            raise Boom

        with pytest.raises(Boom):
            store.transact(fail)

        def check(v: ReadView) -> None:
            assert v.meta().version == 1
            assert v.frame("new") is None
            assert v.frame("keep") == frame("keep")
            assert v.event(1) is None and v.event_seq(event(1).id) is None
            assert v.event_content(1) is None
            assert v.relations_from("keep") == [] and v.relations_to("new") == []
            assert v.lastmod("f:keep") == 1 and v.lastmod("f:new") == 0
            assert v.due(100) == [] and v.inbox() == []
            assert v.client("c1") is None and v.txlog(2) is None
            assert v.frame_history("keep") == []
            assert [f.id for f in v.iter_frames()] == ["keep"]

        store.read(check)
        assert store.outbox_last() == 0 and store.outbox_read(0, 10) == []
        # The store still works after the abort.
        apply(store, frames=[frame("new")])
        assert store.read(lambda v: v.frame("new")) == frame("new")

    def test_reads_inside_transact_see_earlier_applies(self, store: Backend) -> None:
        apply(store, frames=[frame("old")])
        text = cjk(CHUNK_CHARS + 10)

        def group(w: WriteView) -> list[str]:
            w.apply(
                Changeset(meta=Meta(version=1), frames=[frame("b")], rel_add=[("b", "x", "old")])
            )
            assert w.meta().version == 1
            assert w.frame("b") == frame("b")
            assert w.relations_from("b") == [("x", "old")]
            assert w.relations_to("old") == [("b", "x")]
            w.apply(Changeset(events=[event(1)], contents=[(1, text)], inbox_add=[1]))
            assert w.event_seq(event(1).id) == 1
            assert w.event_chunk(1, CHUNK_CHARS - 2, 4) == text[CHUNK_CHARS - 2 : CHUNK_CHARS + 2]
            assert w.inbox() == [1]
            w.apply(
                Changeset(
                    meta=Meta(version=2),
                    frames=[frame("b", 2)],
                    rel_del=[("b", "x", "old")],
                    inbox_del=[1],
                    history=[("b", 1), ("b", 2)],
                    due_add=[(3, "b", 1, 2)],
                )
            )
            assert w.frame("b") == frame("b", 2)
            assert not w.has_relation("b", "x", "old")
            assert w.inbox() == [] and w.frame_history("b") == [1, 2]
            assert w.due(3) == [(3, "b", 1, 2)]
            # A plain read of the store meanwhile sees only committed state.
            assert store.read(lambda v: v.frame("b")) is None
            return [f.id for f in w.iter_frames()]

        assert store.transact(group) == ["b", "old"]
        assert store.read(lambda v: (v.meta().version, v.frame("b"))) == (2, frame("b", 2))

    def test_view_is_valid_only_inside_its_callback(self, store: Backend) -> None:
        apply(store, frames=[frame("a"), frame("b")])
        leaked_view = store.read(lambda v: v)
        leaked_iter = store.read(lambda v: v.iter_frames())
        with pytest.raises(StoreError):
            leaked_view.frame("a")
        with pytest.raises(StoreError):
            next(leaked_iter)
        leaked_write = store.transact(lambda w: w)
        with pytest.raises(StoreError):
            leaked_write.apply(Changeset(frames=[frame("c")]))
        assert store.read(lambda v: v.frame("c")) is None

    def test_transact_cannot_nest(self, store: Backend) -> None:
        with pytest.raises(StoreError):
            store.transact(lambda w: store.transact(lambda w2: None))

    def test_closed_store_refuses(self, store: Backend) -> None:
        store.close()
        store.close()
        with pytest.raises(StoreError):
            store.read(lambda v: v.meta())
        with pytest.raises(StoreError):
            apply(store, meta=Meta(version=1))
        for call in (
            store.has_meta,
            store.outbox_last,
            lambda: store.outbox_read(0, 10),
            lambda: store.outbox_ack(1),
            lambda: store.audit_read(0, 10),
            lambda: store.audit_newest(None, 10),
        ):
            with pytest.raises(StoreError):
                call()

    def test_satisfies_the_backend_protocol(self, store: Backend) -> None:
        assert isinstance(store, Backend)
        assert store.readonly is False
        for name in PROTOCOL_MEMBERS:
            assert hasattr(store, name), name

    # -- the audit table ------------------------------------------------------

    def test_fresh_audit_table_is_empty(self, store: Backend) -> None:
        assert store.audit_read(0, 10) == []
        assert store.audit_newest(None, 10) == []
        assert store.audit_read(0, 0) == []
        assert store.audit_read(1 << 64, 10) == []

    def test_audit_rows_append_and_page(self, store: Backend) -> None:
        apply(store, audit=[allowed(1), allowed(2)])

        def more(w: WriteView) -> None:
            w.apply(Changeset(audit=[allowed(3)]))
            w.apply(Changeset(audit=[allowed(4), allowed(5)]))

        store.transact(more)
        rows = store.audit_read(0, 100)
        assert [n for n, _ in rows] == [1, 2, 3, 4, 5]
        assert [r["why"] for _, r in rows] == ["x1", "x2", "x3", "x4", "x5"]
        assert all(r["allowed"] is True and r["holder"] == "curator" for _, r in rows)
        assert [n for n, _ in store.audit_read(2, 2)] == [3, 4]
        assert store.audit_read(5, 10) == []
        assert store.audit_read(0, 0) == []
        # newest first, below a number or from the newest
        assert [n for n, _ in store.audit_newest(None, 2)] == [5, 4]
        assert [n for n, _ in store.audit_newest(4, 10)] == [3, 2, 1]
        assert [n for n, _ in store.audit_newest(1 << 70, 1)] == [5]
        assert store.audit_newest(1, 10) == [] and store.audit_newest(None, 0) == []
        assert store.audit_newest(None, 100) == list(reversed(rows))

    def test_refusals_coalesce_without_rewriting_a_row(self, store: Backend) -> None:
        apply(store, audit=[denial(at=1000.0), denial(holder="eve", at=1001.0), denial(at=1001.5)])
        first = store.audit_read(0, 100)
        apply(store, audit=[denial(at=1002.0)])  # same holder and reason, same window
        rows = store.audit_read(0, 100)
        assert rows[:2] == first  # written rows never change
        assert [n for n, _ in rows] == [1, 2, 3]
        assert rows[0][1]["count"] == 2 and rows[0][1]["holder"] == "mallory"
        assert rows[1][1]["count"] == 1 and rows[1][1]["holder"] == "eve"
        assert rows[2][1]["coalesces"] == 1 and rows[2][1]["count"] == 1

    def test_audit_rows_leave_meta_and_outbox_alone(self, store: Backend) -> None:
        apply(
            store, meta=Meta(version=3, tick=2), outbox={"version": 3, "frames": [], "events": []}
        )
        apply(store, audit=[allowed(1), denial()])
        assert store.read(lambda v: v.meta()) == Meta(version=3, tick=2)
        assert store.outbox_last() == 1
        assert len(store.audit_read(0, 10)) == 2

    def test_an_audit_entry_in_a_failed_write_is_not_kept(self, store: Backend) -> None:
        def run(w: WriteView) -> None:
            w.apply(Changeset(audit=[denial()]))
            raise RuntimeError("the write fails after the append")

        with pytest.raises(RuntimeError):
            store.transact(run)
        assert store.audit_read(0, 10) == []
        assert read_audit(store) == []
        apply(store, audit=[denial()])
        assert [n for n, _ in store.audit_read(0, 10)] == [1]  # the number was not spent

    def test_append_and_page_back_without_touching_the_state(self, store: Backend) -> None:
        ctx = Context(store)
        ctx.commit("(context-tx (base-version 0) (derive a (x)))")
        before = (ctx.meta().to_dict(), ctx.state(), ctx.txlog(1))
        record_audit(store, [denial(at=1000.0), denial(holder="eve", at=1001.0)])
        record_audit(store, [denial(at=1002.0)])  # coalesced: row 3 counts on top of row 1
        for i in range(5):
            entry = audit_entry(
                "export_frame", "read", holder="curator", allowed=True, why=f"x{i}", at=1003.0 + i
            )
            record_audit(store, [entry])
        assert (ctx.meta().to_dict(), ctx.state(), ctx.txlog(1)) == before
        rows = read_audit(store, 0, 100)
        assert [r["seq"] for r in rows] == [1, 2, 3, 4, 5, 6, 7, 8]
        assert rows[0]["count"] == 1 and rows[0]["holder"] == "mallory"
        assert rows[2]["coalesces"] == 1 and rows[2]["holder"] == "mallory"
        assert rows[0]["context"] == "c"
        assert [r["seq"] for r in read_audit(store, 3, 2)] == [4, 5]
        assert read_audit(store, 8, 10) == []
        with pytest.raises(OutOfRange):
            read_audit(store, 0, 0)
