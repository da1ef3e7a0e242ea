"""The stored form of the lexical index: format version, key layout and record codecs.

The index lives in ``<context dir>/index/``, apart from the durable records, so
deleting that directory loses nothing. An index whose :data:`INDEX_FORMAT` or
byte order is not this build's is not :attr:`IndexState.usable`: searches
answer as from an empty index, and the next
:meth:`~storage.search.index.LexicalIndex.apply_intents` rebuilds it.

Named databases of the index environment (``u32`` is 4-byte big-endian;
``docnum`` is an event's sequence number, or ``FRAME_BASE`` + n for the n-th
frame in ``(created_version, id)`` order, so numbering is the same however the
index was built)::

    meta       b"state"          -> msgpack {format, byteorder, built, created, applied,
                                             indexed_version, documents, total_length,
                                             next_frame, languages}
    docs       u32(docnum)       -> <BBdI kind, lifecycle, time, length>               (events)
                                    <BBdI …> <Bdd trust, valid_from, valid_to> + frame id (UTF-8)
    frame_ids  enc(frame id)     -> u32(docnum)
    fterms     u32(docnum)       -> msgpack [digest of the text, [distinct terms]]  (frames)
    terms      term (UTF-8)      -> <I document frequency>
               (a word, or a stem term "\\x01" + language + ":" + stem)
    postings   term 00 u32(first docnum) -> n × u32 docnum, then n × u16 (tf << 8 | norm),
                                            native byte order, docnums ascending

``norm`` is the document length quantized to one byte (exact below 32 terms,
then steps of 2^(1/16)); ``tf`` is capped at 255. A frame's record also holds
its envelope's trust (index into :data:`~protocol.state.TRUST`) and valid time
(open ends as ∓infinity), so searches filter by them; an intent naming the
frame (every write, envelope change and governance decision has one) rewrites
them. Posting chunks are :mod:`storage.search.postings`.

``languages`` are the Snowball languages the index was built for
(:mod:`storage.search.morphology`): their stem terms sit beside the words'
terms, and a document's length counts only the words.

Names with a leading underscore are shared between the modules of
:mod:`storage.search` only; :mod:`storage.search` lists the public ones.
"""

from __future__ import annotations

import hashlib
import math
import struct
import sys
from array import array
from bisect import bisect_right
from dataclasses import dataclass
from typing import Any

import lmdb
import msgpack

from protocol.state import ACTIVE, EVENT_KINDS, RETIRED, RETIRING, TRUST, Frame
from storage.environment import DEFAULT_MAP_SIZE

INDEX_DIR = "index"
"""Subdirectory of a context directory that holds its lexical index."""
INDEX_FORMAT = 9
"""Bumped when the stored layout changes (2: frames carry trust and valid time; 3: stem terms;
4: identifier-part terms; 5: events carry their session's code, documents that state a time
the temporal term; 6: possessives cut; 7: turns that start with a speaker's label carry
speaker terms, documents that state a number the number term; 8: turns that end with a question
mark carry the ask term; 9: a speaker's label after a date written without a separator).

An index of another format is rebuilt by the next
:meth:`~storage.search.index.LexicalIndex.apply_intents`.
"""
FRAME_BASE = 1 << 31
"""Docnums of frames start here; events use their sequence number, below it."""
MAP_SIZE = DEFAULT_MAP_SIZE
"""Initial map of the index environment; it doubles whenever a write fills it
(:mod:`storage.environment`), so many indexes fit in one process's address space."""

KINDS = ("frame", *EVENT_KINDS)
"""What a document can be: a frame, or an event of one of the observation kinds."""
LIFECYCLES = (ACTIVE, RETIRING, RETIRED)
"""A document's lifecycle, stored as its index in this tuple."""

_KIND_CODE = {k: i for i, k in enumerate(KINDS)}
_LIFE_CODE = {k: i for i, k in enumerate(LIFECYCLES)}
_TRUST_CODE = {k: i for i, k in enumerate(TRUST)}
_UNKNOWN_TRUST = 0xFF
_DOC = struct.Struct("<BBdI")
_ENV = struct.Struct("<Bdd")
"""A frame's trust code and valid time ``[valid_from, valid_to)``, after its :data:`_DOC` part."""
_FRAME_HEAD = _DOC.size + _ENV.size
_SESSION = struct.Struct("<I")
"""An event's session code, after its :data:`_DOC` part (frames have none)."""
_U32 = struct.Struct(">I")
_DF = struct.Struct("<I")
_STATE = b"state"
_DB_NAMES = ("meta", "docs", "frame_ids", "fterms", "terms", "postings")

if array("I").itemsize != 4 or array("H").itemsize != 2:  # pragma: no cover - exotic ABIs
    raise ImportError("storage.search needs 4-byte array('I') and 2-byte array('H')")


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
    languages: tuple[str, ...] = ()
    """The Snowball languages whose stem terms the index holds (none: no stemming)."""

    def to_record(self) -> dict[str, Any]:
        """The ``meta/state`` record (msgpack-ready)."""
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
            "languages": list(self.languages),
        }

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> IndexState:
        """The state stored as *rec*; unknown keys are ignored, missing ones take defaults."""
        known = {k: rec[k] for k in cls.__dataclass_fields__ if k in rec}
        if "languages" in known:
            known["languages"] = tuple(known["languages"])
        return cls(**known)

    @property
    def usable(self) -> bool:
        """True if the stored index can be read and updated as it is."""
        return self.built and self.format == INDEX_FORMAT and self.byteorder == sys.byteorder


def _load_state(txn: lmdb.Transaction[bytes], dbs: dict[str, lmdb._Database]) -> IndexState:
    data = txn.get(_STATE, db=dbs["meta"])
    return IndexState() if data is None else IndexState.from_record(_unpack(data))


def _save_state(
    txn: lmdb.Transaction[bytes], dbs: dict[str, lmdb._Database], state: IndexState
) -> None:
    txn.put(_STATE, _pack(state.to_record()), db=dbs["meta"])


def _doc_record(kind: str, lifecycle: str, when: float, length: int) -> bytes:
    return _DOC.pack(_KIND_CODE.get(kind, 0), _LIFE_CODE.get(lifecycle, 0), when, length)


def _event_record(kind: str, lifecycle: str, when: float, length: int, session: str) -> bytes:
    """An event's document record: :data:`_DOC`, then its session's code (:func:`session_code`)."""
    return _doc_record(kind, lifecycle, when, length) + _SESSION.pack(session_code(session))


def session_code(session: str) -> int:
    """A 32-bit code of a session name: turns with equal codes are neighbours in one session."""
    return int.from_bytes(hashlib.blake2b(session.encode(), digest_size=4).digest(), "little")


def _event_session(rec: bytes) -> int | None:
    """The session code of an event's document record (None for a frame's)."""
    if len(rec) != _DOC.size + _SESSION.size:
        return None
    code: int = _SESSION.unpack_from(rec, _DOC.size)[0]
    return code


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
