"""LMDB persistence of one context: one LMDB environment per context directory.

Layout of ``<path>/``: ``data.mdb`` and ``lock.mdb`` (LMDB's own) and
``writer.lock``, which a writing :class:`LmdbStore` holds with an exclusive
``flock`` for as long as it is open.

Named databases and their keys (``u64`` is 8-byte big-endian, so numeric
order is byte order; ``enc(text, n)`` is defined by :func:`_enc`)::

    meta       b"meta" -> Meta record; b"format" -> format byte; b"outbox_seq" -> u64
    frames     enc(frame id, 400)                     -> Frame record
    events     u64(seq)                               -> Event record
    event_ids  enc(event id, 400)                     -> u64(seq)
    contents   u64(seq) + u32(chunk)                  -> UTF-8 of CHUNK_CHARS characters
    rel_fwd    enc(subject, 200) 00 enc(label 00 object, 200) -> [subject, label, object]
    rel_rev    enc(object, 200) 00 enc(subject 00 label, 200) -> [subject, label, object]
    cites      enc(source, 250) 00 enc(frame id, 250)  -> b"" (frames citing a source)
    lastmod    enc(footprint key, 400)                -> u64(version)
    clients    enc(client id, 400)                    -> [version, digest]
    txlog      u64(version)                           -> txlog record
    history    enc(frame id, 400) 00 u64(version)     -> Frame record as of that version
    due        u64(due tick) + enc(frame id, 400)     -> [frame id, gen, revision]
    inbox      u64(seq)                               -> b""
    outbox     u64(number)                            -> index intent
    traces     u64(number)                            -> model-call trace (R39)
    audit      u64(sequence)                          -> audit record (R42, R43)

``meta`` also keeps ``b"audit_state"``: the bookkeeping of
:func:`protocol.governance.append_audit` (last sequence number, the current
coalescing window, the count of refused rows kept). The ``audit`` database is
created by the first writing open; a read-only open of an older store that
lacks it reads an empty audit log.

Records are msgpack (``use_bin_type=True``); what a read returns is what
``from_record`` builds from it, so tuples inside free-form dicts come back as
lists.
"""

from __future__ import annotations

import enum
import errno
import fcntl
import functools
import hashlib
import os
import re
import struct
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Concatenate, ParamSpec, TypeVar

import lmdb
import msgpack

from protocol.errors import OutOfRange, StoreError, StoreLocked
from protocol.governance import append_audit
from protocol.state import Event, Frame, Meta
from protocol.view import Changeset, ReadView, WriteView

T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R")

CHUNK_CHARS = 16384
"""Characters per stored chunk of an event's text; a chunked read touches only its chunks."""
DEFAULT_MAP_SIZE = 64 << 20
"""Initial map size of a new environment; the map doubles whenever a write fills it."""
MAX_MAP_SIZE = 1 << 44
"""The map never grows past this (16 TiB); a write that would need more fails."""
STORE_FORMAT = 1
"""Version of the key layout and record encoding, kept under ``meta/format``."""

_MAX_DBS = 32
_DB_NAMES = (
    "meta",
    "frames",
    "events",
    "event_ids",
    "contents",
    "rel_fwd",
    "rel_rev",
    "cites",
    "lastmod",
    "clients",
    "txlog",
    "history",
    "due",
    "inbox",
    "outbox",
    "traces",
)
_OPTIONAL_DBS = ("audit",)
"""Databases newer than the format: created by a writer, absent from older stores."""
_META = b"meta"
_FORMAT = b"format"
_OUTBOX_SEQ = b"outbox_seq"
_AUDIT_STATE = b"audit_state"

_U64 = struct.Struct(">Q")
_CHUNK_KEY = struct.Struct(">QI")
_U64_MAX = (1 << 64) - 1
_U32_MAX = (1 << 32) - 1
_HASHED = b"\xff"
_GROUP_RE = re.compile(rb"[^\x00\xff]*")


def _pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)  # type: ignore[no-any-return]


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def _u64(n: int) -> bytes:
    if not 0 <= n <= _U64_MAX:
        raise StoreError(f"{n} is outside the unsigned 64-bit range of store keys")
    return _U64.pack(n)


def _enc(text: str, limit: int) -> bytes:
    """A key part for *text*: its UTF-8 if at most *limit* bytes, else a hashed form.

    The hashed form is the first *limit* bytes, ``0xff`` and the hex blake2b
    digest of the whole. UTF-8 never contains ``0xff`` (nor, for valid ids,
    ``0x00``), so raw and hashed parts never collide, and byte order still
    agrees with string order except between long texts sharing their first
    *limit* bytes; iterators re-sort those runs (see :func:`_sorted_runs`).
    """
    raw = text.encode()
    if len(raw) <= limit:
        return raw
    digest = hashlib.blake2b(raw, digest_size=16).hexdigest().encode()
    return raw[:limit] + _HASHED + digest


def _fwd_key(subject: str, label: str, obj: str) -> bytes:
    return _enc(subject, 200) + b"\x00" + _enc(f"{label}\x00{obj}", 200)


def _rev_key(subject: str, label: str, obj: str) -> bytes:
    return _enc(obj, 200) + b"\x00" + _enc(f"{subject}\x00{label}", 200)


def _group(key: bytes) -> bytes:
    """The bytes of *key* before its first separator or hash marker."""
    m = _GROUP_RE.match(key)
    assert m is not None
    return m.group()


def _sorted_runs(rows: Iterable[tuple[bytes, T]], sort_key: Callable[[T], Any]) -> Iterator[T]:
    """Yield *rows*' items in true order, re-sorting runs whose keys share a group.

    Only entries whose first key part was hashed can be out of order, and they
    are contiguous with the other members of their group, so buffering one
    group at a time suffices.
    """
    run: list[T] = []
    current: bytes | None = None
    for key, item in rows:
        group = _group(key)
        if group != current:
            run.sort(key=sort_key)
            yield from run
            run = []
            current = group
        run.append(item)
    run.sort(key=sort_key)
    yield from run


class _MapFull(StoreError):
    """Raised inside a write when the map is full; :meth:`LmdbStore.transact` grows and retries."""


class _Retry(enum.Enum):
    GROW = "grow"
    ADOPT = "adopt"


def _store_error(e: lmdb.Error) -> StoreError:
    return StoreError(f"LMDB failed: {e}")


_V = TypeVar("_V", bound="_LmdbReadView")


def _guard(method: Callable[Concatenate[_V, P], R]) -> Callable[Concatenate[_V, P], R]:
    """Refuse use after the callback, and translate LMDB errors at the view boundary."""

    @functools.wraps(method)
    def guarded(self: _V, /, *args: P.args, **kwargs: P.kwargs) -> R:
        if self._closed:  # self._check(), inline: this runs on every store read and write
            raise StoreError("a store view was used outside its read()/transact() callback")
        try:
            return method(self, *args, **kwargs)
        except lmdb.MapFullError as e:
            self._map_full = True
            raise _MapFull("the LMDB map is full; the write will be retried") from e
        except lmdb.Error as e:
            raise _store_error(e) from e

    return guarded


_MEMO_FRAMES = 1024
"""Most frames :class:`_Decoded` remembers; it forgets them all when it would hold more."""
_MEMO_BYTES = 16384
"""Largest frame record :class:`_Decoded` remembers (so it holds a few MiB at most)."""


class _Decoded:
    """Records of one environment this process decoded (or wrote) lately, with their bytes.

    msgpack decoding dominates reading a record. A read whose stored bytes equal
    the bytes remembered for that key is answered with a copy of the record
    decoded from them, which is what decoding would give: the check is on the
    bytes, so what an aborted write or another process left behind is never
    served. Copies, so no caller can change what is remembered.
    """

    __slots__ = ("meta", "frames")

    def __init__(self) -> None:
        self.meta: tuple[bytes, Meta] | None = None
        self.frames: dict[bytes, tuple[bytes, Frame]] = {}

    def remember_frame(self, key: bytes, data: bytes, frame: Frame) -> None:
        """Remember *frame*, just decoded from *data*, unless its copy would differ from it."""
        env = frame.envelope
        # Frame.copy() turns a missing or None key list into []: only lists copy as is.
        if type(env.get("keys")) is not list or type(env.get("review_reasons")) is not list:
            return
        if len(data) > _MEMO_BYTES:
            return
        if len(self.frames) >= _MEMO_FRAMES:
            self.frames.clear()
        self.frames[key] = (data, frame.copy())


class _LmdbReadView:
    """A :class:`~protocol.view.ReadView` over one LMDB transaction, valid inside its callback."""

    __slots__ = ("_txn", "_db", "_closed", "_map_full", "_decoded")

    def __init__(
        self,
        txn: lmdb.Transaction[bytes],
        dbs: dict[str, lmdb._Database],
        decoded: _Decoded | None = None,
    ) -> None:
        self._txn = txn
        self._db = dbs
        self._closed = False
        self._map_full = False
        self._decoded = _Decoded() if decoded is None else decoded

    def _check(self) -> None:
        if self._closed:
            raise StoreError("a store view was used outside its read()/transact() callback")

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
    def meta(self) -> Meta:
        data = self._txn.get(_META, db=self._db["meta"])
        if data is None:
            return Meta()
        known = self._decoded.meta
        if known is not None and known[0] == data:
            return known[1].copy()
        meta = Meta.from_record(_unpack(data))
        self._decoded.meta = (data, meta.copy())
        return meta

    @_guard
    def frame(self, frame_id: str) -> Frame | None:
        key = _enc(frame_id, 400)
        data = self._txn.get(key, db=self._db["frames"])
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

    @_guard
    def has_relation(self, subject: str, label: str, obj: str) -> bool:
        return self._txn.get(_fwd_key(subject, label, obj), db=self._db["rel_fwd"]) is not None

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
            subject, label, _ = _unpack(value)
            out.append((subject, label))
        return sorted(out)

    @_guard
    def cited_by(self, source: str) -> list[str]:
        prefix = _enc(source, 250) + b"\x00"
        out = [_unpack(v) for _, v in self._scan("cites", prefix, prefix)]
        return sorted(out)

    @_guard
    def lastmod(self, key: str) -> int:
        data = self._txn.get(_enc(key, 400), db=self._db["lastmod"])
        return 0 if data is None else int(_U64.unpack(data)[0])

    @_guard
    def client(self, client_id: str) -> tuple[int, bytes] | None:
        data = self._txn.get(_enc(client_id, 400), db=self._db["clients"])
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
        prefix = _enc(frame_id, 400) + b"\x00"
        return [_U64.unpack(key[-8:])[0] for key, _ in self._scan("history", prefix, prefix)]

    @_guard
    def frame_at(self, frame_id: str, version: int) -> Frame | None:
        prefix = _enc(frame_id, 400) + b"\x00"
        cursor = self._txn.cursor(db=self._db["history"])
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
        rows = ((k, Frame.from_record(_unpack(v))) for k, v in self._scan("frames", b""))
        return self._iterate(_sorted_runs(rows, lambda f: f.id))

    @_guard
    def iter_events(self, start_seq: int = 1) -> Iterator[Event]:
        if start_seq > _U64_MAX:
            return iter(())
        rows = self._scan("events", _u64(max(start_seq, 0)))
        return self._iterate(Event.from_record(_unpack(v)) for _, v in rows)

    @_guard
    def iter_relations(self) -> Iterator[tuple[str, str, str]]:
        rows = ((k, tuple(_unpack(v))) for k, v in self._scan("rel_fwd", b""))
        return self._iterate(_sorted_runs(rows, lambda edge: edge))


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
        self._pk = msgpack.Packer(use_bin_type=True)

    @_guard
    def apply(self, changes: Changeset) -> None:
        """Write *changes*; deletions of relations, due entries and inbox rows come first."""
        txn, db, pack = self._txn, self._db, self._pk.pack
        if changes.meta is not None:
            record = pack(changes.meta.to_record())
            txn.put(_META, record, db=db["meta"])
            # Every write reads the meta record first: remember it as written (its
            # fields are plain numbers and strings, so decoding gives it back as is).
            self._decoded.meta = (record, changes.meta.copy())
        frames_db = db["frames"]
        packed: dict[str, bytes] = {}
        for frame in changes.frames:
            record = packed[frame.id] = pack(frame.to_record())
            txn.put(_enc(frame.id, 400), record, db=frames_db)
        indexed = self._indexed
        for event in changes.events:
            seq = event.seq
            txn.put(_u64(seq), pack(event.to_record()), db=db["events"])
            # An event's id never changes: an update of a known event writes no index
            # page (overwrite=False), and one this write has seen needs no lookup at all.
            if indexed.get(seq) != event.id:
                txn.put(_enc(event.id, 400), _u64(seq), db=db["event_ids"], overwrite=False)
                indexed[seq] = event.id
        for seq, text in changes.contents:
            self._put_content(seq, text)
        for s, label, o in changes.rel_del:
            txn.delete(_fwd_key(s, label, o), db=db["rel_fwd"])
            txn.delete(_rev_key(s, label, o), db=db["rel_rev"])
        for s, label, o in changes.rel_add:
            edge = pack([s, label, o])
            txn.put(_fwd_key(s, label, o), edge, db=db["rel_fwd"])
            txn.put(_rev_key(s, label, o), edge, db=db["rel_rev"])
        for source, frame_id in changes.cites_add:
            cite = _enc(source, 250) + b"\x00" + _enc(frame_id, 250)
            txn.put(cite, pack(frame_id), db=db["cites"])
        if changes.lastmod:
            lastmod_db = db["lastmod"]
            for key, version in changes.lastmod.items():
                txn.put(_enc(key, 400), _u64(version), db=lastmod_db)
        for tick, frame_id in changes.due_del:
            txn.delete(_u64(tick) + _enc(frame_id, 400), db=db["due"])
        for tick, frame_id, gen, revision in changes.due_add:
            row = pack([frame_id, gen, revision])
            txn.put(_u64(tick) + _enc(frame_id, 400), row, db=db["due"])
        for seq in changes.inbox_del:
            txn.delete(_u64(seq), db=db["inbox"])
        for seq in changes.inbox_add:
            txn.put(_u64(seq), b"", db=db["inbox"])
        if changes.client is not None:
            client_id, version, digest = changes.client
            txn.put(_enc(client_id, 400), pack([version, bytes(digest)]), db=db["clients"])
        if changes.txlog is not None:
            txn.put(_u64(_txlog_version(changes.txlog)), pack(changes.txlog), db=db["txlog"])
        if changes.history:
            history_db = db["history"]
            for frame_id, version in changes.history:
                # The frame's record as of this version: the bytes just written to frames.
                txn.put(
                    _enc(frame_id, 400) + b"\x00" + _u64(version),
                    packed[frame_id],
                    db=history_db,
                )
        if changes.trace is not None:
            cursor = txn.cursor(db=db["traces"])
            last = _U64.unpack(cursor.key())[0] if cursor.last() else 0
            txn.put(_u64(last + 1), pack(changes.trace), db=db["traces"], append=True)
        if changes.outbox is not None:
            number = self._outbox_seq
            if number is None:
                data = txn.get(_OUTBOX_SEQ, db=db["meta"])
                number = 0 if data is None else _U64.unpack(data)[0]
            number += 1
            self._outbox_seq = number
            txn.put(_u64(number), pack(changes.outbox), db=db["outbox"], append=True)
        if changes.audit:
            append_audit(_AuditRows(txn, db), changes.audit)

    def event(self, seq: int) -> Event | None:
        e = super().event(seq)
        if e is not None:
            self._indexed[e.seq] = e.id
        return e

    def _finish(self) -> None:
        """Write what is kept per write rather than per changeset (the outbox counter)."""
        if self._outbox_seq is not None:
            self._txn.put(_OUTBOX_SEQ, _u64(self._outbox_seq), db=self._db["meta"])

    def _put_content(self, seq: int, text: str) -> None:
        contents = self._db["contents"]
        _u64(seq)  # range check
        for i in range(max(1, -(-len(text) // CHUNK_CHARS))):
            chunk = text[i * CHUNK_CHARS : (i + 1) * CHUNK_CHARS].encode()
            # Event text is immutable (R2): chunk 0 already present means a second write.
            if not self._txn.put(_CHUNK_KEY.pack(seq, i), chunk, overwrite=False, db=contents):
                raise StoreError(f"the content of event @e{seq} is immutable")


def _txlog_version(record: dict[str, Any]) -> int:
    version = record.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or not 0 <= version < 1 << 64:
        raise StoreError("a txlog record needs an int 'version' in [0, 2**64)")
    return version


class _AuditRows:
    """The ``audit`` database inside one write, as :func:`append_audit` uses it."""

    __slots__ = ("_txn", "_db", "_meta")

    def __init__(self, txn: lmdb.Transaction[bytes], dbs: dict[str, lmdb._Database]) -> None:
        self._txn = txn
        self._db = dbs["audit"]
        self._meta = dbs["meta"]

    def get(self, seq: int) -> dict[str, Any] | None:
        data = self._txn.get(_u64(seq), db=self._db)
        return None if data is None else _unpack(data)

    def put(self, seq: int, record: dict[str, Any]) -> None:
        self._txn.put(_u64(seq), _pack(record), db=self._db)

    def delete(self, seq: int) -> None:
        self._txn.delete(_u64(seq), db=self._db)

    def after(self, seq: int) -> Iterator[tuple[int, dict[str, Any]]]:
        cursor = self._txn.cursor(db=self._db)
        if seq >= _U64_MAX or not cursor.set_range(_u64(max(seq + 1, 0))):
            return
        for key, value in cursor.iternext():
            yield _U64.unpack(key)[0], _unpack(value)

    def state(self) -> dict[str, Any] | None:
        data = self._txn.get(_AUDIT_STATE, db=self._meta)
        return None if data is None else _unpack(data)

    def set_state(self, state: dict[str, Any]) -> None:
        self._txn.put(_AUDIT_STATE, _pack(state), db=self._meta)


class _Gate:
    """Counts this process's open transactions on one environment.

    ``set_mapsize`` remaps the file and must run with no transaction open in
    the process; :meth:`resize` waits for them to end and holds new ones off.
    A thread that already holds a transaction is never held off, so nested
    reads cannot deadlock; such a thread may not resize (it would wait for
    itself) and gets a :class:`StoreError` instead.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._active = 0
        self._resizing = False
        self._local = threading.local()

    def _depth(self) -> int:
        depth: int = getattr(self._local, "depth", 0)
        return depth

    def enter(self) -> None:
        depth = self._depth()
        with self._cond:
            while self._resizing and not depth:
                self._cond.wait()
            self._active += 1
        self._local.depth = depth + 1

    def leave(self) -> None:
        self._local.depth = self._depth() - 1
        with self._cond:
            self._active -= 1
            if not self._active and self._resizing:  # only a resize waits for none open
                self._cond.notify_all()

    def resize(self, env: lmdb.Environment, size: int) -> None:
        if self._depth():
            raise StoreError(
                "the LMDB map must be resized, but this thread has a read open on the store; "
                "do not call transact() inside read()"
            )
        with self._cond:
            while self._resizing:
                self._cond.wait()
            self._resizing = True
            try:
                while self._active:
                    self._cond.wait()
                env.set_mapsize(size)
            except lmdb.Error as e:
                raise _store_error(e) from e
            finally:
                self._resizing = False
                self._cond.notify_all()


class _Env:
    """One LMDB environment open in this process, shared by the stores opened on its path.

    LMDB forbids opening an environment twice in one process, so a read-only
    store opened while a writer is open here uses the writer's environment.
    """

    def __init__(self, key: str, env: lmdb.Environment, dbs: dict[str, lmdb._Database]) -> None:
        self.key = key
        self.env = env
        self.dbs = dbs
        self.readonly = bool(env.flags()["readonly"])
        self.refs = 0
        self.writer = False
        self.gate = _Gate()
        self.write_lock = threading.Lock()
        self.write_thread: int | None = None
        self.decoded = _Decoded()


_OPEN: dict[str, _Env] = {}
"""Environments open in this process, by real path. ``writer`` marks the path's one writer."""
_OPEN_LOCK = threading.Lock()


def _take_writer_lock(path: str) -> int:
    lock_path = os.path.join(path, "writer.lock")
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise StoreError(f"cannot open the writer lock {lock_path}: {e}") from e
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise StoreLocked(
                f"context store {path} is open for writing in another process "
                f"(it holds {lock_path}); close it there or open this one read-only"
            ) from e
        raise StoreError(f"cannot lock {lock_path}: {e}") from e
    return fd


def _open_env(key: str, *, readonly: bool, sync: bool, map_size: int) -> _Env:
    try:
        env = lmdb.open(
            key,
            map_size=map_size,
            subdir=True,
            readonly=readonly,
            create=not readonly,
            sync=sync,
            metasync=True,
            max_dbs=_MAX_DBS,
            lock=True,
        )
    except lmdb.Error as e:
        raise StoreError(f"cannot open the context store {key}: {e}") from e
    try:
        if readonly:
            # A handle opened inside a read transaction dies with it; let lmdb open each.
            dbs = {name: env.open_db(name.encode(), create=False) for name in _DB_NAMES}
            for name in _OPTIONAL_DBS:
                try:
                    dbs[name] = env.open_db(name.encode(), create=False)
                except lmdb.NotFoundError:
                    pass  # an older store: nothing was ever audited in it
            with env.begin() as txn:
                fmt = txn.get(_FORMAT, db=dbs["meta"])
        else:
            with env.begin(write=True) as txn:
                names = _DB_NAMES + _OPTIONAL_DBS
                dbs = {name: env.open_db(name.encode(), txn=txn) for name in names}
                fmt = txn.get(_FORMAT, db=dbs["meta"])
                if fmt is None:
                    fmt = bytes([STORE_FORMAT])
                    txn.put(_FORMAT, fmt, db=dbs["meta"])
        if fmt is not None and fmt != bytes([STORE_FORMAT]):
            raise StoreError(f"context store {key} has format {fmt!r}, not {STORE_FORMAT}")
    except lmdb.NotFoundError as e:
        env.close()
        raise StoreError(f"context store {key} is not initialised yet: {e}") from e
    except lmdb.Error as e:
        env.close()
        raise StoreError(f"cannot open the context store {key}: {e}") from e
    except BaseException:
        env.close()
        raise
    return _Env(key, env, dbs)


class LmdbStore:
    """The durable store of one context: an LMDB environment in its own directory.

    Guarantees: :meth:`transact` commits all of its writes or none, durably
    (fsync) before it returns unless opened with ``sync=False``; reads inside
    it see its own earlier writes; :meth:`read` sees one committed snapshot;
    at most one :class:`LmdbStore` per directory writes at a time, across
    processes; the map grows by itself. Views handed to callbacks, and the
    iterators they return, are valid only inside the callback. Every LMDB
    failure surfaces as :class:`~protocol.errors.StoreError`.
    """

    def __init__(self, shared: _Env, path: str, readonly: bool, lock_fd: int | None) -> None:
        """Use :meth:`open`."""
        self._shared = shared
        self._path = path
        self._readonly = readonly
        self._lock_fd = lock_fd
        self._closed = False

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        create: bool = True,
        readonly: bool = False,
        sync: bool = True,
        map_size: int = DEFAULT_MAP_SIZE,
    ) -> LmdbStore:
        """Open the context store at *path*, creating it unless ``create=False`` or *readonly*.

        A writing open takes ``<path>/writer.lock``; if another process or
        another open store of this process writes to *path*, it raises
        :class:`~protocol.errors.StoreLocked`. A read-only open takes no lock
        and may run beside a writer. Opening reads the format marker only, so
        it takes the same time whatever the store holds. ``sync=False`` gives
        up durability (for benchmarks and tests); ``map_size`` is the initial
        map size, for tests.
        """
        where = os.fspath(path)
        if readonly or not create:
            if not cls.exists(where):
                raise StoreError(f"no context store at {where}")
        else:
            try:
                os.makedirs(where, exist_ok=True)
            except OSError as e:
                raise StoreError(f"cannot create the context store {where}: {e}") from e
        key = os.path.realpath(where)
        with _OPEN_LOCK:
            shared = _OPEN.get(key)
            lock_fd: int | None = None
            if not readonly:
                if shared is not None and shared.writer:
                    raise StoreLocked(f"context store {where} is already open for writing here")
                if shared is not None and shared.readonly:
                    raise StoreError(
                        f"context store {where} is open read-only in this process; "
                        "close it before opening it for writing"
                    )
                lock_fd = _take_writer_lock(key)
            try:
                if shared is None:
                    shared = _open_env(key, readonly=readonly, sync=sync, map_size=map_size)
                    _OPEN[key] = shared
            except BaseException:
                if lock_fd is not None:
                    os.close(lock_fd)
                raise
            shared.refs += 1
            if not readonly:
                shared.writer = True
        return cls(shared, where, readonly, lock_fd)

    @staticmethod
    def exists(path: str | os.PathLike[str]) -> bool:
        """True if a context store has been created at *path*."""
        return os.path.isfile(os.path.join(os.fspath(path), "data.mdb"))

    @property
    def path(self) -> str:
        """The directory this store was opened at."""
        return self._path

    @property
    def readonly(self) -> bool:
        """True if this store was opened read-only."""
        return self._readonly

    @property
    def map_size(self) -> int:
        """The current size of the LMDB map in bytes."""
        return int(self._env().env.info()["map_size"])

    def _env(self) -> _Env:
        if self._closed:
            raise StoreError(f"context store {self._path} is closed")
        return self._shared

    def has_meta(self) -> bool:
        """True once a :class:`~protocol.state.Meta` record has been written."""

        def run(view: ReadView) -> bool:
            assert isinstance(view, _LmdbReadView)
            return view._txn.get(_META, db=view._db["meta"]) is not None

        return self.read(run)

    def read(self, fn: Callable[[ReadView], T]) -> T:
        """Run *fn* on one committed snapshot; the view is valid only inside *fn*."""
        shared = self._env()
        while True:
            shared.gate.enter()
            try:
                try:
                    txn = shared.env.begin()
                except lmdb.MapResizedError:
                    pass  # another process grew the map: adopt its size, then retry
                except lmdb.Error as e:
                    raise _store_error(e) from e
                else:
                    view = _LmdbReadView(txn, shared.dbs, shared.decoded)
                    try:
                        return fn(view)
                    finally:
                        view._closed = True
                        _abort(txn)
            finally:
                shared.gate.leave()
            shared.gate.resize(shared.env, 0)

    def transact(self, fn: Callable[[WriteView], T]) -> T:
        """Run *fn* in one write transaction: commit if it returns, abort if it raises.

        The commit is durable when this returns (unless ``sync=False``). If the
        map fills up, the transaction is aborted, the map doubled and *fn* run
        again from the start, so *fn* must have no effects outside the view.
        Transactions cannot nest; :class:`StoreError` if they do.
        """
        shared = self._env()
        if self._readonly:
            raise StoreError(f"context store {self._path} is open read-only")
        me = threading.get_ident()
        if shared.write_thread == me:
            raise StoreError("transact() cannot be nested")
        with shared.write_lock:
            shared.write_thread = me
            try:
                while True:
                    outcome = self._attempt(shared, fn)
                    if not isinstance(outcome, _Retry):
                        return outcome
                    if outcome is _Retry.GROW:
                        size = int(shared.env.info()["map_size"]) * 2
                        if size > MAX_MAP_SIZE:
                            raise StoreError(f"context store {self._path} would exceed 16 TiB")
                        shared.gate.resize(shared.env, size)
                    else:
                        shared.gate.resize(shared.env, 0)
            finally:
                shared.write_thread = None

    @staticmethod
    def _attempt(shared: _Env, fn: Callable[[WriteView], T]) -> T | _Retry:
        shared.gate.enter()
        try:
            try:
                txn = shared.env.begin(write=True)
            except lmdb.MapResizedError:
                return _Retry.ADOPT
            except lmdb.Error as e:
                raise _store_error(e) from e
            view = _LmdbWriteView(txn, shared.dbs, shared.decoded)
            try:
                result = fn(view)
                if view._map_full:  # fn swallowed the error; the transaction is unusable
                    raise _MapFull("the LMDB map is full")
                view._finish()
                txn.commit()
            except BaseException as e:
                _abort(txn)
                if view._map_full or isinstance(e, lmdb.MapFullError):
                    return _Retry.GROW
                if isinstance(e, lmdb.Error):
                    raise _store_error(e) from e
                raise
            finally:
                view._closed = True
            return result
        finally:
            shared.gate.leave()

    def outbox_read(self, after: int, limit: int) -> list[tuple[int, dict[str, Any]]]:
        """Up to *limit* index intents numbered above *after*, oldest first."""
        if limit <= 0 or after >= _U64_MAX:
            return []

        def run(view: ReadView) -> list[tuple[int, dict[str, Any]]]:
            assert isinstance(view, _LmdbReadView)
            out: list[tuple[int, dict[str, Any]]] = []
            for key, value in view._iterate(view._scan("outbox", _u64(max(after + 1, 0)))):
                out.append((_U64.unpack(key)[0], _unpack(value)))
                if len(out) >= limit:
                    break
            return out

        return self.read(run)

    def outbox_ack(self, upto: int) -> None:
        """Delete the index intents numbered *upto* and below. Numbers are never reused."""

        def run(view: WriteView) -> None:
            assert isinstance(view, _LmdbWriteView)
            cursor = view._txn.cursor(db=view._db["outbox"])
            try:
                cursor.first()
                while (key := cursor.key()) and _U64.unpack(key)[0] <= upto:
                    cursor.delete()
            except lmdb.MapFullError as e:
                view._map_full = True
                raise _MapFull("the LMDB map is full") from e
            except lmdb.Error as e:
                raise _store_error(e) from e

        self.transact(run)

    def outbox_last(self) -> int:
        """The number of the newest index intent ever appended; 0 if none."""

        def run(view: ReadView) -> int:
            assert isinstance(view, _LmdbReadView)
            data = view._txn.get(_OUTBOX_SEQ, db=view._db["meta"])
            return 0 if data is None else int(_U64.unpack(data)[0])

        return self.read(run)

    def audit_read(self, after: int, limit: int) -> list[tuple[int, dict[str, Any]]]:
        """Up to *limit* audit records numbered above *after*, oldest first.

        Works on a read-only open beside the writer (``morphz audit``); a store
        made before the audit table existed reads as empty.
        """
        if limit <= 0 or after >= _U64_MAX:
            return []

        def run(view: ReadView) -> list[tuple[int, dict[str, Any]]]:
            assert isinstance(view, _LmdbReadView)
            if "audit" not in view._db:
                return []
            out: list[tuple[int, dict[str, Any]]] = []
            for key, value in view._iterate(view._scan("audit", _u64(max(after + 1, 0)))):
                out.append((_U64.unpack(key)[0], _unpack(value)))
                if len(out) >= limit:
                    break
            return out

        return self.read(run)

    def close(self) -> None:
        """Release the environment and the writer lock. Idempotent.

        Call it after every read and transact of this store has returned.
        """
        with _OPEN_LOCK:
            if self._closed:
                return
            self._closed = True
            shared = self._shared
            shared.refs -= 1
            if self._lock_fd is not None:
                shared.writer = False
            try:
                if shared.refs == 0:
                    del _OPEN[shared.key]
                    shared.env.close()
            finally:
                if self._lock_fd is not None:
                    os.close(self._lock_fd)  # releases the flock
                    self._lock_fd = None

    def __enter__(self) -> LmdbStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "closed" if self._closed else "read-only" if self._readonly else "writer"
        return f"LmdbStore({self._path!r}, {mode})"


def _abort(txn: lmdb.Transaction[bytes]) -> None:
    try:
        txn.abort()
    except lmdb.Error:
        pass  # a failed commit has already released the transaction
