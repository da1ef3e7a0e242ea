"""Posting lists of the lexical index: stored in chunks, merged in one pass per index write.

A term's postings are chunks of at most :data:`CHUNK_POSTINGS` postings under
``term 00 u32(first docnum)``; the chunks of one term cover increasing docnum
ranges (the layout is in :mod:`storage.search.format`). New documents usually
come after every stored one, so an index write appends to the term's last
chunk; anything else is merged into the chunks where the documents belong.

Names with a leading underscore are shared between the modules of
:mod:`storage.search` only; :mod:`storage.search` lists the public ones.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import lmdb

from storage.search.format import _DF, _U32, _decode, _encode, norm_code

CHUNK_POSTINGS = 256
"""Most postings in one stored chunk (1.5 KiB: it stays inside an LMDB leaf page)."""
PROBE_STEPS = 8
"""A probe seeks rather than steps when its next document is more chunks ahead than this."""
PROBE_ARRAYS = 64
"""From this many documents, a probe searches the chunks it kept in numpy arrays."""


class _Postings:
    """Posting changes of one index write, merged into the stored chunks by :meth:`flush`."""

    def __init__(self, txn: lmdb.Transaction[bytes], dbs: dict[str, lmdb._Database]) -> None:
        self.txn = txn
        self.dbs = dbs
        self.adds: dict[str, list[int]] = {}
        self.removes: dict[str, list[int]] = {}
        self.pending = 0

    def add_doc(self, doc: int, terms: list[str], stems: Iterable[str] = ()) -> int:
        """Buffer the postings of document *doc*; return its length in terms.

        *stems* (its stem terms) get postings too but do not count in its length.
        """
        n = len(terms)
        if not n:
            return 0
        base = doc << 16 | norm_code(n)
        adds = self.adds
        counts = Counter(terms)
        counts.update(stems)
        # One int per posting (docnum << 16 | tf << 8 | norm) keeps this loop short.
        for term, tf in counts.items():
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


def _chunks_newest(txn: lmdb.Transaction[bytes], db: Any, tk: bytes) -> Iterable[bytes]:
    cursor = txn.cursor(db=db)
    if _last_chunk(cursor, tk) is None:
        return
    prefix = tk + b"\x00"
    while True:
        yield bytes(cursor.value())
        if not cursor.prev() or not bytes(cursor.key()).startswith(prefix):
            return


def _probe(
    txn: lmdb.Transaction[bytes],
    db: Any,
    tk: bytes,
    weight: float,
    tn: Mapping[int, float],
    acc: dict[int, float],
    docs: list[int],
) -> None:
    """Add ``weight * tn[code]`` (its posting's code) to each of *docs* (ascending, every
    one in *acc*) that contains the term *tk*.

    One cursor walks the term's chunks forward and keeps those a document falls in: it
    steps to the next chunk, or seeks when the next document is further ahead than
    :data:`PROBE_STEPS` chunks' worth of docnums. The chunks kept are searched at once,
    by binary search per document or, for :data:`PROBE_ARRAYS` documents or more, in
    numpy arrays. Either way each document found gets one addition, in ascending order.
    """
    if not docs:
        return
    cursor = txn.cursor(db=db)
    prefix = tk + b"\x00"
    if not _seek(cursor, prefix, docs[0]):
        return
    chunks = _walk(cursor, prefix, docs)
    if not chunks:
        return
    # A chunk of n postings is n u32 docnums, then n u16 codes.
    heads = b"".join([chunk[: 4 * (len(chunk) // 6)] for chunk in chunks])
    tails = b"".join([chunk[4 * (len(chunk) // 6) :] for chunk in chunks])
    if len(docs) >= PROBE_ARRAYS:
        _probe_arrays(heads, tails, weight, tn, acc, docs)
        return
    held = array("I")
    held.frombytes(heads)
    codes = array("H")
    codes.frombytes(tails)
    i, last = 0, len(held)
    for doc in docs:
        i = bisect_left(held, doc, i)
        if i == last:
            return
        if held[i] == doc:
            acc[doc] += weight * tn[codes[i]]


def _walk(cursor: lmdb.Cursor[bytes], prefix: bytes, docs: list[int]) -> list[bytes]:
    """The chunks *docs* fall in, in order, the cursor on the first document's chunk
    (:func:`_seek`)."""
    at = len(prefix)
    unpack = _U32.unpack_from
    kept: list[bytes] = []
    count = len(docs)
    j = 0  # the first document at or past the chunk read last
    while True:
        first = -1  # the start of the chunk read last (none yet after a seek)
        value = b""
        far = False
        for key, data in cursor.iternext():
            start = unpack(key, at)[0] if key.startswith(prefix) else 1 << 32
            if docs[j] < start:
                # Documents before this chunk: in the one read last, or before the term's first.
                k = bisect_left(docs, start, j)
                if first >= 0 and docs[k - 1] >= first:
                    kept.append(value)
                j = k
                if j == count:
                    break
            if first >= 0 and docs[j] - start > PROBE_STEPS * (start - first):
                far = True  # the next document is far ahead: seek rather than step
                break
            first, value = start, data
        else:
            if first >= 0:  # the database's last chunk: every document left is in its range
                kept.append(value)
        if not far or not _seek(cursor, prefix, docs[j]):
            return kept


def _probe_arrays(
    heads: bytes,
    tails: bytes,
    weight: float,
    tn: Mapping[int, float],
    acc: dict[int, float],
    docs: list[int],
) -> None:
    """:func:`_probe`'s search of the chunks kept (*heads* their docnums, *tails* their
    codes) for many documents, in numpy (imported only here)."""
    import numpy as np

    held = np.frombuffer(heads, dtype=np.uint32)
    codes = np.frombuffer(tails, dtype=np.uint16)
    wanted = np.array(docs, dtype=np.uint32)
    where = np.minimum(np.searchsorted(held, wanted), len(held) - 1)
    hit = held[where] == wanted
    for doc, code in zip(wanted[hit].tolist(), codes[where[hit]].tolist(), strict=True):
        acc[doc] += weight * tn[code]


def _seek(cursor: lmdb.Cursor[bytes], prefix: bytes, doc: int) -> bool:
    """Put *cursor* on the chunk of a term (``prefix`` = term 00) where *doc* belongs: the
    last starting at or before it, else the term's first; False if the term has none."""
    after = cursor.set_range(prefix + _U32.pack(doc + 1)) if doc < 0xFFFFFFFF else False
    if (cursor.prev() if after else cursor.last()) and cursor.key().startswith(prefix):
        return True
    return bool(cursor.set_range(prefix)) and bool(cursor.key().startswith(prefix))
