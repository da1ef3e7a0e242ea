"""Ranking of the lexical index: BM25 over the query's terms, with MaxScore pruning, and filters.

Ranking is BM25 (``k1 = 1.2``, ``b = 0.75``, idf ``ln(1 + (N - df + 0.5)/(df + 0.5))``)
over the union of the query's terms, with MaxScore pruning: terms are taken
rarest first, and once the terms left cannot lift a new document above the
current k-th score, only the documents already found are looked up. For a
term in more than :data:`SCAN_CAP` documents only its newest ``SCAN_CAP``
postings are scanned; documents that a term scanned in full found still get
its score when older (at most :data:`PROBE_CAP` of them, best first); results
then carry ``approximate=True``. Ties rank by docnum, higher first (frames,
then newer events).

Stems (:mod:`storage.search.morphology`): a query word's stem lookups score
with :data:`STEM_WEIGHT` times the smaller of their own idf and the word's, so
a document with the exact word ranks above one with only another form of it
(other things equal). The same holds for a query word found as a part of an
identifier (:data:`PART_WEIGHT`) and for a lone ideograph of a Chinese or
Japanese query that only its bigrams would look up (:data:`CHAR_WEIGHT`).
A query word's WordNet synonyms (:data:`SYNONYM_WEIGHT`) count only when no form of
the word is in the index: they stand in for a word the context never uses.
A document with an inflected query word (``refunded``)
also holds its stem term; the word's own term then scores its idf less the
stem term's weight, so the two add up to what the word scored without
stemming and an inflected query word weighs no more than one that is its own
stem.

The conversation's rules (:mod:`storage.search.questions` says what they are: a turn's
neighbours, the answer after a turn that asks something, its session, the speaker, the person
named, the order of its turns, a number for a question asking how much) add to the scores of
the best matches here too. Kept as one module: the BM25 pass, the pool it selects and the rules
that add to the pool's scores are one pipeline over one accumulator (about 790 lines).
A query that finds thousands of documents keeps that accumulator in arrays
(:mod:`storage.search.accumulator`) until the pool is selected; probes of a term's
postings for documents already found are :func:`storage.search.postings._probe`.

Names with a leading underscore are shared between the modules of
:mod:`storage.search` only; :mod:`storage.search` lists the public ones.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import lmdb

from storage.search.filters import make_filter
from storage.search.format import (
    _DF,
    _DOC,
    _ENV,
    _KIND_CODE,
    _LIFE_CODE,
    _NORM_DL,
    _TRUST_CODE,
    _U32,
    FRAME_BASE,
    KINDS,
    IndexState,
    _decode,
    _event_session,
    _frame_id,
)
from storage.search.morphology import PART_MARK, QueryStem
from storage.search.postings import _chunks_newest, _probe
from storage.search.questions import (
    AMOUNT_WEIGHT,
    ANSWER_WEIGHT,
    ASK_TERM,
    FOLLOW_WEIGHT,
    NAMED_WEIGHT,
    NUMBER_TERM,
    ORDER_WEIGHT,
    REACTION_WEIGHT,
    SPEAKER_WEIGHT,
    TEMPORAL_TERM,
    TEMPORAL_WEIGHT,
)

if TYPE_CHECKING:
    from storage.search.accumulator import ScoreArrays

K1 = 1.2
"""BM25 term-frequency saturation."""
B = 0.75
"""BM25 document-length normalization."""
SCAN_CAP = 6_000
"""Most postings of one term scanned per query (the newest ones)."""
PROBE_CAP = 512
"""Most already-found documents looked up in a term's postings per query term."""
ARRAY_DOCS = 1024
"""Past this many documents found, a query's scores are kept in arrays
(:mod:`storage.search.accumulator`, numpy) rather than a dict."""
ALIVE_DOCS = 1024
"""Past this many documents found, MaxScore selects those it keeps over arrays."""
PRUNE_DF = 1024
"""MaxScore pruning is tried before terms in more documents than this."""
STEM_WEIGHT = 0.5
"""Weight of a match through a stem relative to an exact match of the query word (below 1)."""
PART_WEIGHT = 0.5
"""Weight of a query word found as a part of an identifier (``meal`` in ``meal_preference``)."""
CHAR_WEIGHT = 0.25
"""Weight of a lone ideograph of the query that its bigrams cover (``鞋`` of ``运动鞋``)."""
DERIVED_WEIGHT = 0.25
"""Weight of a query word found as a derivational relative (``departure`` for ``depart``)."""
VARIANT_WEIGHT = 1.0
"""Weight of a word's other writing (``8`` for ``eight``, ``neighbor`` for ``neighbour``): the
same word, so as much as the word."""
SYNONYM_WEIGHT = 0.5
"""Weight of a query word's synonym (``defective`` for ``faulty``), counted only when no form
of the word is in the index: it stands in for the word, as another form of it would."""
PAST_WEIGHT = STEM_WEIGHT
"""Weight of a past form of a question's verb after ``did`` (``went`` for ``go``): another
form of the word, as a stem match is."""
PLURAL_WEIGHT = STEM_WEIGHT
"""Weight of a noun's irregular plural or singular (``children`` for ``child``): another form
of the word, as a stem match is."""
_KIND_WEIGHT = {
    "stem": STEM_WEIGHT,
    "derived": DERIVED_WEIGHT,
    "variant": VARIANT_WEIGHT,
    "part": PART_WEIGHT,
    "char": CHAR_WEIGHT,
    "synonym": SYNONYM_WEIGHT,
    "past": PAST_WEIGHT,
    "plural": PLURAL_WEIGHT,
}
NEIGHBOUR_WEIGHT = 0.1
"""Share of a turn's score lent to each adjacent turn of the same session (0: none)."""
SESSION_WEIGHT = 0.1
"""Share of the summed scores of the other best matches of its session a turn gets (0: none)."""
NEIGHBOUR_POOL = 64
"""The best documents (at least 4 × the limit) whose neighbours get a share of their score."""


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
    """The filter of a search's arguments (checked by :func:`make_filter`), in codes."""
    f = make_filter(kinds, lifecycle, since, until, id_prefix, trust, valid_at)
    filt = _Filter(since=f.since, until=f.until, id_prefix=f.id_prefix, valid_at=f.valid_at)
    if f.trusts is not None:
        filt.trusts = frozenset(_TRUST_CODE[t] for t in f.trusts)
    if f.kinds is not None:
        filt.kinds = frozenset(_KIND_CODE[k] for k in f.kinds)
        filt.frames = "frame" in f.kinds
        filt.events = bool(f.kinds - {"frame"})
    if f.lifecycles is not None:
        filt.lifecycles = frozenset(_LIFE_CODE[k] for k in f.lifecycles)
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


@dataclass(slots=True)
class _Ranked:
    top: list[tuple[float, int, bytes]] = field(default_factory=list)
    weights: dict[str, float] = field(default_factory=dict)
    """Weight of each word term found in the index (exact terms and stems' word forms)."""
    stems: dict[str, float] = field(default_factory=dict)
    """Weight of each stem term found in the index."""
    approximate: bool = False
    lent: dict[int, float] = field(default_factory=dict)
    """The share of its score each document got from its neighbours (only those lent any)."""
    session: dict[int, float] = field(default_factory=dict)
    """What each document got from its session's other matches (only those given any)."""
    speaker: dict[int, float] = field(default_factory=dict)
    """What each user turn got for a question about the user's words (only those given any)."""
    order: dict[int, float] = field(default_factory=dict)
    """What each turn got for its place in its session, for a question about how things
    ended or began (only those given any)."""
    amount: dict[int, float] = field(default_factory=dict)
    """What each document stating a number got for a question asking how much or how many
    (only those given any)."""


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
    The docnums scanned that pass the filter's docnum test are added to *found* if given.
    """
    get = acc.get
    remaining = cap
    only = _only(filt)
    frames = only == FRAME_BASE
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
            found.update(docs if only is None else [d for d in docs if (d >= FRAME_BASE) == frames])
        if only is None and first:
            acc.update(zip(docs, map(wt.__getitem__, codes), strict=True))
        elif only is None:
            for doc, code in zip(docs, codes, strict=True):
                acc[doc] = get(doc, 0.0) + wt[code]
        else:
            for doc, code in zip(docs, codes, strict=True):
                if (doc >= FRAME_BASE) == frames:
                    acc[doc] = get(doc, 0.0) + wt[code]
        remaining -= len(docs)
        if remaining <= 0:
            return docs[0] if len(docs) else 0
    return 0


def _only(filt: _Filter) -> int | None:
    """None when the filter takes frames and events, else the kind it keeps:
    ``FRAME_BASE`` (frames) or 0 (events)."""
    return None if filt.frames and filt.events else (FRAME_BASE if filt.frames else 0)


def _alive(acc: dict[int, float], rest: float, theta: float, cap: int) -> tuple[list[int], bool]:
    """The documents of *acc* that the terms left (worth at most *rest*) could lift to
    *theta*, ascending; when more than *cap*, the *cap* best (ties: the earlier found),
    and True."""
    alive = [d for d, s in acc.items() if s + rest >= theta]
    cut = len(alive) > cap
    if cut:
        alive = heapq.nlargest(cap, alive, key=acc.__getitem__)
    alive.sort()
    return alive, cut


def _top_score(acc: dict[int, float], arrays: ScoreArrays | None) -> float:
    """The best score found so far."""
    return max(acc.values()) if arrays is None else arrays.top()


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
    stems: Sequence[tuple[str, QueryStem]] = (),
    *,
    weights: dict[str, float] | None = None,
    when: bool = False,
    neighbours: float = 0.0,
    borrow: bool = False,
    session: float = 0.0,
    speaker: bool = False,
    order: int = 0,
    names: Sequence[str] = (),
    reaction: bool = False,
    amount: bool = False,
) -> _Ranked:
    ranked = _Ranked()
    n_docs = state.documents
    if not n_docs or not qterms:
        return ranked
    tn = _TfNorm(state.total_length / n_docs)
    terms_db, postings_db = dbs["terms"], dbs["postings"]

    def idf_of(df: int) -> float:
        return math.log(1 + (n_docs - df + 0.5) / (df + 0.5))

    found: dict[str, tuple[float, int]] = {}  # term -> (weight, df)
    word_idf: dict[str, float] = {}  # exact query term -> its idf (df 0 if not indexed)
    for term in qterms:
        raw = txn.get(term.encode(), db=terms_db)
        df = _DF.unpack(raw)[0] if raw is not None else 0
        word_idf[term] = idf_of(df) * (weights.get(term, 1.0) if weights else 1.0)
        if df:
            found[term] = (word_idf[term], df)
            ranked.weights[term] = word_idf[term]
    exact = set(qterms)
    formed = {term for term in qterms if term in found}  # query words the index holds
    # Synonyms last: they count only for a query word no form of which was found.
    for source, extra in sorted(stems, key=lambda s: s[1].kind == "synonym"):
        if extra.term in exact:
            continue  # an exact term of the query scores as one
        if extra.kind == "synonym" and source in formed:
            continue
        raw = txn.get(extra.term.encode(), db=terms_db)
        if raw is None:
            continue
        df = _DF.unpack(raw)[0]
        if extra.kind == "stem":
            formed.add(source)
        idf = idf_of(df)
        weight = _KIND_WEIGHT[extra.kind] * min(idf, word_idf.get(source, idf))
        if weight > found.get(extra.term, (0.0, 0))[0]:
            found[extra.term] = (weight, df)
            if not extra.term.startswith(PART_MARK):  # not words the highlighter marks
                (ranked.stems if extra.stem else ranked.weights)[extra.term] = weight
    # A document with an inflected query word also holds its stem term: the word's
    # own term scores what is left, so the two together score as the word alone.
    for source, extra in stems:
        if extra.with_word and extra.term in found and source in found:
            weight, df = found[source]
            found[source] = (weight - found[extra.term][0], df)
    for term in qterms:
        if term in found and found[term][0] <= 0:
            del found[term]
    infos = [(weight, term, df) for term, (weight, df) in found.items()]
    infos.sort(key=lambda x: (-x[0], x[1]))
    bounds = [idf * (K1 + 1) for idf, _, _ in infos]
    rest = [sum(bounds[i:]) for i in range(len(bounds))]
    acc: dict[int, float] = {}
    # Once a term would take the documents found past ARRAY_DOCS, they move to arrays.
    arrays: ScoreArrays | None = None
    rare: set[int] = set()  # documents found by terms scanned in full
    for i, (idf, term, df) in enumerate(infos):
        tk = term.encode()
        # MaxScore, tried only where skipping the scan saves real work, and only
        # if the terms left could not even lift the best document found so far.
        found_any = len(arrays) if arrays is not None else len(acc)
        if found_any and df > PRUNE_DF and rest[i] <= _top_score(acc, arrays):
            theta = _kth(txn, dbs, acc if arrays is None else arrays.best(4 * limit), limit, filt)
            if theta > 0 and rest[i] <= theta:
                # No document not found yet can reach the top: finish the ones found.
                if arrays is None and len(acc) <= ALIVE_DOCS:
                    alive, cut = _alive(acc, rest[i], theta, PROBE_CAP)
                    acc = {d: acc[d] for d in alive}
                else:
                    if arrays is None:
                        from storage.search.accumulator import ScoreArrays

                        arrays = ScoreArrays.of(acc, indexed=False)
                    acc, cut = arrays.alive(rest[i], theta, PROBE_CAP)
                    alive, arrays = list(acc), None
                ranked.approximate = ranked.approximate or cut
                for idf_j, term_j, _ in infos[i:]:
                    _probe(txn, postings_db, term_j.encode(), idf_j, tn, acc, alive)
                break
        capped = df > SCAN_CAP
        if arrays is None and len(acc) + min(df, SCAN_CAP) > ARRAY_DOCS:
            from storage.search.accumulator import ScoreArrays

            arrays = ScoreArrays.of(acc, full=rare)
        if arrays is None:
            full = None if capped else rare
            lowest = _scan(txn, postings_db, tk, idf, tn, acc, filt, SCAN_CAP, full)
        else:
            wt = _Weights(idf, tn)
            lowest = arrays.scan(txn, postings_db, tk, wt, SCAN_CAP, _only(filt), not capped)
        if lowest:
            ranked.approximate = True
            # Documents that rarer terms found get this term's score even if older
            # (at most PROBE_CAP, the best; ties: the earlier found).
            if arrays is None:
                older = [d for d in acc if d < lowest and d in rare]
                if len(older) > PROBE_CAP:
                    older = heapq.nlargest(PROBE_CAP, older, key=acc.__getitem__)
                older.sort()
                _probe(txn, postings_db, tk, idf, tn, acc, older)
            else:
                scores, positions = arrays.older(lowest, PROBE_CAP)
                _probe(txn, postings_db, tk, idf, tn, scores, list(scores))
                arrays.update(scores, positions)
    if arrays is not None:
        acc = arrays.to_dict()
    probed: list[int] = []
    if when and acc:
        probed = _when(txn, dbs, state, tn, acc, idf_of)
    pool = max(NEIGHBOUR_POOL, 4 * limit)
    lent: dict[int, float] = {}
    given: dict[int, float] = {}
    told: dict[int, float] = {}
    placed: dict[int, float] = {}
    # The rules below read only the best `pool` documents (and their neighbours), and
    # only ever add to scores: the final ranking is found among those candidates.
    cand: dict[int, float] | None = None
    head: list[tuple[float, int]] = []
    floor: tuple[float, int] | None = None
    if (neighbours > 0 or session > 0 or speaker or order or names or amount) and acc:
        # The temporal term only raised the documents it probed: the pool is among them.
        head = _best({d: acc[d] for d in probed} if len(probed) >= pool else acc, pool)
        cand = {d: s for s, d in head}
        floor = head[-1] if len(acc) > len(head) else None
    if order and cand:
        placed = _order(txn, dbs["docs"], head, order)
    if (neighbours > 0 or session > 0) and cand:
        forward = REACTION_WEIGHT if reaction and neighbours > 0 else 0.0
        asked: set[int] = set()
        if borrow and neighbours > 0 and (ANSWER_WEIGHT or FOLLOW_WEIGHT):
            # Which of the best turns, and of the turns just after them, ask something.
            turns = {doc + step for _, doc in head for step in (0, 1)}
            asked = _holding(txn, dbs, tn, ASK_TERM.encode(), turns)
        lent, given = _lend(
            txn, dbs["docs"], acc, head, neighbours, borrow, session, forward, asked
        )
    if cand:
        for evidence in (placed, lent, given):
            for doc, share in evidence.items():
                acc[doc] = cand[doc] = acc.get(doc, 0.0) + share
    if (speaker or names) and cand:
        best = _best(cand, pool)
        told = _speaker(txn, dbs["docs"], best) if speaker else {}
        named = _named(txn, dbs, tn, names, best)
        for doc, share in named.items():
            told[doc] = told.get(doc, 0.0) + share
        for doc, share in told.items():
            acc[doc] = cand[doc] = acc[doc] + share
    counted: dict[int, float] = {}
    if amount and cand:
        best = _best(cand, pool)
        held = _holding(txn, dbs, tn, NUMBER_TERM.encode(), _scored(best))
        counted = {doc: AMOUNT_WEIGHT * score for score, doc in best if doc in held}
        for doc, share in counted.items():
            acc[doc] = cand[doc] = acc[doc] + share
    ranked.top = _top(txn, dbs, acc, limit, filt, cand, floor)
    if told:
        ranked.speaker = {doc: told[doc] for _, doc, _ in ranked.top if doc in told}
    if lent:
        ranked.lent = {doc: lent[doc] for _, doc, _ in ranked.top if doc in lent}
    if given:
        ranked.session = {doc: given[doc] for _, doc, _ in ranked.top if doc in given}
    if placed:
        ranked.order = {doc: placed[doc] for _, doc, _ in ranked.top if doc in placed}
    if counted:
        ranked.amount = {doc: counted[doc] for _, doc, _ in ranked.top if doc in counted}
    return ranked


def _when(
    txn: lmdb.Transaction[bytes],
    dbs: dict[str, lmdb._Database],
    state: IndexState,
    tn: _TfNorm,
    acc: dict[int, float],
    idf_of: Any,
) -> list[int]:
    """Add the temporal term's score to the best documents found (a question asking when);
    return the documents looked up (none if no document states a time).

    Only documents the question's words found are looked up (at most
    :data:`PROBE_CAP`): stating a time is evidence only beside the subject.
    """
    raw = txn.get(TEMPORAL_TERM.encode(), db=dbs["terms"])
    if raw is None:
        return []
    weight = TEMPORAL_WEIGHT * idf_of(_DF.unpack(raw)[0])
    docs = [d for _, d in _best(acc, PROBE_CAP)]
    docs.sort()
    _probe(txn, dbs["postings"], TEMPORAL_TERM.encode(), weight, tn, acc, docs)
    return docs


_USER = _KIND_CODE["user_message"]


def _speaker(
    txn: lmdb.Transaction[bytes], docs_db: Any, pool: list[tuple[float, int]]
) -> dict[int, float]:
    """What each user turn among the *pool* (the best ``(score, docnum)``) gets for a
    question about the user's words: ``(SPEAKER_WEIGHT - 1)`` times its score (one record
    read per pooled event)."""
    out: dict[int, float] = {}
    for score, doc in pool:
        if doc >= FRAME_BASE or score <= 0:
            continue
        rec = txn.get(_U32.pack(doc), db=docs_db)
        if rec is not None and rec[0] == _USER:
            out[doc] = (SPEAKER_WEIGHT - 1.0) * score
    return out


def _named(
    txn: lmdb.Transaction[bytes],
    dbs: dict[str, lmdb._Database],
    tn: _TfNorm,
    names: Sequence[str],
    pool: list[tuple[float, int]],
) -> dict[int, float]:
    """What each turn among the *pool* whose speaker the question names gets:
    ``(NAMED_WEIGHT - 1)`` times its score. *names* are the question's speaker terms in
    order; the first that some turn of the context carries is the one asked about (one
    term read per name, one probe of its postings)."""
    for name in names:
        key = name.encode()
        if txn.get(key, db=dbs["terms"]) is None:
            continue
        held = _holding(txn, dbs, tn, key, _scored(pool))
        return {doc: (NAMED_WEIGHT - 1.0) * score for score, doc in pool if doc in held}
    return {}


def _holding(
    txn: lmdb.Transaction[bytes],
    dbs: dict[str, lmdb._Database],
    tn: _TfNorm,
    key: bytes,
    docs: Iterable[int],
) -> set[int]:
    """The events among *docs* that hold the term *key* (one probe of its postings)."""
    events = sorted({doc for doc in docs if doc < FRAME_BASE})
    held = dict.fromkeys(events, 0.0)
    _probe(txn, dbs["postings"], key, 1.0, tn, held, events)
    return {doc for doc, found in held.items() if found}


def _scored(pool: list[tuple[float, int]]) -> list[int]:
    """The documents of a *pool* of ``(score, docnum)`` that scored above 0."""
    return [doc for score, doc in pool if score > 0]


def _order(
    txn: lmdb.Transaction[bytes], docs_db: Any, pool: list[tuple[float, int]], direction: int
) -> dict[int, float]:
    """What each event of the *pool* (the best ``(score, docnum)``) gets for its place in its
    session, for a question about how things ended (*direction* 1) or began (-1).

    Among the pooled events of one session (at least two), the one at place ``p`` of their
    docnum span (0 the first, 1 the last) gets ``ORDER_WEIGHT · p`` times its score
    (``1 − p`` when the question asks how things began). One record read per pooled event.
    """
    by_session: dict[int, list[tuple[int, float]]] = {}
    for score, doc in pool:
        if doc >= FRAME_BASE or score <= 0:
            continue
        rec = txn.get(_U32.pack(doc), db=docs_db)
        code = None if rec is None else _event_session(rec)
        if code is not None:
            by_session.setdefault(code, []).append((doc, score))
    out: dict[int, float] = {}
    for turns in by_session.values():
        first = min(doc for doc, _ in turns)
        span = max(doc for doc, _ in turns) - first
        if not span:
            continue
        for doc, score in turns:
            place = (doc - first) / span
            share = ORDER_WEIGHT * (place if direction > 0 else 1.0 - place) * score
            if share > 0:
                out[doc] = share
    return out


def _lend(
    txn: lmdb.Transaction[bytes],
    docs_db: Any,
    acc: dict[int, float],
    pool: list[tuple[float, int]],
    share: float,
    borrow: bool,
    session_share: float = 0.0,
    forward: float = 0.0,
    asked: set[int] | frozenset[int] = frozenset(),
) -> tuple[dict[int, float], dict[int, float]]:
    """The evidence of a turn's conversation: what each document is lent by its neighbours
    and what it gets from its session, as two maps (only documents given any).

    *Neighbours*: each event of the *pool* (the best ``(score, docnum)`` of *acc*)
    lends *share* of its score to the events just before and after it in the same
    session (equal session codes in their records): the answer to a question is often split over
    adjacent turns, or named by the other speaker. The event just after gets
    *forward* more (a question about how someone reacted: the answer is the reply).
    Unless *borrow*, only turns that matched the query themselves take a share (a
    keyword search finds only turns holding its words).

    *Questions asked in the conversation*: *asked* holds the turns among the pool and the
    turns just after them that end with a question mark. A pooled turn that asks something
    lends the next turn :data:`~storage.search.questions.ANSWER_WEIGHT` more (its answer); a
    pooled turn followed by one that asks something lends the turn after that
    :data:`~storage.search.questions.FOLLOW_WEIGHT` ("I failed the driving test." — "What
    happened?" — "I rolled back on the slope.").

    *Session*: each event among the pool and its neighbours gets
    *session_share* of the summed scores of the *other* pool events of its
    session: turns of the session that talks most about the question's subject
    rank above equally good matches in a session that mentions it once (which
    get nothing). When the pool holds one session, nothing is given (the rule
    would only reorder the best turn and the next).

    Scores lent are the turns' own (not what they were lent), so both are one
    pass and order-independent. Frames neither lend nor borrow.
    """
    sessions: dict[int, int | None] = {}

    def session(doc: int) -> int | None:
        if doc not in sessions:
            rec = txn.get(_U32.pack(doc), db=docs_db) if 0 < doc < FRAME_BASE else None
            sessions[doc] = None if rec is None else _event_session(rec)
        return sessions[doc]

    lent: dict[int, float] = {}
    get = lent.get
    totals: dict[int, float] = {}
    pooled: dict[int, float] = {}
    for score, doc in pool:
        if doc >= FRAME_BASE or score <= 0:
            continue
        own = session(doc)
        if own is None:
            continue
        totals[own] = totals.get(own, 0.0) + score
        pooled[doc] = score
        if share > 0:
            for other in (doc - 1, doc + 1):
                if (borrow or other in acc) and session(other) == own:
                    part = share + forward if other > doc else share
                    if other > doc and doc in asked:
                        part += ANSWER_WEIGHT
                    lent[other] = get(other, 0.0) + part * score
            if doc + 1 in asked and session(doc + 1) == own and session(doc + 2) == own:
                lent[doc + 2] = get(doc + 2, 0.0) + FOLLOW_WEIGHT * score
    given: dict[int, float] = {}
    if session_share > 0 and len(totals) > 1:
        for doc, own in sessions.items():
            if own is not None and own in totals and (doc in acc or doc in lent):
                rest = totals[own] - pooled.get(doc, 0.0)  # the other turns' evidence
                if rest > 1e-12:
                    given[doc] = session_share * rest
    return lent, given


def _top(
    txn: lmdb.Transaction[bytes],
    dbs: dict[str, lmdb._Database],
    acc: dict[int, float],
    limit: int,
    filt: _Filter,
    cand: dict[int, float] | None = None,
    floor: tuple[float, int] | None = None,
) -> list[tuple[float, int, bytes]]:
    """The *limit* best documents of *acc* passing *filt*: ``(score, docnum, record)``.

    *cand* holds every document of *acc* that ranks at or above *floor* (a
    ``(score, docnum)``; None: *cand* is all of *acc*): when the best of *cand* passing
    the filter all rank there, they are the answer, found without a pass over *acc*.
    """
    if cand is not None:
        found = _top(txn, dbs, cand, limit, filt)
        if floor is None or (len(found) == limit and (found[-1][0], found[-1][1]) >= floor):
            return found
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
