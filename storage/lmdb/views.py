"""Read and write views over one LMDB transaction: the :mod:`protocol.view` interfaces on disk.

A view is valid only inside the ``read()``/``transact()`` callback it was
handed to; every method refuses use after it and translates LMDB errors to
:class:`~protocol.errors.StoreError` (:func:`_guard`).

Names with a leading underscore are shared between the modules of
:mod:`storage.lmdb` only; :mod:`storage.lmdb` lists the public ones.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Concatenate, ParamSpec, TypeVar

import lmdb
import msgpack

from protocol.errors import OutOfRange, StoreError
from protocol.forget import Rewrite
from protocol.governance import append_audit
from protocol.state import Event, Frame, Meta
from protocol.view import Changeset
from protocol.wire import ext_default
from storage.environment import MapFull
from storage.keys import audit_key
from storage.lmdb.audit import _AuditRows
from storage.lmdb.environment import _store_error
from storage.lmdb.records import (
    _CHUNK_KEY,
    _MAIN,
    _MAIN_META,
    _MAIN_OUTBOX_SEQ,
    _U32_MAX,
    _U64,
    _U64_MAX,
    CHUNK_CHARS,
    STORE_FORMAT,
    _cite_prefix,
    _cluster,
    _Decoded,
    _enc,
    _fwd_key,
    _history_prefix,
    _lastmod_place,
    _meta_place,
    _rev_key,
    _sorted_runs,
    _txlog_version,
    _u64,
    _unpack,
)

T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R")

_V = TypeVar("_V", bound="_LmdbReadView")


def _guard(method: Callable[Concatenate[_V, P], R]) -> Callable[Concatenate[_V, P], R]:
    """Refuse use after the callback, and translate LMDB errors at the view boundary."""

    @functools.wraps(method)
    def guarded(self: _V, /, *args: P.args, **kwargs: P.kwargs) -> R:
        if self._closed:  # self._check(), inline: this runs on every store read and write
            raise _used_outside()
        try:
            return method(self, *args, **kwargs)
        except lmdb.Error as e:
            failed = self._failed(e)
            failed.__cause__ = e  # set as well: the compiled build (mypyc) loses this chain
            raise failed from e

    return guarded


def _used_outside() -> StoreError:
    return StoreError("a store view was used outside its read()/transact() callback")


class _LmdbReadView:
    """A :class:`~protocol.view.ReadView` over one LMDB transaction, valid inside its callback."""

    __slots__ = ("_txn", "_db", "_closed", "_map_full", "_decoded", "_format")

    def __init__(
        self,
        txn: lmdb.Transaction[bytes],
        dbs: dict[str, lmdb._Database],
        decoded: _Decoded | None = None,
        fmt: int = STORE_FORMAT,
    ) -> None:
        self._txn = txn
        self._db = dbs
        self._closed = False
        self._map_full = False
        self._decoded = _Decoded() if decoded is None else decoded
        self._format = fmt
        """The store format this snapshot is in (1 only on a read-only open of an old store)."""

    @property
    def _history_db(self) -> str:
        return "frames" if self._format >= 2 else "history"

    def _check(self) -> None:
        if self._closed:
            raise _used_outside()

    def _failed(self, e: lmdb.Error) -> StoreError:
        """The error *e* becomes at the view boundary: a full map is noted and becomes
        :class:`MapFull` (the store grows the map and runs the write again)."""
        if isinstance(e, lmdb.MapFullError):
            self._map_full = True
            return MapFull("the LMDB map is full; the write will be retried")
        return _store_error(e)

    def _scan(self, db: str, start: bytes, prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        """Rows of *db* from key *start* on, while keys begin with *prefix*."""
        cursor = self._txn.cursor(db=self._db[db])
        if not cursor.set_range(start):
            return
        for key, value in cursor.iternext():
            if not key.startswith(prefix):
                return
            yield key, value

    def _iterate(self, rows: Iterator[T]) -> Iterator[T]:
        """*rows*, checked for use after the callback and with LMDB errors translated."""
        while True:
            self._check()
            try:
                item = next(rows)
            except StopIteration:
                return
            except lmdb.Error as e:
                raise _store_error(e) from e
            yield item

    @_guard
    def _raw(self, fn: Callable[[lmdb.Transaction[bytes], Mapping[str, lmdb._Database]], T]) -> T:
        return fn(self._txn, self._db)

    @_guard
    def meta(self) -> Meta:
        key, _, db = _meta_place(self._format)
        data = self._txn.get(key, db=self._db[db])
        if data is None:
            return Meta()
        known = self._decoded.meta
        if known is not None and known[0] == data:
            return known[1].copy()
        meta = Meta.from_record(_unpack(data))
        self._decoded.meta = (data, meta.copy())
        return meta

    def frame(self, frame_id: str) -> Frame | None:
        # The reads and the write a commit makes (frame, event, has_relation, client,
        # apply) hold _guard's checks written out: one Python call less each.
        if self._closed:
            raise _used_outside()
        key = _enc(frame_id, 400)
        try:
            data = self._txn.get(key, db=self._db["frames"])
        except lmdb.Error as e:
            raise self._failed(e) from e
        if data is None:
            return None
        known = self._decoded.frames.get(key)
        if known is not None and known[0] == data:
            return known[1].copy()
        frame = Frame.from_record(_unpack(data))
        self._decoded.remember_frame(key, data, frame)
        return frame

    @_guard
    def event(self, seq: int) -> Event | None:
        if not 0 <= seq <= _U64_MAX:
            return None
        data = self._txn.get(_u64(seq), db=self._db["events"])
        return None if data is None else Event.from_record(_unpack(data))

    @_guard
    def event_seq(self, event_id: str) -> int | None:
        data = self._txn.get(_enc(event_id, 400), db=self._db["event_ids"])
        return None if data is None else int(_U64.unpack(data)[0])

    @_guard
    def event_content(self, seq: int) -> str | None:
        if not 0 <= seq <= _U64_MAX:
            return None
        prefix = _u64(seq)
        chunks = [v for _, v in self._scan("contents", prefix, prefix)]
        return b"".join(chunks).decode() if chunks else None

    @_guard
    def event_chunk(self, seq: int, offset: int, length: int) -> str | None:
        if offset < 0 or length < 0:
            raise OutOfRange(f"offset and length must not be negative, not {offset}, {length}")
        if not 0 <= seq <= _U64_MAX:
            return None
        contents = self._db["contents"]
        first = offset // CHUNK_CHARS
        if first > _U32_MAX or length == 0:
            exists = self._txn.get(_CHUNK_KEY.pack(seq, 0), db=contents) is not None
            return "" if exists else None
        last = (offset + length - 1) // CHUNK_CHARS
        prefix = _u64(seq)
        parts: list[bytes] = []
        for key, value in self._scan("contents", _CHUNK_KEY.pack(seq, first), prefix):
            if _CHUNK_KEY.unpack(key)[1] > last:
                break
            parts.append(value)
        if not parts:
            exists = self._txn.get(_CHUNK_KEY.pack(seq, 0), db=contents) is not None
            return "" if exists else None
        start = offset - first * CHUNK_CHARS
        return b"".join(parts).decode()[start : start + length]

    def has_relation(self, subject: str, label: str, obj: str) -> bool:
        if self._closed:  # _guard, written out (see frame)
            raise _used_outside()
        key = _fwd_key(subject, label, obj)
        try:
            return self._txn.get(key, db=self._db["rel_fwd"]) is not None
        except lmdb.Error as e:
            raise self._failed(e) from e

    @_guard
    def relations_from(self, subject: str) -> list[tuple[str, str]]:
        prefix = _enc(subject, 200) + b"\x00"
        out = []
        for _, value in self._scan("rel_fwd", prefix, prefix):
            _, label, obj = _unpack(value)
            out.append((label, obj))
        return sorted(out)

    @_guard
    def relations_to(self, obj: str) -> list[tuple[str, str]]:
        prefix = _enc(obj, 200) + b"\x00"
        out = []
        for _, value in self._scan("rel_rev", prefix, prefix):
            edge = _unpack(value)
            if type(edge) is list:  # not a citation (format 2 keeps them here)
                out.append((edge[0], edge[1]))
        return sorted(out)

    @_guard
    def cited_by(self, source: str) -> list[str]:
        if self._format >= 2:
            prefix = _cite_prefix(source)
            rows = (_unpack(v) for _, v in self._scan("rel_rev", prefix, prefix))
            return sorted(fid for fid in rows if type(fid) is str)  # not an edge
        prefix = _enc(source, 250) + b"\x00"
        out = [_unpack(v) for _, v in self._scan("cites", prefix, prefix)]
        return sorted(out)

    @_guard
    def lastmod(self, key: str) -> int:
        place = _lastmod_place(key) if self._format >= 3 else None
        if place is None:
            data = self._txn.get(_enc(key, 400), db=self._db["lastmod"])
        else:
            data = self._txn.get(place[1], db=self._db[place[0]])
            if data is None and len(key) > 100 and len(key.encode()) > 400:
                # A key hashed before format 3 could not be moved by the migration.
                data = self._txn.get(_enc(key, 400), db=self._db["lastmod"])
        return 0 if data is None else int(_U64.unpack(data)[0])

    def client(self, client_id: str) -> tuple[int, bytes] | None:
        if self._closed:  # _guard, written out (see frame)
            raise _used_outside()
        key = _enc(client_id, 400)
        try:
            data = self._txn.get(key, db=self._db["clients"])
        except lmdb.Error as e:
            raise self._failed(e) from e
        if data is None:
            return None
        version, digest = _unpack(data)
        return version, digest

    @_guard
    def txlog(self, version: int) -> dict[str, Any] | None:
        if not 0 <= version <= _U64_MAX:
            return None
        data = self._txn.get(_u64(version), db=self._db["txlog"])
        return None if data is None else _unpack(data)

    @_guard
    def due(self, upto_tick: int) -> list[tuple[int, str, int, int]]:
        out = []
        for key, value in self._scan("due", b""):
            tick = _U64.unpack(key[:8])[0]
            if tick > upto_tick:
                break
            frame_id, gen, revision = _unpack(value)
            out.append((tick, frame_id, gen, revision))
        return sorted(out)

    @_guard
    def inbox(self) -> list[int]:
        return [_U64.unpack(key)[0] for key, _ in self._scan("inbox", b"")]

    @_guard
    def frame_history(self, frame_id: str) -> list[int]:
        prefix = _history_prefix(frame_id)
        rows = self._scan(self._history_db, prefix, prefix)
        return [_U64.unpack(key[-8:])[0] for key, _ in rows if len(key) == len(prefix) + 8]

    @_guard
    def frame_at(self, frame_id: str, version: int) -> Frame | None:
        prefix = _history_prefix(frame_id)
        cursor = self._txn.cursor(db=self._db[self._history_db])
        # The last history row of this frame at or before *version*.
        if not cursor.set_range(prefix + _u64(min(max(version, 0), _U64_MAX))):
            if not cursor.last():
                return None
        elif cursor.key() != prefix + _u64(min(max(version, 0), _U64_MAX)):
            if not cursor.prev():
                return None
        key = cursor.key()
        if not key.startswith(prefix) or len(key) != len(prefix) + 8:
            return None
        return Frame.from_record(_unpack(cursor.value()))

    @_guard
    def traces(self, after: int, limit: int) -> list[tuple[int, dict[str, Any]]]:
        out: list[tuple[int, dict[str, Any]]] = []
        if limit <= 0 or after >= _U64_MAX:
            return out
        for key, value in self._scan("traces", _u64(max(after + 1, 0))):
            out.append((_U64.unpack(key)[0], _unpack(value)))
            if len(out) >= limit:
                break
        return out

    @_guard
    def iter_frames(self) -> Iterator[Frame]:
        scan = self._current_frames() if self._format >= 2 else self._scan("frames", b"")
        rows = ((k, Frame.from_record(_unpack(v))) for k, v in scan)
        return self._iterate(_sorted_runs(rows, lambda f: f.id))

    def _current_frames(self) -> Iterator[tuple[bytes, bytes]]:
        """The current frame records of ``frames`` (format 2 on), skipping the history
        and lastmod rows that follow each one (a cursor jump per frame, not a read per
        row)."""
        cursor = self._txn.cursor(db=self._db["frames"])
        found = cursor.first()
        while found:
            key = cursor.key()
            cluster = _cluster(key)
            if len(cluster) == len(key):
                yield key, cursor.value()
            found = cursor.set_range(cluster + b"\x03")

    @_guard
    def iter_events(self, start_seq: int = 1) -> Iterator[Event]:
        if start_seq > _U64_MAX:
            return iter(())
        rows = self._scan("events", _u64(max(start_seq, 0)))
        # Format 3 keeps an observation's lastmod row after it, under 9 bytes.
        return self._iterate(Event.from_record(_unpack(v)) for k, v in rows if len(k) == 8)

    @_guard
    def iter_relations(self) -> Iterator[tuple[str, str, str]]:
        rows = ((k, tuple(_unpack(v))) for k, v in self._scan("rel_fwd", b""))
        return self._iterate(_sorted_runs(rows, lambda edge: edge))


def in_transaction(
    view: object, fn: Callable[[lmdb.Transaction[bytes], Mapping[str, lmdb._Database]], T]
) -> T:
    """Run *fn* on the LMDB transaction under *view* and the store's named databases.

    For records that must be written in the very transaction of the data they
    describe while the :class:`~protocol.view.WriteView` interface has no place for
    them (the replication record, :mod:`storage.replication.fence`). *view* must be a
    view an :class:`~storage.lmdb.store.LmdbStore` handed to a callback, used inside it
    (:class:`StoreError` otherwise). A full map raises
    :class:`~storage.environment.MapFull` (the store grows the map and runs the write
    again, even if the caller swallows it); other LMDB failures raise :class:`StoreError`.
    """
    if not isinstance(view, _LmdbReadView):
        raise StoreError("this needs a view of an LMDB context store")
    return view._raw(fn)


class _LmdbWriteView(_LmdbReadView):
    """A :class:`~protocol.view.WriteView` over one LMDB write transaction."""

    __slots__ = ("_outbox_seq", "_pk", "_indexed")

    def __init__(
        self,
        txn: lmdb.Transaction[bytes],
        dbs: dict[str, lmdb._Database],
        decoded: _Decoded | None = None,
    ) -> None:
        super().__init__(txn, dbs, decoded)
        self._outbox_seq: int | None = None
        # Sequence number -> stable id of the events this write read or wrote: their
        # id is in event_ids already (every event is written with its index row).
        self._indexed: dict[int, str] = {}
        # One Packer per write: cheaper than packb's fresh Packer per record.
        self._pk = msgpack.Packer(use_bin_type=True, default=ext_default)

    @_guard
    def apply(self, changes: Changeset) -> None:
        """Write *changes*; deletions of relations, due entries and inbox rows come first."""
        txn, db, pack = self._txn, self._db, self._pk.pack
        put = txn.put
        if changes.meta is not None:
            record = pack(changes.meta.to_record())
            put(_MAIN_META, record, db=db[_MAIN])  # a page every commit writes
            # Every write reads the meta record first: remember it as written (its
            # fields are plain numbers and strings, so decoding gives it back as is).
            self._decoded.meta = (record, changes.meta.copy())
        frames_db = db["frames"]
        # Frame id -> (its key, its record's bytes): a frame's history and lastmod rows
        # reuse both.
        written: dict[str, bytes] = {}
        packed: dict[str, bytes] = {}
        for frame in changes.frames:
            fid = frame.id
            frame_key = fid.encode()
            if len(frame_key) > 400:
                frame_key = _enc(fid, 400)
            written[fid] = frame_key
            record = packed[fid] = pack(frame.record_for_encoding())
            put(frame_key, record, db=frames_db)
        if changes.events:
            events_db = db["events"]
            indexed = self._indexed
            for event in changes.events:
                seq = event.seq
                put(_u64(seq), pack(event.to_record()), db=events_db)
                # An event's id never changes: an update of a known event writes no index
                # page (overwrite=False), and one this write has seen needs no lookup.
                if indexed.get(seq) != event.id:
                    put(_enc(event.id, 400), _u64(seq), db=db["event_ids"], overwrite=False)
                    indexed[seq] = event.id
        for seq, text in changes.contents:
            self._put_content(seq, text)
        rel_rev = db["rel_rev"]
        if changes.rel_del or changes.rel_add:
            rel_fwd = db["rel_fwd"]
            for s, label, o in changes.rel_del:
                txn.delete(_fwd_key(s, label, o), db=rel_fwd)
                txn.delete(_rev_key(s, label, o), db=rel_rev)
            for s, label, o in changes.rel_add:
                edge = pack([s, label, o])
                put(_fwd_key(s, label, o), edge, db=rel_fwd)
                put(_rev_key(s, label, o), edge, db=rel_rev)
        for source, frame_id in changes.cites_add:
            put(_cite_prefix(source) + _enc(frame_id, 250), pack(frame_id), db=rel_rev)
        if changes.lastmod:
            # A changeset's keys all carry its one version: encode it once.
            last_version: int | None = None
            value = b""
            for key, version in changes.lastmod.items():
                if version != last_version or last_version is None:
                    last_version, value = version, _u64(version)
                # Beside the frame, edge or observation it names (format 3), so it
                # dirties a page the commit writes anyway. A frame this changeset
                # writes has its key encoded already: _lastmod_place's rule, inline.
                kind = key[:2]
                if kind == "f:" or kind == "l:":
                    ident = key[2:]
                    known = written.get(ident)
                    if known is not None and ident.isprintable():
                        put(
                            known + (b"\x02f" if kind == "f:" else b"\x02l"),
                            value,
                            db=frames_db,
                        )
                        continue
                elif kind == "b:":
                    ident, sep, rest = key[2:].partition("\x00")
                    known = written.get(ident)
                    if known is not None and sep and ident.isprintable():
                        tail = rest.encode()
                        if len(tail) > 40:
                            tail = _enc(rest, 40)
                        put(known + b"\x02b" + tail, value, db=frames_db)
                        continue
                place = _lastmod_place(key, written)
                if place is None:
                    put(_enc(key, 400), value, db=db["lastmod"])
                else:
                    put(place[1], value, db=db[place[0]])
        for tick, frame_id in changes.due_del:
            txn.delete(_u64(tick) + _enc(frame_id, 400), db=db["due"])
        for tick, frame_id, gen, revision in changes.due_add:
            row = pack([frame_id, gen, revision])
            put(_u64(tick) + _enc(frame_id, 400), row, db=db["due"])
        for seq in changes.inbox_del:
            txn.delete(_u64(seq), db=db["inbox"])
        for seq in changes.inbox_add:
            put(_u64(seq), b"", db=db["inbox"])
        if changes.client is not None:
            client_id, version, digest = changes.client
            put(_enc(client_id, 400), pack([version, bytes(digest)]), db=db["clients"])
        txlog = changes.txlog
        if txlog is not None:
            number = txlog.get("version")
            if type(number) is not int or not 0 <= number <= _U64_MAX:
                number = _txlog_version(txlog)  # raises: not a version
            put(_U64.pack(number), pack(txlog), db=db["txlog"])
        for frame_id, version in changes.history:
            # Beside the frame's current record (format 2): its bytes as just written.
            known = written.get(frame_id)
            frame_key = _enc(frame_id, 400) if known is None else known
            put(frame_key + b"\x00" + _u64(version), packed[frame_id], db=frames_db)
        if changes.trace is not None:
            cursor = txn.cursor(db=db["traces"])
            last = _U64.unpack(cursor.key())[0] if cursor.last() else 0
            put(_u64(last + 1), pack(changes.trace), db=db["traces"], append=True)
        if changes.outbox is not None:
            number = self._outbox_seq
            if number is None:
                data = txn.get(_MAIN_OUTBOX_SEQ, db=db[_MAIN])
                number = 0 if data is None else _U64.unpack(data)[0]
            number += 1
            self._outbox_seq = number
            put(_u64(number), pack(changes.outbox), db=db["outbox"], append=True)
        if changes.audit:
            append_audit(_AuditRows(txn, db), changes.audit, now=time.time(), key=audit_key())

    @_guard
    def rewrite(self, rw: Rewrite) -> None:
        """Overwrite records in place (forgetting, :mod:`protocol.forget`): an event's text
        whole (every old chunk deleted first), frame history rows, log records."""
        txn, db, pack = self._txn, self._db, self._pk.pack
        for seq, text in rw.contents:
            prefix = _u64(seq)
            cursor = txn.cursor(db=db["contents"])
            if cursor.set_range(prefix):
                while cursor.key()[:8] == prefix:
                    if not cursor.delete():
                        break
            self._put_content(seq, text)
        for frame_id, version, frame in rw.history:
            txn.put(
                _history_prefix(frame_id) + _u64(version),
                pack(frame.to_record()),
                db=db["frames"],
            )
        for record in rw.txlog:
            txn.put(_u64(_txlog_version(record)), pack(record), db=db["txlog"])

    def event(self, seq: int) -> Event | None:
        # _LmdbReadView.event, inlined (every transaction that cites or retires an
        # observation reads it here), noting the event's id as known to event_ids;
        # _guard written out (see frame).
        if self._closed:
            raise _used_outside()
        if not 0 <= seq <= _U64_MAX:
            return None
        try:
            data = self._txn.get(_U64.pack(seq), db=self._db["events"])
        except lmdb.Error as e:
            raise self._failed(e) from e
        if data is None:
            return None
        event = Event.from_record(_unpack(data))
        self._indexed[event.seq] = event.id
        return event

    def _finish(self) -> None:
        """Write what is kept per write rather than per changeset (the outbox counter)."""
        if self._outbox_seq is not None:
            self._txn.put(_MAIN_OUTBOX_SEQ, _u64(self._outbox_seq), db=self._db[_MAIN])

    def _put_content(self, seq: int, text: str) -> None:
        contents = self._db["contents"]
        _u64(seq)  # range check
        for i in range(max(1, -(-len(text) // CHUNK_CHARS))):
            chunk = text[i * CHUNK_CHARS : (i + 1) * CHUNK_CHARS].encode()
            # Event text is immutable (R2): chunk 0 already present means a second write.
            if not self._txn.put(_CHUNK_KEY.pack(seq, i), chunk, overwrite=False, db=contents):
                raise StoreError(f"the content of event @e{seq} is immutable")
