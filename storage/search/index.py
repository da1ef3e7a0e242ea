"""The lexical index of one context (R30): a rebuildable projection in its own LMDB environment.

The index lives in ``<context dir>/index/``, apart from the durable records, so
deleting that directory loses nothing: the next :meth:`LexicalIndex.apply_intents`
rebuilds it from the context. Every commit and observation writes an *index
intent* (``{"version", "frames", "events"}``) into the context's outbox in the
same LMDB write; :meth:`LexicalIndex.apply_intents` drains the outbox, reads
the current frames and events, updates the index in one write, and only then
acknowledges (deletes) the intents it applied.

Named databases of the index environment (``u32`` is 4-byte big-endian;
``docnum`` is an event's sequence number, or ``FRAME_BASE`` + n for the n-th
frame in ``(created_version, id)`` order, so numbering is the same however the
index was built)::

    meta       b"state"          -> msgpack {format, byteorder, built, created, applied,
                                             indexed_version, documents, total_length,
                                             next_frame}
    docs       u32(docnum)       -> <BBdI kind, lifecycle, time, length>               (events)
                                    <BBdI …> <Bdd trust, valid_from, valid_to> + frame id (UTF-8)
    frame_ids  enc(frame id)     -> u32(docnum)
    fterms     u32(docnum)       -> msgpack [digest of the text, [distinct terms]]  (frames)
    terms      term (UTF-8)      -> <I document frequency>
    postings   term 00 u32(first docnum) -> n × u32 docnum, then n × u16 (tf << 8 | norm),
                                            native byte order, docnums ascending

A posting chunk holds at most :data:`CHUNK_POSTINGS` postings; chunks of one
term cover increasing docnum ranges. ``norm`` is the document length quantized
to one byte (exact below 32 terms, then steps of 2^(1/16)); ``tf`` is capped at 255.
A frame's record also holds its envelope's trust (index into
:data:`~protocol.state.TRUST`) and valid time (open ends as ∓infinity), so
searches filter by them; an intent naming the frame (every write, envelope
change and governance decision has one) rewrites them.

Ranking is BM25 (``k1 = 1.2``, ``b = 0.75``, idf ``ln(1 + (N - df + 0.5)/(df + 0.5))``)
over the union of the query's terms, with MaxScore pruning: terms are taken
rarest first, and once the terms left cannot lift a new document above the
current k-th score, only the documents already found are looked up. For a
term in more than :data:`SCAN_CAP` documents only its newest ``SCAN_CAP``
postings are scanned; documents that a term scanned in full found still get
its score when older (at most :data:`PROBE_CAP` of them, best first); results
then carry ``approximate=True``. Ties rank by docnum, higher first (frames,
then newer events).
"""

from __future__ import annotations

import functools
import hashlib
import heapq
import itertools
import math
import os
import re
import struct
import sys
import threading
import time
from array import array
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import lmdb
import msgpack

from protocol.errors import OutOfRange, RequestError, StoreError
from protocol.recall import MODEL_TRUST, trust_filter, valid_at_seconds
from protocol.state import (
    ACTIVE,
    EVENT_KINDS,
    HIDDEN_TRUST,
    LEDGER,
    RETIRED,
    RETIRING,
    TRUST,
    Event,
    Frame,
)
from protocol.view import ReadView
from storage.search.text import MAX_ANALYZED_CHARS, is_spaced, normalize, query_terms
from storage.search.text import terms as text_terms

T = TypeVar("T")

INDEX_DIR = "index"
"""Subdirectory of a context directory that holds its lexical index."""
INDEX_FORMAT = 2
"""Bumped when the stored layout changes (2: frames carry trust and valid time).

An index of another format is rebuilt by the next :meth:`LexicalIndex.apply_intents`.
"""
K1 = 1.2
B = 0.75
CHUNK_POSTINGS = 256
"""Most postings in one stored chunk (1.5 KiB: it stays inside an LMDB leaf page)."""
SCAN_CAP = 6_000
"""Most postings of one term scanned per query (the newest ones)."""
PROBE_CAP = 512
"""Most already-found documents looked up in a term's postings per query term."""
PRUNE_DF = 1024
"""MaxScore pruning is tried before terms in more documents than this."""
MAX_LIMIT = 1000
MAX_QUERY_CHARS = 4096
MAX_QUERY_TERMS = 32
"""Distinct query terms used, in order of appearance; the rest are ignored."""
SNIPPET_CHARS = 160
SNIPPET_SCAN_CHARS = 1 << 15
"""Characters of a document searched for the snippet; past them the snippet is its start."""
FRAME_BASE = 1 << 31
"""Docnums of frames start here; events use their sequence number, below it."""
BULK_DOCS = 50_000
"""Documents buffered in memory between posting flushes during a rebuild."""
REBUILD_PAGE = 10_000
"""Events read per context snapshot during a rebuild."""
DEFAULT_BATCH = 1000
MAP_SIZE = 1 << 40 if sys.maxsize > 1 << 32 else 1 << 30
"""Address space reserved for the index map; the file only grows as pages are written."""

KINDS = ("frame", *EVENT_KINDS)
"""What a document can be: a frame, or an event of one of the observation kinds."""
LIFECYCLES = (ACTIVE, RETIRING, RETIRED)

_KIND_CODE = {k: i for i, k in enumerate(KINDS)}
_LIFE_CODE = {k: i for i, k in enumerate(LIFECYCLES)}
_TRUST_CODE = {k: i for i, k in enumerate(TRUST)}
_UNKNOWN_TRUST = 0xFF
_DOC = struct.Struct("<BBdI")
_ENV = struct.Struct("<Bdd")
"""A frame's trust code and valid time ``[valid_from, valid_to)``, after its :data:`_DOC` part."""
_FRAME_HEAD = _DOC.size + _ENV.size
_U32 = struct.Struct(">I")
_DF = struct.Struct("<I")
_STATE = b"state"
_DB_NAMES = ("meta", "docs", "frame_ids", "fterms", "terms", "postings")

if array("I").itemsize != 4 or array("H").itemsize != 2:  # pragma: no cover - exotic ABIs
    raise ImportError("storage.search.index needs 4-byte array('I') and 2-byte array('H')")


def _norm_table() -> list[int]:
    table = list(range(32))
    for code in range(32, 256):
        table.append(int(32 * 2 ** ((code - 32) / 16)))
    return table


_NORM_DL = _norm_table()
"""Document length that each norm byte stands for (the lower end of its bucket)."""


def norm_code(length: int) -> int:
    """The one-byte norm of a document of *length* terms."""
    return max(0, bisect_right(_NORM_DL, length) - 1)


def _pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)  # type: ignore[no-any-return]


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def _enc(text: str) -> bytes:
    raw = text.encode()
    if len(raw) <= 400:
        return raw
    return raw[:400] + b"\xff" + hashlib.blake2b(raw, digest_size=16).hexdigest().encode()


def _decode(value: bytes) -> tuple[array[int], array[int]]:
    n = len(value) // 6
    docs = array("I")
    docs.frombytes(value[: 4 * n])
    codes = array("H")
    codes.frombytes(value[4 * n :])
    return docs, codes


def _encode(docs: array[int], codes: array[int]) -> bytes:
    return docs.tobytes() + codes.tobytes()


def frame_text(frame: Frame) -> str:
    """What a frame is indexed by: its id and its printed body, joined by spaces."""
    from protocol.txlang import print_form

    return " ".join([frame.id, *(print_form(f) for f in frame.body)])


def _frame_time(view: ReadView, frame: Frame) -> float:
    rec = view.txlog(frame.updated_version) if frame.updated_version else None
    value = rec.get("time") if rec else None
    return float(value) if isinstance(value, (int, float)) else 0.0


class IntentSource(Protocol):
    """What the index needs of a context store: snapshot reads and its outbox."""

    def read(self, fn: Callable[[ReadView], T]) -> T:
        """Run *fn* against one consistent snapshot."""

    def outbox_read(self, after: int, limit: int) -> list[tuple[int, dict[str, Any]]]:
        """Up to *limit* index intents numbered above *after*, oldest first."""

    def outbox_ack(self, upto: int) -> None:
        """Delete the intents numbered *upto* and below."""

    def outbox_last(self) -> int:
        """The number of the newest intent ever appended; 0 if none."""


@dataclass(slots=True)
class IndexState:
    """The index's own counters, kept in its ``meta`` database."""

    format: int = INDEX_FORMAT
    byteorder: str = sys.byteorder
    built: bool = False
    created: float = 0.0
    applied: int = 0
    """The number of the last outbox intent applied."""
    indexed_version: int = 0
    """The context version the index reflects (every intent up to it is applied)."""
    documents: int = 0
    total_length: int = 0
    next_frame: int = FRAME_BASE

    def to_record(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "byteorder": self.byteorder,
            "built": self.built,
            "created": self.created,
            "applied": self.applied,
            "indexed_version": self.indexed_version,
            "documents": self.documents,
            "total_length": self.total_length,
            "next_frame": self.next_frame,
        }

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> IndexState:
        known = {k: rec[k] for k in cls.__dataclass_fields__ if k in rec}
        return cls(**known)

    @property
    def usable(self) -> bool:
        """True if the stored index can be read and updated as it is."""
        return self.built and self.format == INDEX_FORMAT and self.byteorder == sys.byteorder


@dataclass(frozen=True, slots=True)
class Hit:
    """One search result: a frame (``id`` is its id) or an event (``id`` is ``@eN``)."""

    id: str
    type: str
    kind: str
    lifecycle: str
    score: float
    snippet: str
    time: float
    trust: str | None = None
    """The frame's trust status; None for events."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form printed by ``morphz search`` (``trust`` only for frames)."""
        out: dict[str, Any] = {
            "id": self.id,
            "type": self.type,
            "kind": self.kind,
            "lifecycle": self.lifecycle,
            "score": round(self.score, 6),
            "snippet": self.snippet,
            "time": self.time,
        }
        if self.trust is not None:
            out["trust"] = self.trust
        return out


@dataclass(frozen=True, slots=True)
class SearchResult:
    """Hits, best first, and how far the index is behind the context.

    ``version`` is the context's version when the search ran (None if unknown),
    ``indexed_version`` the version the index reflects, ``lag`` the number of
    index intents not yet applied (None if unknown). ``approximate`` is True
    when a cap of the ranking was reached (see the module docstring).
    """

    query: str
    terms: tuple[str, ...]
    hits: tuple[Hit, ...]
    version: int | None
    indexed_version: int
    lag: int | None
    approximate: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The JSON form printed by ``morphz search``."""
        return {
            "query": self.query,
            "terms": list(self.terms),
            "hits": [h.to_dict() for h in self.hits],
            "version": self.version,
            "indexed_version": self.indexed_version,
            "lag": self.lag,
            "approximate": self.approximate,
        }


@dataclass(slots=True)
class _Filter:
    kinds: frozenset[int] | None = None
    lifecycles: frozenset[int] | None = None
    since: float | None = None
    until: float | None = None
    id_prefix: str | None = None
    trusts: frozenset[int] | None = None
    valid_at: float | None = None
    frames: bool = True
    events: bool = True

    @property
    def needs_record(self) -> bool:
        """True if the docnum alone cannot decide (frames and events are told by docnum)."""
        by_docnum = (
            self.kinds is None
            or self.kinds == frozenset({0})
            or (len(self.kinds) == len(KINDS) - (0 not in self.kinds))
        )
        return bool(
            not by_docnum
            or self.lifecycles is not None
            or self.since is not None
            or self.until is not None
            or (self.id_prefix and self.frames)
            or (self.frames and (self.trusts is not None or self.valid_at is not None))
        )

    def doc_ok(self, doc: int) -> bool:
        if doc >= FRAME_BASE:
            return self.frames
        if not self.events:
            return False
        return not self.id_prefix or f"@e{doc}".startswith(self.id_prefix)

    def record_ok(self, doc: int, rec: bytes) -> bool:
        kind, life, when, _ = _DOC.unpack_from(rec)
        if self.kinds is not None and kind not in self.kinds:
            return False
        if self.lifecycles is not None and life not in self.lifecycles:
            return False
        if self.since is not None and when < self.since:
            return False
        if self.until is not None and when > self.until:
            return False
        if doc < FRAME_BASE:
            return True  # events have no envelope: trust and valid time do not apply
        if self.trusts is not None or self.valid_at is not None:
            trust, lo, hi = _ENV.unpack_from(rec, _DOC.size)
            if self.trusts is not None and trust not in self.trusts:
                return False
            if self.valid_at is not None and not lo <= self.valid_at < hi:
                return False
        return not self.id_prefix or _frame_id(rec).startswith(self.id_prefix)


def _make_filter(
    kinds: Iterable[str] | str | None,
    lifecycle: Iterable[str] | str | None,
    since: float | None,
    until: float | None,
    id_prefix: str | None,
    trust: Iterable[str] | str | None = None,
    valid_at: float | str | None = None,
) -> _Filter:
    filt = _Filter(since=since, until=until, id_prefix=id_prefix or None)
    if trust is not None:
        wanted = trust_filter(tuple(trust) if isinstance(trust, (set, frozenset)) else trust)
        filt.trusts = frozenset(_TRUST_CODE[t] for t in wanted)
    if valid_at is not None:
        filt.valid_at = valid_at_seconds(valid_at)
    for name, value in (("since", since), ("until", until)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value)
        ):
            raise OutOfRange(f"{name} is seconds since the epoch, not {value!r}")
    if since is not None and until is not None and since > until:
        raise OutOfRange(f"since ({since}) is after until ({until})")
    if kinds is not None:
        names = {kinds} if isinstance(kinds, str) else set(kinds)
        unknown = sorted(names - set(KINDS))
        if unknown or not names:
            raise RequestError(
                f"unknown kind {', '.join(unknown) or '(none given)'}; use {', '.join(KINDS)}",
                code="bad_kind",
            )
        filt.kinds = frozenset(_KIND_CODE[k] for k in names)
        filt.frames = "frame" in names
        filt.events = bool(names - {"frame"})
    if lifecycle is not None:
        names = {lifecycle} if isinstance(lifecycle, str) else set(lifecycle)
        unknown = sorted(names - set(LIFECYCLES))
        if unknown or not names:
            raise RequestError(
                f"unknown lifecycle {', '.join(unknown) or '(none given)'}; "
                f"use {', '.join(LIFECYCLES)}",
                code="bad_lifecycle",
            )
        filt.lifecycles = frozenset(_LIFE_CODE[k] for k in names)
    if id_prefix is not None and not isinstance(id_prefix, str):
        raise RequestError("an id prefix is a string", code="bad_prefix")
    return filt


class _TfNorm(dict[int, float]):
    """``tf·(k1+1) / (tf + k1·(1 − b + b·dl/avgdl))`` per posting code, computed on first use."""

    def __init__(self, avgdl: float) -> None:
        super().__init__()
        self.avgdl = avgdl if avgdl > 0 else 1.0

    def __missing__(self, code: int) -> float:
        tf = code >> 8
        dl = _NORM_DL[code & 0xFF]
        value = tf * (K1 + 1) / (tf + K1 * (1 - B + B * dl / self.avgdl))
        self[code] = value
        return value


class _Weights(dict[int, float]):
    """One term's score per posting code: its idf times :class:`_TfNorm`."""

    def __init__(self, idf: float, tn: _TfNorm) -> None:
        super().__init__()
        self.idf = idf
        self.tn = tn

    def __missing__(self, code: int) -> float:
        value = self.idf * self.tn[code]
        self[code] = value
        return value


class _Shared:
    """One index environment open in this process (LMDB forbids opening it twice)."""

    def __init__(self, key: str, env: lmdb.Environment, dbs: dict[str, lmdb._Database]) -> None:
        self.key = key
        self.env = env
        self.dbs = dbs
        self.refs = 0
        self.write_lock = threading.Lock()


_OPEN: dict[str, _Shared] = {}
_OPEN_LOCK = threading.Lock()


def _open_env(path: str) -> _Shared:
    try:
        os.makedirs(path, exist_ok=True)
        env = lmdb.open(
            path,
            map_size=MAP_SIZE,
            subdir=True,
            max_dbs=len(_DB_NAMES) + 1,
            sync=True,
            metasync=True,
            readahead=False,
        )
    except (OSError, lmdb.Error) as e:
        raise StoreError(f"cannot open the search index {path}: {e}") from e
    try:
        with env.begin(write=True) as txn:
            dbs = {name: env.open_db(name.encode(), txn=txn) for name in _DB_NAMES}
    except lmdb.Error as e:
        env.close()
        raise StoreError(f"cannot open the search index {path}: {e}") from e
    return _Shared(path, env, dbs)


def _load_state(txn: lmdb.Transaction[bytes], dbs: dict[str, lmdb._Database]) -> IndexState:
    data = txn.get(_STATE, db=dbs["meta"])
    return IndexState() if data is None else IndexState.from_record(_unpack(data))


def _save_state(
    txn: lmdb.Transaction[bytes], dbs: dict[str, lmdb._Database], state: IndexState
) -> None:
    txn.put(_STATE, _pack(state.to_record()), db=dbs["meta"])


class _Rebuild(Exception):
    """Raised inside an index write when the index cannot be brought up to date incrementally."""


class _Postings:
    """Posting changes of one index write, merged into the stored chunks by :meth:`flush`."""

    def __init__(self, txn: lmdb.Transaction[bytes], dbs: dict[str, lmdb._Database]) -> None:
        self.txn = txn
        self.dbs = dbs
        self.adds: dict[str, list[int]] = {}
        self.removes: dict[str, list[int]] = {}
        self.pending = 0

    def add_doc(self, doc: int, terms: list[str]) -> int:
        """Buffer the postings of document *doc*; return its length in terms."""
        n = len(terms)
        if not n:
            return 0
        base = doc << 16 | norm_code(n)
        adds = self.adds
        # One int per posting (docnum << 16 | tf << 8 | norm) keeps this loop short.
        for term, tf in Counter(terms).items():
            posting = base | (tf << 8 if tf < 255 else 0xFF00)
            entry = adds.get(term)
            if entry is None:
                adds[term] = [posting]
            else:
                entry.append(posting)
        self.pending += 1
        return n

    def remove_doc(self, doc: int, terms: Iterable[str]) -> None:
        """Buffer the removal of *doc* from the postings of *terms*."""
        for term in terms:
            self.removes.setdefault(term, []).append(doc)

    def flush(self) -> None:
        """Write every buffered change; document frequencies follow."""
        txn, terms_db = self.txn, self.dbs["terms"]
        cursor = txn.cursor(db=self.dbs["postings"])
        for term in sorted(self.adds.keys() | self.removes.keys()):
            tk = term.encode()
            delta = 0
            gone = self.removes.get(term)
            if gone:
                delta -= self._remove(cursor, tk, sorted(set(gone)))
            added = self.adds.get(term)
            if added:
                added.sort()
                docs = array("I", [p >> 16 for p in added])
                codes = array("H", [p & 0xFFFF for p in added])
                delta += self._add(cursor, tk, docs, codes)
            if delta:
                raw = txn.get(tk, db=terms_db)
                df = (_DF.unpack(raw)[0] if raw is not None else 0) + delta
                if df > 0:
                    txn.put(tk, _DF.pack(df), db=terms_db)
                elif raw is not None:
                    txn.delete(tk, db=terms_db)
        self.adds = {}
        self.removes = {}
        self.pending = 0

    def _put_chunks(self, prefix: bytes, docs: array[int], codes: array[int]) -> None:
        txn, db = self.txn, self.dbs["postings"]
        for i in range(0, len(docs), CHUNK_POSTINGS):
            d = docs[i : i + CHUNK_POSTINGS]
            txn.put(prefix + _U32.pack(d[0]), _encode(d, codes[i : i + CHUNK_POSTINGS]), db=db)

    def _add(self, cursor: lmdb.Cursor, tk: bytes, docs: array[int], codes: array[int]) -> int:
        prefix = tk + b"\x00"
        added = len(docs)
        last = _last_chunk(cursor, tk)
        if last is None:
            self._put_chunks(prefix, docs, codes)
            return added
        cd, cc = _decode(bytes(cursor.value()))
        if docs[0] > cd[-1]:
            # The usual case: new documents come after every stored one.
            room = CHUNK_POSTINGS - len(cd)
            if room > 0:
                cd.extend(docs[:room])
                cc.extend(codes[:room])
                self.txn.put(last, _encode(cd, cc), db=self.dbs["postings"])
                docs, codes = docs[room:], codes[room:]
            if docs:
                self._put_chunks(prefix, docs, codes)
            return added
        return self._merge(cursor, prefix, docs, codes)

    def _merge(
        self, cursor: lmdb.Cursor, prefix: bytes, docs: array[int], codes: array[int]
    ) -> int:
        chunks: dict[bytes, tuple[array[int], array[int]]] = {}
        added = 0
        for doc, code in zip(docs, codes, strict=True):
            key = _locate(cursor, prefix, doc)
            if key is None:  # the term has no chunk at all
                key = prefix + _U32.pack(doc)
                chunks.setdefault(key, (array("I"), array("H")))
            cd, cc = self._chunk(chunks, key)
            i = bisect_left(cd, doc)
            if i < len(cd) and cd[i] == doc:
                cc[i] = code
            else:
                cd.insert(i, doc)
                cc.insert(i, code)
                added += 1
        self._rewrite(chunks, prefix)
        return added

    def _chunk(
        self, chunks: dict[bytes, tuple[array[int], array[int]]], key: bytes
    ) -> tuple[array[int], array[int]]:
        """The posting chunk at *key*, decoded once per write and kept in *chunks*."""
        if key not in chunks:
            raw = self.txn.get(key, db=self.dbs["postings"])
            assert raw is not None, "a located posting chunk must exist"
            chunks[key] = _decode(raw)
        return chunks[key]

    def _remove(self, cursor: lmdb.Cursor, tk: bytes, docs: list[int]) -> int:
        prefix = tk + b"\x00"
        chunks: dict[bytes, tuple[array[int], array[int]]] = {}
        removed = 0
        for doc in docs:
            key = _locate(cursor, prefix, doc)
            if key is None:
                continue
            cd, cc = self._chunk(chunks, key)
            i = bisect_left(cd, doc)
            if i < len(cd) and cd[i] == doc:
                del cd[i]
                del cc[i]
                removed += 1
        self._rewrite(chunks, prefix)
        return removed

    def _rewrite(self, chunks: dict[bytes, tuple[array[int], array[int]]], prefix: bytes) -> None:
        txn, db = self.txn, self.dbs["postings"]
        for key in chunks:
            txn.delete(key, db=db)
        for cd, cc in chunks.values():
            if cd:
                self._put_chunks(prefix, cd, cc)


def _last_chunk(cursor: lmdb.Cursor, tk: bytes) -> bytes | None:
    """Put *cursor* on the last chunk of term *tk* and return its key (None if none)."""
    found = cursor.prev() if cursor.set_range(tk + b"\x01") else cursor.last()
    if found:
        key: bytes = bytes(cursor.key())
        if key.startswith(tk + b"\x00"):
            return key
    return None


def _locate(cursor: lmdb.Cursor, prefix: bytes, doc: int) -> bytes | None:
    """The key of the chunk of a term (``prefix`` = term 00) where *doc* belongs, or None."""
    target = prefix + _U32.pack(doc)
    if cursor.set_range(target):
        after: bytes = bytes(cursor.key())
        if after == target:
            return after
        if cursor.prev() and bytes(cursor.key()).startswith(prefix):
            key: bytes = bytes(cursor.key())
            return key
        return after if after.startswith(prefix) else None
    if cursor.last() and bytes(cursor.key()).startswith(prefix):
        last: bytes = bytes(cursor.key())
        return last
    return None


class LexicalIndex:
    """The keyword index of one context, kept in ``<context dir>/index/``.

    Guarantees: searches see one committed snapshot of the index; the index
    only ever acknowledges outbox intents after the write that applied them
    has committed durably; :meth:`rebuild` gives the same answers as an index
    maintained incrementally over the same records; a missing, stale or
    foreign index is rebuilt by the next :meth:`apply_intents`. Safe to share
    between threads; several processes may update one index (LMDB serializes
    their writes and each write re-reads the index state).
    """

    def __init__(self, shared: _Shared, path: str, backend: IntentSource | None) -> None:
        """Use :meth:`open` or :meth:`for_backend`."""
        self._shared = shared
        self._path = path
        self._backend = backend
        self._closed = False

    @classmethod
    def open(
        cls, context_dir: str | os.PathLike[str], *, backend: IntentSource | None = None
    ) -> LexicalIndex:
        """Open (creating if needed) the index of the context stored at *context_dir*.

        *backend* is the context's store: the default for :meth:`apply_intents`,
        :meth:`rebuild` and the snippets and version of :meth:`search`.
        """
        path = os.path.join(os.fspath(context_dir), INDEX_DIR)
        key = os.path.realpath(path)
        with _OPEN_LOCK:
            shared = _OPEN.get(key)
            if shared is None:
                shared = _open_env(key)
                _OPEN[key] = shared
            shared.refs += 1
        return cls(shared, path, backend)

    @classmethod
    def for_backend(cls, backend: Any) -> LexicalIndex:
        """The index of the context whose store is *backend* (an :class:`LmdbStore`)."""
        path = getattr(backend, "path", None)
        if not isinstance(path, str):
            raise StoreError("the search index needs a context stored in a directory")
        return cls.open(path, backend=backend)

    @property
    def path(self) -> str:
        """The index directory."""
        return self._path

    def close(self) -> None:
        """Release the index environment. Idempotent."""
        with _OPEN_LOCK:
            if self._closed:
                return
            self._closed = True
            shared = self._shared
            shared.refs -= 1
            if shared.refs == 0:
                del _OPEN[shared.key]
                shared.env.close()

    def __enter__(self) -> LexicalIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- state ---------------------------------------------------------------

    def _env(self) -> _Shared:
        if self._closed:
            raise StoreError(f"search index {self._path} is closed")
        return self._shared

    def _source(self, backend: IntentSource | None) -> IntentSource:
        source = backend if backend is not None else self._backend
        if source is None:
            raise RequestError("no context store given to the search index", code="no_backend")
        return source

    def _read(self, fn: Callable[[lmdb.Transaction[bytes]], T]) -> T:
        shared = self._env()
        try:
            with shared.env.begin() as txn:
                return fn(txn)
        except lmdb.Error as e:
            raise StoreError(f"search index read failed: {e}") from e

    def _write(self, fn: Callable[[lmdb.Transaction[bytes]], T]) -> T:
        shared = self._env()
        with shared.write_lock:
            try:
                with shared.env.begin(write=True) as txn:
                    return fn(txn)
            except lmdb.Error as e:
                raise StoreError(f"search index write failed: {e}") from e

    def state(self) -> IndexState:
        """The index's counters as last committed."""
        return self._read(lambda txn: _load_state(txn, self._shared.dbs))

    def indexed_version(self) -> int:
        """The context version the index reflects."""
        return self.state().indexed_version

    def applied(self) -> int:
        """The number of the last outbox intent applied."""
        return self.state().applied

    def lag(self, backend: IntentSource | None = None) -> int:
        """How many index intents of the context are not applied yet."""
        return max(0, self._source(backend).outbox_last() - self.applied())

    # -- updates -------------------------------------------------------------

    def apply_intents(self, backend: IntentSource | None = None, limit: int = DEFAULT_BATCH) -> int:
        """Apply up to *limit* pending index intents in one index write; return how many.

        Intents are acknowledged (deleted from the context's outbox) only after
        the index write is durable, and only if the store is writable. If the
        index is missing, of another format or context, or intents it never
        saw were acknowledged, it is rebuilt instead; the return value is then
        the number of intents the rebuild covered.
        """
        if limit < 1:
            raise OutOfRange(f"limit must be at least 1, not {limit}")
        source = self._source(backend)
        created = source.read(lambda v: v.meta().created)
        dbs = self._env().dbs

        def run(txn: lmdb.Transaction[bytes]) -> tuple[int, int]:
            state = _load_state(txn, dbs)
            if not state.usable or state.created != created:
                raise _Rebuild
            intents = source.outbox_read(state.applied, limit)
            if not intents:
                if source.outbox_last() > state.applied:
                    raise _Rebuild  # acknowledged by someone else: we missed intents
                return 0, state.applied
            if intents[0][0] != state.applied + 1:
                raise _Rebuild
            frames: set[str] = set()
            events: set[int] = set()
            version = state.indexed_version
            for _, intent in intents:
                frames.update(intent.get("frames") or ())
                events.update(intent.get("events") or ())
                version = max(version, int(intent.get("version") or 0))
            postings = _Postings(txn, dbs)
            source.read(
                lambda v: _apply_records(txn, dbs, state, postings, v, sorted(frames), events)
            )
            postings.flush()
            state.applied = intents[-1][0]
            state.indexed_version = version
            _save_state(txn, dbs, state)
            return len(intents), state.applied

        try:
            count, upto = self._write(run)
        except _Rebuild:
            before = self.applied()
            after: int = self.rebuild(source)["applied"]
            return max(0, after - before)
        if count:
            _ack(source, upto)
        return count

    def catch_up(self, backend: IntentSource | None = None, batch: int = DEFAULT_BATCH) -> int:
        """Apply intents until none is pending; return how many were applied."""
        total = 0
        while n := self.apply_intents(backend, batch):
            total += n
        return total

    def rebuild(self, backend: IntentSource | None = None) -> dict[str, Any]:
        """Drop the index and rebuild it from the context's durable records alone.

        The context is only read (and its applied intents acknowledged). The old
        index answers searches until the new one commits, in one index write.
        Returns ``{"indexed_version", "documents", "seconds", "applied"}``.
        """
        source = self._source(backend)
        dbs = self._env().dbs
        started = time.perf_counter()
        # Intents up to `last` are covered by the snapshot read after it; later ones
        # are applied again later, which is harmless: applying reads current records.
        last = source.outbox_last()

        def run(txn: lmdb.Transaction[bytes]) -> IndexState:
            for name in _DB_NAMES:
                txn.drop(dbs[name], delete=False)
            state = IndexState(built=True, applied=last)
            postings = _Postings(txn, dbs)
            _bulk_load(txn, dbs, state, postings, source)
            postings.flush()
            _save_state(txn, dbs, state)
            return state

        state = self._write(run)
        _ack(source, last)
        return {
            "indexed_version": state.indexed_version,
            "documents": state.documents,
            "seconds": round(time.perf_counter() - started, 3),
            "applied": state.applied,
        }

    # -- queries -------------------------------------------------------------

    def search(
        self,
        query: str,
        *,
        limit: int = 10,
        since: float | None = None,
        until: float | None = None,
        kinds: Iterable[str] | str | None = None,
        lifecycle: Iterable[str] | str | None = None,
        id_prefix: str | None = None,
        trust: Iterable[str] | str | None = None,
        valid_at: float | str | None = None,
        context_version: int | None = None,
        backend: IntentSource | None = None,
    ) -> SearchResult:
        """The documents that best match *query* (BM25, any of its terms), best first.

        Filters: *since*/*until* (seconds since the epoch, inclusive; a frame's
        time is that of its last write), *kinds* (``"frame"`` and the event
        kinds), *lifecycle* (``active``/``retiring``/``retired``; retired
        content is searched unless filtered out), *id_prefix* (of the frame id,
        or of ``@eN``), *trust* (frames whose envelope trust is one of these
        statuses) and *valid_at* (ISO date/date-time or epoch seconds: frames
        whose ``[valid_from, valid_to)`` covers it). Trust and valid time are
        the frame's as of :attr:`SearchResult.indexed_version`; events have no
        envelope and pass both (add ``kinds="frame"`` for frames only).
        *context_version* is reported as ``version``; when None it is read from
        the context store, which also supplies snippets.
        """
        if not isinstance(query, str):
            raise RequestError("a query is a string", code="bad_query")
        if len(query) > MAX_QUERY_CHARS:
            raise OutOfRange(f"a query is at most {MAX_QUERY_CHARS} characters")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
            raise OutOfRange(f"limit must be between 1 and {MAX_LIMIT}, not {limit!r}")
        filt = _make_filter(kinds, lifecycle, since, until, id_prefix, trust, valid_at)
        qterms = query_terms(query)[:MAX_QUERY_TERMS]
        dbs = self._env().dbs

        def run(txn: lmdb.Transaction[bytes]) -> tuple[IndexState, _Ranked]:
            state = _load_state(txn, dbs)
            if not state.usable:
                # Another format or byte order: answer as an empty index until it is rebuilt.
                return IndexState(), _Ranked()
            return state, _rank(txn, dbs, state, qterms, limit, filt)

        state, ranked = self._read(run)
        source = backend if backend is not None else self._backend
        texts: list[str] = []
        version = context_version
        lag: int | None = None
        if source is not None:

            def fetch(v: ReadView) -> tuple[int, list[str]]:
                return v.meta().version, [_doc_text(v, doc, rec) for _, doc, rec in ranked.top]

            current, texts = source.read(fetch)
            if version is None:
                version = current
            lag = max(0, source.outbox_last() - state.applied)
        highlight = _Highlighter(ranked.weights)
        hits = []
        for i, (score, doc, rec) in enumerate(ranked.top):
            kind, life, when, _ = _DOC.unpack_from(rec)
            hit_trust: str | None = None
            if doc >= FRAME_BASE:
                hit_id, hit_type = _frame_id(rec), "frame"
                code = _ENV.unpack_from(rec, _DOC.size)[0]
                hit_trust = TRUST[code] if code < len(TRUST) else "unknown"
            else:
                hit_id, hit_type = f"@e{doc}", "event"
            text = texts[i] if i < len(texts) else ""
            hits.append(
                Hit(
                    id=hit_id,
                    type=hit_type,
                    kind=KINDS[kind],
                    lifecycle=LIFECYCLES[life],
                    score=score,
                    snippet=highlight.snippet(text),
                    time=when,
                    trust=hit_trust,
                )
            )
        return SearchResult(
            query=query,
            terms=tuple(qterms),
            hits=tuple(hits),
            version=version,
            indexed_version=state.indexed_version,
            lag=lag,
            approximate=ranked.approximate,
        )


def _ack(source: IntentSource, upto: int) -> None:
    if upto <= 0 or getattr(source, "readonly", False):
        return
    source.outbox_ack(upto)


def _doc_record(kind: str, lifecycle: str, when: float, length: int) -> bytes:
    return _DOC.pack(_KIND_CODE.get(kind, 0), _LIFE_CODE.get(lifecycle, 0), when, length)


def _frame_record(f: Frame, when: float, length: int) -> bytes:
    env = f.envelope
    lo, hi = env.get("valid_from"), env.get("valid_to")
    return (
        _doc_record("frame", f.lifecycle, when, length)
        + _ENV.pack(
            _TRUST_CODE.get(f.trust, _UNKNOWN_TRUST),
            -math.inf if lo is None else float(lo),
            math.inf if hi is None else float(hi),
        )
        + f.id.encode()
    )


def _frame_id(rec: bytes) -> str:
    """The frame id at the end of a frame's document record."""
    return rec[_FRAME_HEAD:].decode()


def _index_event(
    txn: lmdb.Transaction[bytes],
    dbs: dict[str, lmdb._Database],
    state: IndexState,
    postings: _Postings,
    view: ReadView,
    e: Event,
) -> None:
    if not 0 < e.seq < FRAME_BASE:
        raise StoreError(f"the search index holds events @e1 to @e{FRAME_BASE - 1}, not @e{e.seq}")
    key = _U32.pack(e.seq)
    old = txn.get(key, db=dbs["docs"])
    if old is not None:
        # Event text never changes: only its lifecycle (and nothing else) can.
        length = _DOC.unpack_from(old)[3]
        new = _doc_record(e.kind, e.lifecycle, e.time, length)
        if new != old:
            txn.put(key, new, db=dbs["docs"])
        return
    text = view.event_chunk(e.seq, 0, MAX_ANALYZED_CHARS) or ""
    length = postings.add_doc(e.seq, text_terms(text))
    txn.put(key, _doc_record(e.kind, e.lifecycle, e.time, length), db=dbs["docs"])
    state.documents += 1
    state.total_length += length


def _index_frame(
    txn: lmdb.Transaction[bytes],
    dbs: dict[str, lmdb._Database],
    state: IndexState,
    postings: _Postings,
    view: ReadView,
    f: Frame,
) -> None:
    text = frame_text(f)
    digest = hashlib.blake2b(text.encode(), digest_size=16).digest()
    when = _frame_time(view, f)
    id_key = _enc(f.id)
    known = txn.get(id_key, db=dbs["frame_ids"])
    old_length = 0
    if known is None:
        doc = state.next_frame
        if doc > 0xFFFFFFFF:
            raise StoreError("the search index holds at most 2**31 frames")
        state.next_frame += 1
        txn.put(id_key, _U32.pack(doc), db=dbs["frame_ids"])
        state.documents += 1
    else:
        doc = _U32.unpack(known)[0]
        key = _U32.pack(doc)
        old_terms_raw = txn.get(key, db=dbs["fterms"])
        assert old_terms_raw is not None
        old_digest, old_terms = _unpack(old_terms_raw)
        old_rec = txn.get(key, db=dbs["docs"])
        assert old_rec is not None
        old_length = _DOC.unpack_from(old_rec)[3]
        if old_digest == digest:
            txn.put(key, _frame_record(f, when, old_length), db=dbs["docs"])
            return
        postings.remove_doc(doc, old_terms)
    terms = text_terms(text)
    length = postings.add_doc(doc, terms)
    key = _U32.pack(doc)
    txn.put(key, _pack([digest, sorted(set(terms))]), db=dbs["fterms"])
    txn.put(key, _frame_record(f, when, length), db=dbs["docs"])
    state.total_length += length - old_length


def _apply_records(
    txn: lmdb.Transaction[bytes],
    dbs: dict[str, lmdb._Database],
    state: IndexState,
    postings: _Postings,
    view: ReadView,
    frames: list[str],
    events: set[int],
) -> None:
    for seq in sorted(events):
        e = view.event(seq)
        if e is not None:
            _index_event(txn, dbs, state, postings, view, e)
    # New frames take docnums in (created_version, id) order, as a rebuild gives them.
    found = [f for f in (view.frame(fid) for fid in frames) if f is not None]
    found.sort(key=lambda f: (f.created_version, f.id))
    for f in found:
        _index_frame(txn, dbs, state, postings, view, f)


def _bulk_load(
    txn: lmdb.Transaction[bytes],
    dbs: dict[str, lmdb._Database],
    state: IndexState,
    postings: _Postings,
    source: IntentSource,
) -> None:
    """Index every event and frame, reading the context in pages of :data:`REBUILD_PAGE`.

    Each page is its own snapshot, so no context read stays open for the whole
    rebuild. That is safe: anything that changes after the caller read
    ``outbox_last`` has an intent after it, applied later. The index claims
    the version of the first snapshot, which every later page includes.
    """
    meta = source.read(lambda v: v.meta())
    state.created = meta.created
    state.indexed_version = meta.version
    docs_db = dbs["docs"]
    put = txn.put

    def page(view: ReadView, start: int) -> int:
        last = 0
        for e in itertools.islice(view.iter_events(start), REBUILD_PAGE):
            if not 0 < e.seq < FRAME_BASE:
                raise StoreError(f"the search index holds events up to @e{FRAME_BASE - 1}")
            text = view.event_chunk(e.seq, 0, MAX_ANALYZED_CHARS) or ""
            length = postings.add_doc(e.seq, text_terms(text))
            put(_U32.pack(e.seq), _doc_record(e.kind, e.lifecycle, e.time, length), db=docs_db)
            state.documents += 1
            state.total_length += length
            last = e.seq
        return last

    start = 1
    while last := source.read(functools.partial(page, start=start)):
        start = last + 1
        if postings.pending >= BULK_DOCS:
            postings.flush()

    def frames(view: ReadView) -> None:
        for f in sorted(view.iter_frames(), key=lambda f: (f.created_version, f.id)):
            _index_frame(txn, dbs, state, postings, view, f)
            if postings.pending >= BULK_DOCS:
                postings.flush()

    source.read(frames)


@dataclass(slots=True)
class _Ranked:
    top: list[tuple[float, int, bytes]] = field(default_factory=list)
    weights: dict[str, float] = field(default_factory=dict)
    approximate: bool = False


def _chunks_newest(txn: lmdb.Transaction[bytes], db: Any, tk: bytes) -> Iterable[bytes]:
    cursor = txn.cursor(db=db)
    if _last_chunk(cursor, tk) is None:
        return
    prefix = tk + b"\x00"
    while True:
        yield bytes(cursor.value())
        if not cursor.prev() or not bytes(cursor.key()).startswith(prefix):
            return


def _scan(
    txn: lmdb.Transaction[bytes],
    db: Any,
    tk: bytes,
    weight: float,
    tn: _TfNorm,
    acc: dict[int, float],
    filt: _Filter,
    cap: int,
    found: set[int] | None = None,
) -> int:
    """Add the term's score to every document of its newest *cap* postings.

    Returns the lowest docnum scanned if the cap cut the scan short, else 0.
    The docnums scanned are added to *found* if given.
    """
    get = acc.get
    remaining = cap
    only = None if filt.frames and filt.events else (FRAME_BASE if filt.frames else 0)
    wt = _Weights(weight, tn)
    # A term's postings hold each document once: into an empty accumulator they
    # can go in one C-level update.
    first = not acc
    for value in _chunks_newest(txn, db, tk):
        docs, codes = _decode(value)
        if len(docs) > remaining:
            docs = docs[len(docs) - remaining :]
            codes = codes[len(codes) - remaining :]
        if found is not None:
            found.update(docs)
        if only is None and first:
            acc.update(zip(docs, map(wt.__getitem__, codes), strict=True))
        elif only is None:
            for doc, code in zip(docs, codes, strict=True):
                acc[doc] = get(doc, 0.0) + wt[code]
        else:
            for doc, code in zip(docs, codes, strict=True):
                if (doc >= FRAME_BASE) == (only == FRAME_BASE):
                    acc[doc] = get(doc, 0.0) + wt[code]
        remaining -= len(docs)
        if remaining <= 0:
            return docs[0] if len(docs) else 0
    return 0


def _probe(
    txn: lmdb.Transaction[bytes],
    db: Any,
    tk: bytes,
    weight: float,
    tn: _TfNorm,
    acc: dict[int, float],
    docs: list[int],
) -> None:
    """Add the term's score to each of *docs* (ascending) that contains the term."""
    cursor = txn.cursor(db=db)
    prefix = tk + b"\x00"
    key: bytes | None = None
    cd: array[int] = array("I")
    cc: array[int] = array("H")
    for doc in docs:
        if key is None or not cd or doc > cd[-1] or doc < cd[0]:
            found = _locate(cursor, prefix, doc)
            if found is None:
                return
            if found != key:
                key = found
                raw = txn.get(key, db=db)
                if raw is None:
                    continue
                cd, cc = _decode(raw)
        i = bisect_left(cd, doc)
        if i < len(cd) and cd[i] == doc:
            acc[doc] += weight * tn[cc[i]]


def _kth(
    txn: lmdb.Transaction[bytes],
    dbs: dict[str, lmdb._Database],
    acc: dict[int, float],
    k: int,
    filt: _Filter,
) -> float:
    """A lower bound of the final k-th best score among documents passing *filt*."""
    if len(acc) < k:
        return 0.0
    if not filt.needs_record and filt.frames and filt.events and not filt.id_prefix:
        return heapq.nlargest(k, acc.values())[-1]
    passed = 0
    docs_db = dbs["docs"]
    for score, doc in _best(acc, 4 * k):
        if not filt.doc_ok(doc):
            continue
        if filt.needs_record:
            rec = txn.get(_U32.pack(doc), db=docs_db)
            if rec is None or not filt.record_ok(doc, rec):
                continue
        passed += 1
        if passed == k:
            return score
    return 0.0


def _rank(
    txn: lmdb.Transaction[bytes],
    dbs: dict[str, lmdb._Database],
    state: IndexState,
    qterms: list[str],
    limit: int,
    filt: _Filter,
) -> _Ranked:
    ranked = _Ranked()
    n_docs = state.documents
    if not n_docs or not qterms:
        return ranked
    tn = _TfNorm(state.total_length / n_docs)
    infos: list[tuple[float, str, int]] = []
    terms_db, postings_db = dbs["terms"], dbs["postings"]
    for term in qterms:
        raw = txn.get(term.encode(), db=terms_db)
        if raw is None:
            continue
        df = _DF.unpack(raw)[0]
        idf = math.log(1 + (n_docs - df + 0.5) / (df + 0.5))
        infos.append((idf, term, df))
        ranked.weights[term] = idf
    infos.sort(key=lambda x: (-x[0], x[1]))
    bounds = [idf * (K1 + 1) for idf, _, _ in infos]
    rest = [sum(bounds[i:]) for i in range(len(bounds))]
    acc: dict[int, float] = {}
    rare: set[int] = set()  # documents found by terms scanned in full
    for i, (idf, term, df) in enumerate(infos):
        tk = term.encode()
        # MaxScore, tried only where skipping the scan saves real work, and only
        # if the terms left could not even lift the best document found so far.
        if acc and df > PRUNE_DF and rest[i] <= max(acc.values()):
            theta = _kth(txn, dbs, acc, limit, filt)
            if theta > 0 and rest[i] <= theta:
                # No document not found yet can reach the top: finish the ones found.
                alive = [d for d, s in acc.items() if s + rest[i] >= theta]
                if len(alive) > PROBE_CAP:
                    alive = heapq.nlargest(PROBE_CAP, alive, key=acc.__getitem__)
                    ranked.approximate = True
                acc = {d: acc[d] for d in alive}
                alive.sort()
                for idf_j, term_j, _ in infos[i:]:
                    _probe(txn, postings_db, term_j.encode(), idf_j, tn, acc, alive)
                break
        capped = df > SCAN_CAP
        lowest = _scan(txn, postings_db, tk, idf, tn, acc, filt, SCAN_CAP, None if capped else rare)
        if lowest:
            ranked.approximate = True
            # Documents that rarer terms found get this term's score even if older.
            older = [d for d in rare if d < lowest]
            if len(older) > PROBE_CAP:
                older = heapq.nlargest(PROBE_CAP, older, key=acc.__getitem__)
            older.sort()
            _probe(txn, postings_db, tk, idf, tn, acc, older)
    ranked.top = _top(txn, dbs, acc, limit, filt)
    return ranked


def _top(
    txn: lmdb.Transaction[bytes],
    dbs: dict[str, lmdb._Database],
    acc: dict[int, float],
    limit: int,
    filt: _Filter,
) -> list[tuple[float, int, bytes]]:
    docs_db = dbs["docs"]
    if not (filt.frames and filt.events) or filt.id_prefix:
        acc = {d: s for d, s in acc.items() if filt.doc_ok(d)}
    want = limit if not filt.needs_record else 4 * limit
    seen = 0
    out: list[tuple[float, int, bytes]] = []
    while True:
        best = _best(acc, want)
        for score, doc in best[seen:]:
            rec = txn.get(_U32.pack(doc), db=docs_db)
            if rec is None or (filt.needs_record and not filt.record_ok(doc, rec)):
                continue
            out.append((score, doc, rec))
            if len(out) == limit:
                return out
        if len(best) < want:
            return out
        seen = len(best)
        want *= 4


def _best(acc: dict[int, float], n: int) -> list[tuple[float, int]]:
    """The *n* best ``(score, docnum)``, best first (ties: higher docnum first)."""
    if len(acc) <= n:
        return sorted(((s, d) for d, s in acc.items()), reverse=True)
    # Find the n-th score on the bare floats first: far cheaper than keyed tuples.
    floor = heapq.nlargest(n, acc.values())[-1]
    return heapq.nlargest(n, ((s, d) for d, s in acc.items() if s >= floor))


def _doc_text(view: ReadView, doc: int, rec: bytes) -> str:
    if doc >= FRAME_BASE:
        frame_id = _frame_id(rec)
        f = view.frame(frame_id)
        return frame_text(f) if f is not None else frame_id
    return view.event_chunk(doc, 0, SNIPPET_SCAN_CHARS) or ""


class _Highlighter:
    """Builds ~160-character snippets around the best window of query-term matches."""

    OPEN = "«"
    CLOSE = "»"
    MAX_MATCHES = 256

    def __init__(self, weights: dict[str, float]) -> None:
        self.weights = weights
        parts = []
        for term in sorted(weights, key=lambda t: (-len(t), t)):
            escaped = re.escape(term)
            parts.append(rf"(?<![^\W_]){escaped}(?![^\W_])" if is_spaced(term) else escaped)
        self.pattern = re.compile("|".join(parts)) if parts else None

    def snippet(self, text: str) -> str:
        if not text:
            return ""
        norm = normalize(text)
        matches: list[tuple[int, int, str]] = []
        if self.pattern is not None:
            for m in self.pattern.finditer(norm.text):
                matches.append((m.start(), m.end(), m.group()))
                if len(matches) >= self.MAX_MATCHES:
                    break
        if not matches:
            return _clip(text, 0, SNIPPET_CHARS)
        # The window (in normalized offsets) holding the most weight of distinct terms.
        best_i, best_w = 0, -1.0
        for i, (start, _, _) in enumerate(matches):
            seen: set[str] = set()
            w = 0.0
            for _, e, term in matches[i:]:
                if e - start > SNIPPET_CHARS:
                    break
                if term not in seen:
                    seen.add(term)
                    w += self.weights.get(term, 0.0)
            if w > best_w:
                best_i, best_w = i, w
        anchor = matches[best_i][0]
        size = len(norm.text)
        win_start = 0 if size <= SNIPPET_CHARS else max(0, anchor - SNIPPET_CHARS // 4)
        if win_start:
            # Start at a word edge when there is one shortly before.
            space = norm.text.rfind(" ", max(0, win_start - 24), anchor)
            if space >= 0:
                win_start = space + 1
        win_end = min(size, win_start + SNIPPET_CHARS)
        spans: list[tuple[int, int]] = []
        for s, e, _ in matches:
            if s < win_start or e > win_end:
                continue
            o_s, o_e = norm.span(s, e)
            if spans and o_s < spans[-1][1]:
                spans[-1] = (spans[-1][0], max(spans[-1][1], o_e))
            else:
                spans.append((o_s, o_e))
        o_start = norm.span(win_start, win_start + 1)[0] if win_start < len(norm.text) else 0
        o_end = norm.span(win_end - 1, win_end)[1] if win_end > 0 else 0
        out = ["…"] if o_start > 0 else []
        pos = o_start
        for s, e in spans:
            out.append(text[pos:s])
            out.append(self.OPEN + text[s:e] + self.CLOSE)
            pos = e
        out.append(text[pos:o_end])
        if o_end < len(text):
            out.append("…")
        return "".join(out)


def _clip(text: str, start: int, width: int) -> str:
    piece = text[start : start + width]
    return piece + ("…" if start + width < len(text) else "")


MODEL_SEARCH_ARGS = frozenset(
    {"query", "limit", "since", "until", "kinds", "lifecycle", "id_prefix", "trust", "valid_at"}
)
"""Arguments of the model's ``search`` tool (``agents.models.MEMORY_TOOL_SPECS``)."""
MODEL_SEARCH_LIMIT = 50
"""Most hits one model-facing search returns (the model pages with narrower queries)."""
MODEL_KINDS = tuple(k for k in KINDS if k != LEDGER)
"""What a model's search covers by default: everything but the action ledger (R43)."""


def model_search(index: LexicalIndex, args: Any) -> SearchResult:
    """One search for a model's ``search`` tool call: its arguments checked, governance applied.

    Like recall for a model (:func:`protocol.recall.for_model`): without a
    ``trust`` argument only candidate and accepted frames come back, and naming
    rejected or quarantined is refused (``not_permitted``); the action ledger
    is searched only when ``kinds`` names it. An unknown argument or a value of
    the wrong type is a :class:`RequestError`; *limit* is 1 to
    :data:`MODEL_SEARCH_LIMIT` (default 10).
    """
    if not isinstance(args, dict):
        raise RequestError("search arguments are an object", code="bad_argument")
    unknown = sorted(str(k)[:40] for k in args if k not in MODEL_SEARCH_ARGS)
    if unknown:
        raise RequestError(f"unknown search argument {', '.join(unknown)}", code="bad_argument")
    limit = args.get("limit", 10)
    if (
        isinstance(limit, bool)
        or not isinstance(limit, int)
        or not 1 <= limit <= MODEL_SEARCH_LIMIT
    ):
        raise OutOfRange(f"limit must be between 1 and {MODEL_SEARCH_LIMIT}, not {limit!r}")
    trust = args.get("trust")
    if trust is None:
        trust = MODEL_TRUST
    else:
        hidden = [t for t in trust_filter(trust) if t in HIDDEN_TRUST]
        if hidden:
            raise RequestError(
                f"trust {', '.join(hidden)}: such frames never enter model input",
                code="not_permitted",
            )
    id_prefix = args.get("id_prefix")
    if id_prefix is not None and not isinstance(id_prefix, str):
        raise RequestError("id_prefix is a string", code="bad_argument")
    query = args.get("query")
    if not isinstance(query, str):
        raise RequestError("search needs a query string", code="bad_query")
    return index.search(
        query,
        limit=limit,
        since=args.get("since"),
        until=args.get("until"),
        kinds=args.get("kinds", MODEL_KINDS),
        lifecycle=args.get("lifecycle"),
        id_prefix=id_prefix,
        trust=trust,
        valid_at=args.get("valid_at"),
    )


def search_text(result: SearchResult) -> str:
    """A search result as the model reads it in a ``recall_result`` observation."""
    lag = f", {result.lag} updates not yet indexed" if result.lag else ""
    head = (
        f"search {result.query!r}: {len(result.hits)} hits"
        f" (index at version {result.indexed_version}{lag})"
    )
    lines = [head]
    for h in result.hits:
        trust = f" [{h.trust}]" if h.trust is not None and h.trust != "accepted" else ""
        label = "frame" if h.type == "frame" else h.kind
        lines.append(f"- {h.id} {label} {h.lifecycle}{trust}: {h.snippet}")
    return "\n".join(lines)


class IndexWorker:
    """A background thread that keeps a :class:`LexicalIndex` up to date (embedded use).

    It applies intents in batches of *batch*, polling the outbox every *poll*
    seconds when idle (:meth:`notify` wakes it at once, e.g. after a commit).
    :meth:`wait_for` blocks until the index has caught up. An error in a batch
    is kept in :attr:`error` and retried after a pause; it never kills the thread.
    Stop the worker before closing the index or the context.
    """

    def __init__(
        self,
        index: LexicalIndex,
        backend: IntentSource | None = None,
        *,
        batch: int = DEFAULT_BATCH,
        poll: float = 0.05,
        start: bool = True,
    ) -> None:
        if batch < 1:
            raise OutOfRange(f"batch must be at least 1, not {batch}")
        if not 0 < poll <= 60:
            raise OutOfRange(f"poll must be between 0 and 60 seconds, not {poll}")
        self.index = index
        self.backend = index._source(backend)
        self.batch = batch
        self.poll = poll
        self.error: BaseException | None = None
        self._cond = threading.Condition()
        self._wake = False
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="morphz-index", daemon=True)
        if start:
            self.start()

    def start(self) -> None:
        """Start the thread (done by the constructor unless ``start=False``)."""
        if not self._thread.is_alive():
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._stop:
                    return
            try:
                n = self.index.apply_intents(self.backend, self.batch)
                self.error = None
            except Exception as e:  # noqa: BLE001 - kept for the owner; the worker goes on
                self.error = e
                n = 0
            with self._cond:
                self._cond.notify_all()
                if n == 0 and not self._stop:
                    if not self._wake:
                        self._cond.wait(self.poll if self.error is None else self.poll * 10)
                    self._wake = False

    def notify(self) -> None:
        """Wake the worker now (there are new intents)."""
        with self._cond:
            self._wake = True
            self._cond.notify_all()

    def wait_for(self, version: int | None = None, timeout: float = 5.0) -> bool:
        """Block until everything written before this call is indexed; False on timeout.

        With *version*, also wait until the index reflects that context version.
        """
        target = self.backend.outbox_last()
        deadline = time.monotonic() + timeout
        while True:
            state = self.index.state()
            if (
                state.usable
                and state.applied >= target
                and (version is None or state.indexed_version >= version)
            ):
                return True
            left = deadline - time.monotonic()
            if left <= 0 or not self._thread.is_alive():
                return False
            with self._cond:
                self._wake = True
                self._cond.notify_all()
                self._cond.wait(min(left, self.poll))

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread after its current batch."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def __enter__(self) -> IndexWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
