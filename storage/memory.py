"""An in-memory context store with the same contract as :class:`storage.LmdbStore`.

It keeps dictionaries and does no I/O, so the engine's tests run without files.
Records go through the same msgpack encoding the LMDB store uses, so what a
read returns (lists where tuples were written, fresh objects on every read) is
the same on both backends.

A write transaction collects its changes in an overlay and merges them into
the committed tables only when the callback returns; a callback that raises
leaves nothing behind. One lock serializes every read and write transaction.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import msgpack

from protocol.errors import OutOfRange, StoreError
from protocol.forget import Rewrite
from protocol.governance import append_audit
from protocol.state import Event, Frame, Meta
from protocol.view import Changeset, ReadView, WriteView
from protocol.wire import ext_default, ext_hook
from storage.backend import OPTIONAL_TABLES, TABLES
from storage.keys import audit_key

T = TypeVar("T")

_GONE = object()
"""Overlay marker of a deleted row."""

_TABLES = TABLES + OPTIONAL_TABLES


def _pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True, default=ext_default)  # type: ignore[no-any-return]


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=ext_hook)


class _Table:
    """Committed rows, grouped in buckets: ``bucket -> key -> value``."""

    __slots__ = ("rows",)

    def __init__(self) -> None:
        self.rows: dict[Any, dict[Any, Any]] = {}


class _Overlay:
    """One transaction's view of a table: committed rows plus its own pending changes."""

    __slots__ = ("table", "changes")

    def __init__(self, table: _Table) -> None:
        self.table = table
        self.changes: dict[Any, dict[Any, Any]] = {}

    def get(self, bucket: Any, key: Any = None) -> Any:
        pending = self.changes.get(bucket)
        if pending is not None and key in pending:
            value = pending[key]
            return None if value is _GONE else value
        return self.table.rows.get(bucket, {}).get(key)

    def bucket(self, bucket: Any) -> dict[Any, Any]:
        merged = dict(self.table.rows.get(bucket, {}))
        for key, value in self.changes.get(bucket, {}).items():
            if value is _GONE:
                merged.pop(key, None)
            else:
                merged[key] = value
        return merged

    def buckets(self) -> list[Any]:
        """The sorted ids of buckets that hold at least one live row."""
        # Committed buckets are never empty, so only touched ones need merging.
        names = set(self.table.rows) | set(self.changes)
        return sorted(b for b in names if b not in self.changes or self.bucket(b))

    def put(self, bucket: Any, key: Any, value: Any) -> None:
        self.changes.setdefault(bucket, {})[key] = value

    def delete(self, bucket: Any, key: Any = None) -> None:
        self.changes.setdefault(bucket, {})[key] = _GONE

    def commit(self) -> None:
        rows = self.table.rows
        for bucket in self.changes:
            merged = self.bucket(bucket)
            if merged:
                rows[bucket] = merged
            else:
                rows.pop(bucket, None)
        self.changes = {}


class _MemoryView:
    """A :class:`~protocol.view.ReadView` and :class:`~protocol.view.WriteView` over dicts.

    Valid only inside the callback it was handed to.
    """

    def __init__(self, tables: dict[str, _Table], *, writable: bool) -> None:
        self._t = {name: _Overlay(table) for name, table in tables.items()}
        self._writable = writable
        self._closed = False

    def _live(self) -> dict[str, _Overlay]:
        if self._closed:
            raise StoreError("a store view was used outside its read()/transact() callback")
        return self._t

    def _commit(self) -> None:
        for overlay in self._t.values():
            overlay.commit()

    # -- ReadView -----------------------------------------------------------

    def meta(self) -> Meta:
        data = self._live()["meta"].get("meta")
        return Meta() if data is None else Meta.from_record(_unpack(data))

    def frame(self, frame_id: str) -> Frame | None:
        data = self._live()["frames"].get(frame_id)
        return None if data is None else Frame.from_record(_unpack(data))

    def event(self, seq: int) -> Event | None:
        data = self._live()["events"].get(seq)
        return None if data is None else Event.from_record(_unpack(data))

    def event_seq(self, event_id: str) -> int | None:
        seq: int | None = self._live()["event_ids"].get(event_id)
        return seq

    def event_content(self, seq: int) -> str | None:
        text: str | None = self._live()["contents"].get(seq)
        return text

    def event_chunk(self, seq: int, offset: int, length: int) -> str | None:
        if offset < 0 or length < 0:
            raise OutOfRange(f"offset and length must not be negative, not {offset}, {length}")
        text: str | None = self._live()["contents"].get(seq)
        return None if text is None else text[offset : offset + length]

    def has_relation(self, subject: str, label: str, obj: str) -> bool:
        return self._live()["rel_fwd"].get(subject, (label, obj)) is not None

    def relations_from(self, subject: str) -> list[tuple[str, str]]:
        return sorted(self._live()["rel_fwd"].bucket(subject))

    def relations_to(self, obj: str) -> list[tuple[str, str]]:
        return sorted(self._live()["rel_rev"].bucket(obj))

    def cited_by(self, source: str) -> list[str]:
        return sorted(self._live()["cites"].bucket(source))

    def lastmod(self, key: str) -> int:
        version: int | None = self._live()["lastmod"].get(key)
        return version or 0

    def client(self, client_id: str) -> tuple[int, bytes] | None:
        row: tuple[int, bytes] | None = self._live()["clients"].get(client_id)
        return row

    def txlog(self, version: int) -> dict[str, Any] | None:
        data = self._live()["txlog"].get(version)
        return None if data is None else _unpack(data)

    def due(self, upto_tick: int) -> list[tuple[int, str, int, int]]:
        table = self._live()["due"]
        out: list[tuple[int, str, int, int]] = []
        for tick in table.buckets():
            if tick > upto_tick:
                break
            for frame_id, (gen, revision) in sorted(table.bucket(tick).items()):
                out.append((tick, frame_id, gen, revision))
        return out

    def inbox(self) -> list[int]:
        return self._live()["inbox"].buckets()

    def frame_history(self, frame_id: str) -> list[int]:
        return sorted(self._live()["history"].bucket(frame_id))

    def frame_at(self, frame_id: str, version: int) -> Frame | None:
        bucket = self._live()["history"].bucket(frame_id)
        known = [v for v in bucket if v <= version]
        if not known:
            return None
        return Frame.from_record(_unpack(bucket[max(known)]))

    def traces(self, after: int, limit: int) -> list[tuple[int, dict[str, Any]]]:
        table = self._live()["traces"]
        numbers = sorted(n for n in table.buckets() if n > after)[: max(limit, 0)]
        return [(n, _unpack(table.get(n))) for n in numbers]

    def iter_frames(self) -> Iterator[Frame]:
        for frame_id in self._live()["frames"].buckets():
            frame = self.frame(frame_id)
            if frame is not None:
                yield frame

    def iter_events(self, start_seq: int = 1) -> Iterator[Event]:
        for seq in self._live()["events"].buckets():
            if seq >= start_seq:
                event = self.event(seq)
                if event is not None:
                    yield event

    def iter_relations(self) -> Iterator[tuple[str, str, str]]:
        for subject in self._live()["rel_fwd"].buckets():
            for label, obj in sorted(self._live()["rel_fwd"].bucket(subject)):
                self._live()
                yield subject, label, obj

    # -- WriteView ----------------------------------------------------------

    def apply(self, changes: Changeset) -> None:
        """Write *changes*; deletions of relations, due entries and inbox rows come first."""
        t = self._live()
        if not self._writable:
            raise StoreError("apply() needs a view from transact()")
        if changes.meta is not None:
            t["meta"].put("meta", None, _pack(changes.meta.to_record()))
        for frame in changes.frames:
            t["frames"].put(frame.id, None, _pack(frame.to_record()))
        for event in changes.events:
            t["events"].put(event.seq, None, _pack(event.to_record()))
            t["event_ids"].put(event.id, None, event.seq)
        for seq, text in changes.contents:
            if t["contents"].get(seq) is not None:
                raise StoreError(f"the content of event @e{seq} is immutable")
            t["contents"].put(seq, None, text)
        for s, label, o in changes.rel_del:
            t["rel_fwd"].delete(s, (label, o))
            t["rel_rev"].delete(o, (s, label))
        for s, label, o in changes.rel_add:
            t["rel_fwd"].put(s, (label, o), True)
            t["rel_rev"].put(o, (s, label), True)
        for source, frame_id in changes.cites_add:
            t["cites"].put(source, frame_id, True)
        for key, version in changes.lastmod.items():
            t["lastmod"].put(key, None, version)
        for tick, frame_id in changes.due_del:
            t["due"].delete(tick, frame_id)
        for tick, frame_id, gen, revision in changes.due_add:
            t["due"].put(tick, frame_id, (gen, revision))
        for seq in changes.inbox_del:
            t["inbox"].delete(seq)
        for seq in changes.inbox_add:
            t["inbox"].put(seq, None, True)
        if changes.client is not None:
            client_id, version, digest = changes.client
            t["clients"].put(client_id, None, (version, bytes(digest)))
        if changes.txlog is not None:
            t["txlog"].put(_txlog_version(changes.txlog), None, _pack(changes.txlog))
        after = {f.id: f for f in changes.frames}
        for frame_id, version in changes.history:
            t["history"].put(frame_id, version, _pack(after[frame_id].to_record()))
        if changes.trace is not None:
            count: int = t["meta"].get("traces") or 0
            t["traces"].put(count + 1, None, _pack(changes.trace))
            t["meta"].put("traces", None, count + 1)
        if changes.outbox is not None:
            last: int = t["meta"].get("outbox") or 0
            t["outbox"].put(last + 1, None, _pack(changes.outbox))
            t["meta"].put("outbox", None, last + 1)
        if changes.audit:
            append_audit(_AuditRows(t), changes.audit, now=time.time(), key=audit_key())

    def rewrite(self, rw: Rewrite) -> None:
        """Overwrite records in place (forgetting, :mod:`protocol.forget`): an event's text
        whole, frame history rows, log records."""
        t = self._live()
        if not self._writable:
            raise StoreError("rewrite() needs a view from transact()")
        for seq, text in rw.contents:
            t["contents"].put(seq, None, text)
        for frame_id, version, frame in rw.history:
            t["history"].put(frame_id, version, _pack(frame.to_record()))
        for record in rw.txlog:
            t["txlog"].put(_txlog_version(record), None, _pack(record))


class _AuditRows:
    """The ``audit`` table inside one write, as :func:`append_audit` uses it."""

    __slots__ = ("_audit", "_meta")

    def __init__(self, tables: dict[str, _Overlay]) -> None:
        self._audit = tables["audit"]
        self._meta = tables["meta"]

    def get(self, seq: int) -> dict[str, Any] | None:
        data = self._audit.get(seq)
        return None if data is None else _unpack(data)

    def put(self, seq: int, record: dict[str, Any]) -> None:
        self._audit.put(seq, None, _pack(record))

    def delete(self, seq: int) -> None:
        self._audit.delete(seq)

    def after(self, seq: int) -> Iterator[tuple[int, dict[str, Any]]]:
        for n in self._audit.buckets():
            if n > seq:
                data = self._audit.get(n)
                if data is not None:
                    yield n, _unpack(data)

    def state(self) -> dict[str, Any] | None:
        data = self._meta.get("audit_state")
        return None if data is None else _unpack(data)

    def set_state(self, state: dict[str, Any]) -> None:
        self._meta.put("audit_state", None, _pack(state))


def _txlog_version(record: dict[str, Any]) -> int:
    version = record.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or not 0 <= version < 1 << 64:
        raise StoreError("a txlog record needs an int 'version' in [0, 2**64)")
    return version


class MemoryBackend:
    """A context store held in dictionaries: the test double of :class:`storage.LmdbStore`.

    Guarantees the same contract: :meth:`transact` is all-or-nothing and its
    reads see its own earlier writes; :meth:`read` sees one consistent state.
    Nothing survives the process.
    """

    def __init__(self) -> None:
        self._tables = {name: _Table() for name in _TABLES}
        self._lock = threading.RLock()
        self._writing = False
        self._closed = False

    def _check(self) -> None:
        if self._closed:
            raise StoreError("the store is closed")

    def read(self, fn: Callable[[ReadView], T]) -> T:
        """Run *fn* on a view of the committed state; the view is valid only inside *fn*."""
        with self._lock:
            self._check()
            view = _MemoryView(self._tables, writable=False)
            try:
                return fn(view)
            finally:
                view._closed = True

    def transact(self, fn: Callable[[WriteView], T]) -> T:
        """Run *fn* in one write transaction: commit if it returns, discard if it raises.

        Transactions cannot nest; a nested call raises :class:`StoreError`.
        """
        with self._lock:
            self._check()
            if self._writing:
                raise StoreError("transact() cannot be nested")
            self._writing = True
            view = _MemoryView(self._tables, writable=True)
            try:
                result = fn(view)
                view._commit()
                return result
            finally:
                view._closed = True
                self._writing = False

    @property
    def readonly(self) -> bool:
        """Always False: a memory store is never opened read-only."""
        return False

    def has_meta(self) -> bool:
        """True once a :class:`~protocol.state.Meta` record has been written."""
        with self._lock:
            self._check()
            return "meta" in self._tables["meta"].rows

    def outbox_read(self, after: int, limit: int) -> list[tuple[int, dict[str, Any]]]:
        """Up to *limit* index intents numbered above *after*, in order."""
        with self._lock:
            self._check()
            table = self._tables["outbox"].rows
            numbers = sorted(n for n in table if n > after)[: max(limit, 0)]
            return [(n, _unpack(table[n][None])) for n in numbers]

    def audit_newest(self, before: int | None, limit: int) -> list[tuple[int, dict[str, Any]]]:
        """Up to *limit* audit records numbered below *before* (None: all), newest first."""
        with self._lock:
            self._check()
            table = self._tables["audit"].rows
            below = (n for n in table if before is None or n < before)
            numbers = sorted(below, reverse=True)[: max(limit, 0)]
            return [(n, _unpack(table[n][None])) for n in numbers]

    def outbox_ack(self, upto: int) -> None:
        """Drop the index intents numbered *upto* and below; numbering never restarts."""
        with self._lock:
            self._check()
            table = self._tables["outbox"].rows
            for n in [n for n in table if n <= upto]:
                del table[n]

    def outbox_last(self) -> int:
        """The number of the newest index intent ever appended; 0 if none."""
        with self._lock:
            self._check()
            last: int = self._tables["meta"].rows.get("outbox", {}).get(None, 0)
            return last

    def audit_read(self, after: int, limit: int) -> list[tuple[int, dict[str, Any]]]:
        """Up to *limit* audit records numbered above *after*, oldest first."""
        with self._lock:
            self._check()
            table = self._tables["audit"].rows
            numbers = sorted(n for n in table if n > after)[: max(limit, 0)]
            return [(n, _unpack(table[n][None])) for n in numbers]

    def close(self) -> None:
        """Drop the store; later calls raise :class:`StoreError`. Idempotent."""
        with self._lock:
            self._closed = True

    def __enter__(self) -> MemoryBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
