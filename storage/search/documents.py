"""How a context's records become index documents: incremental updates and the full rebuild.

Every commit and observation writes an *index intent* (``{"version", "frames",
"events"}``) into the context's outbox in the same LMDB write; applying an
intent re-reads the current frames and events it names (:func:`_apply_records`).
A rebuild reads every event and frame in pages of snapshots (:func:`_bulk_load`).

Names with a leading underscore are shared between the modules of
:mod:`storage.search` only; :mod:`storage.search` lists the public ones.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
from typing import TypeVar

import lmdb

from protocol.errors import StoreError
from protocol.state import Event, Frame
from protocol.view import ReadView
from storage.derived import IntentSource
from storage.search.format import (
    _DOC,
    _U32,
    FRAME_BASE,
    IndexState,
    _enc,
    _event_record,
    _frame_record,
    _pack,
    _unpack,
)
from storage.search.morphology import Morphology, morphology
from storage.search.postings import _Postings
from storage.search.text import MAX_ANALYZED_CHARS, index_terms

T = TypeVar("T")

BULK_DOCS = 50_000
"""Documents buffered in memory between posting flushes during a rebuild."""
REBUILD_PAGE = 10_000
"""Events read per context snapshot during a rebuild."""


def frame_text(frame: Frame) -> str:
    """What a frame is indexed by: its id and its printed body, joined by spaces."""
    from protocol.sexpr import print_form

    return " ".join([frame.id, *(print_form(f) for f in frame.body)])


def _frame_time(view: ReadView, frame: Frame) -> float:
    rec = view.txlog(frame.updated_version) if frame.updated_version else None
    value = rec.get("time") if rec else None
    return float(value) if isinstance(value, (int, float)) else 0.0


def _index_event(
    txn: lmdb.Transaction[bytes],
    dbs: dict[str, lmdb._Database],
    state: IndexState,
    postings: _Postings,
    view: ReadView,
    e: Event,
    morph: Morphology | None,
) -> None:
    if not 0 < e.seq < FRAME_BASE:
        raise StoreError(f"the search index holds events @e1 to @e{FRAME_BASE - 1}, not @e{e.seq}")
    key = _U32.pack(e.seq)
    old = txn.get(key, db=dbs["docs"])
    if old is not None:
        # Event text never changes: only its lifecycle (and nothing else) can.
        length = _DOC.unpack_from(old)[3]
        new = _event_record(e.kind, e.lifecycle, e.time, length, e.session)
        if new != old:
            txn.put(key, new, db=dbs["docs"])
        return
    text = view.event_chunk(e.seq, 0, MAX_ANALYZED_CHARS) or ""
    length = postings.add_doc(e.seq, *index_terms(text, morph))
    txn.put(key, _event_record(e.kind, e.lifecycle, e.time, length, e.session), db=dbs["docs"])
    state.documents += 1
    state.total_length += length


def _index_frame(
    txn: lmdb.Transaction[bytes],
    dbs: dict[str, lmdb._Database],
    state: IndexState,
    postings: _Postings,
    view: ReadView,
    f: Frame,
    morph: Morphology | None,
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
    terms, stems = index_terms(text, morph)
    length = postings.add_doc(doc, terms, stems)
    key = _U32.pack(doc)
    txn.put(key, _pack([digest, sorted({*terms, *stems})]), db=dbs["fterms"])
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
    morph = morphology(state.languages)
    for seq in sorted(events):
        e = view.event(seq)
        if e is not None:
            _index_event(txn, dbs, state, postings, view, e, morph)
    # New frames take docnums in (created_version, id) order, as a rebuild gives them.
    found = [f for f in (view.frame(fid) for fid in frames) if f is not None]
    found.sort(key=lambda f: (f.created_version, f.id))
    for f in found:
        _index_frame(txn, dbs, state, postings, view, f, morph)


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
    morph = morphology(state.languages)

    def page(view: ReadView, start: int) -> int:
        last = 0
        for e in itertools.islice(view.iter_events(start), REBUILD_PAGE):
            if not 0 < e.seq < FRAME_BASE:
                raise StoreError(f"the search index holds events up to @e{FRAME_BASE - 1}")
            text = view.event_chunk(e.seq, 0, MAX_ANALYZED_CHARS) or ""
            length = postings.add_doc(e.seq, *index_terms(text, morph))
            rec = _event_record(e.kind, e.lifecycle, e.time, length, e.session)
            put(_U32.pack(e.seq), rec, db=docs_db)
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
            _index_frame(txn, dbs, state, postings, view, f, morph)
            if postings.pending >= BULK_DOCS:
                postings.flush()

    source.read(frames)
