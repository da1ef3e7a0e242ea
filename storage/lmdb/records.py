"""The LMDB store's format: named databases, key layout, record codecs, decoded-record memo.

Layout of ``<path>/``: ``data.mdb`` and ``lock.mdb`` (LMDB's own) and
``writer.lock``, which a writing :class:`~storage.lmdb.store.LmdbStore` holds with an exclusive
``flock`` for as long as it is open.

Named databases and their keys (``u64`` is 8-byte big-endian, so numeric
order is byte order; ``enc(text, n)`` is defined by :func:`_enc`), format 2::

    meta       b"meta" -> Meta record; b"format" -> format byte; b"outbox_seq" -> u64
    frames     enc(frame id, 400)                     -> Frame record (current)
               enc(frame id, 400) 00 u64(version)     -> Frame record as of that version
    events     u64(seq)                               -> Event record
    event_ids  enc(event id, 400)                     -> u64(seq)
    contents   u64(seq) + u32(chunk)                  -> UTF-8 of CHUNK_CHARS characters
    rel_fwd    enc(subject, 200) 00 enc(label 00 object, 200) -> [subject, label, object]
    rel_rev    enc(object, 200) 00 enc(subject 00 label, 200) -> [subject, label, object]
               enc(source, 250) 01 enc(frame id, 250)  -> frame id (frames citing a source)
    lastmod    enc(footprint key, 400)                -> u64(version)
    clients    enc(client id, 400)                    -> [version, digest]
    txlog      u64(version)                           -> txlog record
    due        u64(due tick) + enc(frame id, 400)     -> [frame id, gen, revision]
    inbox      u64(seq)                               -> b""
    outbox     u64(number)                            -> index intent
    traces     u64(number)                            -> model-call trace (R39)
    audit      u64(sequence)                          -> audit record (R42, R43)
    history, cites                                    -> empty (format 1 only)

A frame's write history lives beside its current record and a source's
citations beside the edges arriving at it, so one commit touches fewer
B-trees (each touched tree costs at least one dirtied page per commit; see
``docs/storage.md``, The commit's write). A history row is told from a current
record by the ``00`` nine bytes before its end (frame ids hold no ``00``), a
citation from an edge by its value (a string, not a list).

Format 1 (the releases before) kept the history rows, with the same keys, in
``history``, and the citations in ``cites`` under ``enc(source, 250) 00
enc(frame id, 250)``. A writing open migrates a format-1 store in one LMDB
write (:func:`_migrate_1_to_2`); a read-only open reads either.

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
STORE_FORMAT = 2
"""Version of the key layout and record encoding, kept under ``meta/format``."""
READABLE_FORMATS = (1, 2)
"""Formats this release reads; a writing open migrates the older ones to :data:`STORE_FORMAT`."""

_MAX_DBS = 32
_DB_NAMES = TABLES
_OPTIONAL_DBS = OPTIONAL_TABLES
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
    """Where *frame_id*'s history rows start (format 2: in ``frames``; 1: in ``history``)."""
    return _enc(frame_id, 400) + b"\x00"


def _is_history_key(key: bytes) -> bool:
    """True for a history row of ``frames`` (format 2), False for a current record."""
    return len(key) > 9 and key[-9] == 0


def _cite_prefix(source: str) -> bytes:
    """Where the citations of *source* start in ``rel_rev`` (format 2)."""
    return _enc(source, 250) + b"\x01"


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
    txn.put(_FORMAT, bytes([STORE_FORMAT]), db=dbs["meta"])


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
