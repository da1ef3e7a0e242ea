"""The LMDB store's format: named databases, key layout, record codecs, decoded-record memo.

Layout of ``<path>/``: ``data.mdb`` and ``lock.mdb`` (LMDB's own) and
``writer.lock``, which a writing :class:`~storage.lmdb.store.LmdbStore` holds with an exclusive
``flock`` for as long as it is open.

Named databases and their keys (``u64`` is 8-byte big-endian, so numeric
order is byte order; ``enc(text, n)`` is defined by :func:`_enc`), format 4::

    (main)     00 "meta" -> Meta record; 00 "outbox_seq" -> u64 (last outbox number)
    meta       b"format" -> format byte; b"audit_state", the replication record
    frames     enc(frame id, 400)                     -> Frame record (current)
               enc(frame id, 400) 00 u64(version)     -> Frame record as of that version
               enc(frame id, 400) 02 f | 02 l         -> u64(version): lastmod of f:ID, l:ID
               enc(frame id, 400) 02 b enc(name, 40)  -> u64(version): lastmod of b:ID 00 name
               enc(subject, 400) 02 r enc(label 00 object, 40) -> u64(version): of r:S 00 L 00 O
    events     u64(seq)                               -> Event record
               u64(seq) 02                            -> u64(version): lastmod of e:@e<seq>
    event_ids  enc(event id, 400)                     -> u64(seq)
    contents   u64(seq) + u32(chunk)                  -> UTF-8 of CHUNK_CHARS characters
    rel_fwd    enc(subject, 200) 00 enc(label 00 object, 200) -> [subject, label, object]
    rel_rev    enc(object, 200) 00 enc(subject 00 label, 200) -> [subject, label, object]
               enc(source, 250) 01 enc(frame id, 250)  -> frame id (frames citing a source)
    lastmod    enc(footprint key, 400)                -> u64(version), for the other keys
    clients    enc(client id, 400)                    -> [version, digest]
    txlog      u64(version)                           -> txlog record
    due        u64(due tick) + enc(frame id, 400)     -> [frame id, gen, revision]
    inbox      u64(seq)                               -> b""
    outbox     u64(number)                            -> index intent
    traces     u64(number)                            -> model-call trace (R39)
    audit      u64(sequence)                          -> audit record (R42, R43)
    history, cites                                    -> empty (format 1 only)

Every row one commit writes about a frame (its record, its history row, the
last-modified versions of the frame, its fields, its lifecycle and the edges
leaving it) lies in one cluster of ``frames`` under the frame's key, and a
retired observation's lastmod row right after it, so one commit dirties fewer
pages (each B-tree it touches costs at least one page per commit; see
``docs/storage.md``, The commit's write). The bytes after a frame's key tell
the rows apart: none for the current record, ``00`` a history row, ``02`` a
lastmod row (frame ids are printable text: no byte below ``03``, see
:func:`_lastmod_place`). A citation in ``rel_rev`` is told from an edge by its
value (a string, not a list).

The Meta record and the outbox counter, written by every commit, live in LMDB's
main database (the one naming the others, whose page every commit rewrites
anyway), under keys beginning ``00`` (no database is named so).

Format 3 kept the Meta record and the outbox counter in ``meta`` as ``b"meta"``
and ``b"outbox_seq"``. Format 2 also kept every lastmod row in ``lastmod``.
Format 1 (the releases before) also kept the history rows, with the same keys,
in ``history``, and the citations in ``cites`` under ``enc(source, 250) 00
enc(frame id, 250)``. A writing open migrates an older store in one LMDB write
(:data:`MIGRATIONS`); a read-only open reads every format it knows as it is.

``meta`` also keeps ``b"audit_state"``: the bookkeeping of
:func:`protocol.governance.append_audit` (last sequence number, the current
coalescing window, the count of refused rows kept). The ``audit`` database is
created by the first writing open; a read-only open of an older store that
lacks it reads an empty audit log.

Records are msgpack (``use_bin_type=True``); what a read returns is what
``from_record`` builds from it, so tuples inside free-form dicts come back as
lists.

Names with a leading underscore are shared between the modules of
:mod:`storage.lmdb` only; :mod:`storage.lmdb` lists the public ones.
"""

from __future__ import annotations

import hashlib
import re
import struct
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import msgpack

from protocol.errors import StoreError
from protocol.state import Frame, Meta
from protocol.wire import ext_default, ext_hook
from storage.backend import OPTIONAL_TABLES, TABLES

T = TypeVar("T")

CHUNK_CHARS = 16384
"""Characters per stored chunk of an event's text; a chunked read touches only its chunks."""
STORE_FORMAT = 4
"""Version of the key layout and record encoding, kept under ``meta/format``."""
READABLE_FORMATS = (1, 2, 3, 4)
"""Formats this release reads; a writing open migrates the older ones to :data:`STORE_FORMAT`."""

_MAX_DBS = 32
_DB_NAMES = TABLES
_OPTIONAL_DBS = OPTIONAL_TABLES
"""Databases newer than the format: created by a writer, absent from older stores."""
_META = b"meta"
_FORMAT = b"format"
_OUTBOX_SEQ = b"outbox_seq"
_MAIN = "main"
"""The name :func:`~storage.lmdb.environment._open_env` files LMDB's main database under."""
_MAIN_META = b"\x00meta"
_MAIN_OUTBOX_SEQ = b"\x00outbox_seq"
_AUDIT_STATE = b"audit_state"

_U64 = struct.Struct(">Q")
_CHUNK_KEY = struct.Struct(">QI")
_U64_MAX = (1 << 64) - 1
_U32_MAX = (1 << 32) - 1
_HASHED = b"\xff"
_GROUP_RE = re.compile(rb"[^\x00\xff]*")


def _pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True, default=ext_default)  # type: ignore[no-any-return]


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=ext_hook)


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


def _history_prefix(frame_id: str) -> bytes:
    """Where *frame_id*'s history rows start (from format 2 in ``frames``; 1: ``history``)."""
    return _enc(frame_id, 400) + b"\x00"


_CLUSTER_RE = re.compile(rb"[^\x00-\x02]*")


def _cluster(key: bytes) -> bytes:
    """The frame key a row of ``frames`` belongs to: the bytes before its first byte
    below 03 (the whole key for a current record; frame ids hold no such byte)."""
    m = _CLUSTER_RE.match(key)
    assert m is not None
    return m.group()


def _cite_prefix(source: str) -> bytes:
    """Where the citations of *source* start in ``rel_rev`` (from format 2)."""
    return _enc(source, 250) + b"\x01"


def _lastmod_place(key: str, known: dict[str, bytes] | None = None) -> tuple[str, bytes] | None:
    """Where format 3 keeps the ``lastmod`` row of footprint *key*: the database and key.

    ``f:ID`` and ``l:ID`` (a frame, its lifecycle) go after frame ID's history rows in
    ``frames`` (``enc(ID, 400) 02 f``, ``… 02 l``), ``b:ID 00 NAME`` (a field) to
    ``… 02 b enc(NAME, 40)``, ``r:S 00 L 00 O`` (an edge) to ``enc(S, 400) 02 r enc(L 00
    O, 40)``, and ``e:@eN`` (an observation) after the event in ``events`` (``u64(N)
    02``). None for any other key, or an ID that is not printable text (frame ids
    are): its row stays in ``lastmod``. The rule depends on the key alone, so a key's
    row is always looked for where it was written.

    *known* maps frame ids to their ``enc(ID, 400)`` already computed (a write passes
    the ids it just wrote, so a frame's several rows encode its id once).
    """
    kind = key[:2]
    if kind == "f:" or kind == "l:":
        ident = key[2:]
        if ident and ident.isprintable():
            encoded = known.get(ident) if known is not None else None
            if encoded is None:
                encoded = _enc(ident, 400)
            return "frames", encoded + (b"\x02f" if kind == "f:" else b"\x02l")
        return None
    if kind == "b:" or kind == "r:":
        ident, sep, rest = key[2:].partition("\x00")
        if sep and ident and ident.isprintable():
            encoded = known.get(ident) if known is not None else None
            if encoded is None:
                encoded = _enc(ident, 400)
            tail = rest.encode()
            if len(tail) > 40:
                tail = _enc(rest, 40)
            return "frames", encoded + (b"\x02b" if kind == "b:" else b"\x02r") + tail
        return None
    if kind == "e:" and key.startswith("e:@e"):
        digits = key[4:]
        if 0 < len(digits) <= 20 and digits.isascii() and digits.isdigit() and digits[0] != "0":
            n = int(digits)
            if n <= _U64_MAX:
                return "events", _U64.pack(n) + b"\x02"
    return None


def _migrate_1_to_2(txn: Any, dbs: dict[str, Any]) -> None:
    """Move a format-1 store's history rows into ``frames`` and its citations into
    ``rel_rev``, empty ``history`` and ``cites``, and mark the store format 2; run
    inside one LMDB write, so a crash leaves the old store or the new one."""
    frames, rel_rev = dbs["frames"], dbs["rel_rev"]
    for key, value in txn.cursor(db=dbs["history"]):
        txn.put(key, value, db=frames)
    for key, value in txn.cursor(db=dbs["cites"]):
        cut = key.find(b"\x00")
        txn.put(key[:cut] + b"\x01" + key[cut + 1 :], value, db=rel_rev)
    txn.drop(dbs["history"], delete=False)
    txn.drop(dbs["cites"], delete=False)
    txn.put(_FORMAT, bytes([2]), db=dbs["meta"])


def _migrate_2_to_3(txn: Any, dbs: dict[str, Any]) -> None:
    """Move the ``lastmod`` rows format 3 keeps elsewhere (:func:`_lastmod_place`) there
    and mark the store format 3, inside one LMDB write. Rows whose footprint key was
    hashed (longer than 400 bytes) cannot be read back and stay: a read that finds no
    row in a long key's place looks in ``lastmod`` too."""
    moved: list[tuple[bytes, bytes, str, bytes]] = []
    for key, value in txn.cursor(db=dbs["lastmod"]):
        if _HASHED in key:
            continue
        try:
            place = _lastmod_place(key.decode())
        except UnicodeDecodeError:
            continue
        if place is not None:
            moved.append((key, value, *place))
    for key, value, name, new_key in moved:
        txn.put(new_key, value, db=dbs[name])
        txn.delete(key, db=dbs["lastmod"])
    txn.put(_FORMAT, bytes([3]), db=dbs["meta"])


def _migrate_3_to_4(txn: Any, dbs: dict[str, Any]) -> None:
    """Move the Meta record and the outbox counter into the main database and mark the
    store format 4, inside one LMDB write."""
    for old, new in ((_META, _MAIN_META), (_OUTBOX_SEQ, _MAIN_OUTBOX_SEQ)):
        data = txn.get(old, db=dbs["meta"])
        if data is not None:
            txn.put(new, data, db=dbs[_MAIN])
            txn.delete(old, db=dbs["meta"])
    txn.put(_FORMAT, bytes([4]), db=dbs["meta"])


def _meta_place(fmt: int) -> tuple[bytes, bytes, str]:
    """Where a store of format *fmt* keeps the Meta record and the outbox counter:
    ``(meta key, outbox counter key, database)``."""
    return (_MAIN_META, _MAIN_OUTBOX_SEQ, _MAIN) if fmt >= 4 else (_META, _OUTBOX_SEQ, "meta")


MIGRATIONS = {1: _migrate_1_to_2, 2: _migrate_2_to_3, 3: _migrate_3_to_4}
"""Format n -> the step that brings a store from n to n + 1 inside one LMDB write."""


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


def _txlog_version(record: dict[str, Any]) -> int:
    version = record.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or not 0 <= version < 1 << 64:
        raise StoreError("a txlog record needs an int 'version' in [0, 2**64)")
    return version


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
