"""The lexical index of one context (R30): a rebuildable projection in its own LMDB environment.

The index lives in ``<context dir>/index/``, apart from the durable records, so
deleting that directory loses nothing: the next :meth:`LexicalIndex.apply_intents`
rebuilds it from the context. Every commit and observation writes an *index
intent* (``{"version", "frames", "events"}``) into the context's outbox in the
same LMDB write; :meth:`LexicalIndex.apply_intents` drains the outbox, reads
the current frames and events, updates the index in one write, and only then
acknowledges (deletes) the intents it applied.

The concerns live in modules of their own: the stored format and its version
(:mod:`storage.search.format`), posting chunks (:mod:`storage.search.postings`),
records to documents (:mod:`storage.search.documents`), BM25 ranking and filters
(:mod:`storage.search.ranking`), snippets (:mod:`storage.search.highlighting`),
the background worker (:mod:`storage.search.worker`) and the model's search
tool (:mod:`storage.search.tool`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import Any

import lmdb

from protocol.errors import OutOfRange, RequestError
from protocol.state import TRUST
from protocol.view import ReadView
from protocol.wire import SURROGATE
from storage.derived import DerivedIndex, IntentSource, ack, open_env
from storage.environment import Environment
from storage.search.documents import _apply_records, _bulk_load
from storage.search.format import (
    _DB_NAMES,
    _DOC,
    _ENV,
    FRAME_BASE,
    INDEX_DIR,
    KINDS,
    LIFECYCLES,
    MAP_SIZE,
    IndexState,
    _frame_id,
    _load_state,
    _save_state,
)
from storage.search.highlighting import _doc_text, _Highlighter
from storage.search.morphology import Morphology, languages_from, morphology
from storage.search.postings import _Postings
from storage.search.ranking import (
    NEIGHBOUR_WEIGHT,
    SESSION_WEIGHT,
    _make_filter,
    _rank,
    _Ranked,
)
from storage.search.results import Hit, SearchResult, Signal
from storage.search.text import QueryIntent, query_intent, query_plan

MAX_LIMIT = 1000
"""Most hits one search returns."""
MAX_QUERY_CHARS = 4096
"""Longest query text accepted."""
MAX_QUERY_TERMS = 32
"""Distinct query terms used, in order of appearance; the rest are ignored."""
DEFAULT_BATCH = 1000
"""Intents applied per index write unless the caller says otherwise."""


class _Rebuild(Exception):
    """Raised inside an index write when the index cannot be brought up to date incrementally."""


class LexicalIndex(DerivedIndex[Environment]):
    """The keyword index of one context, kept in ``<context dir>/index/``.

    Guarantees: searches see one committed snapshot of the index; the index
    only ever acknowledges outbox intents after the write that applied them
    has committed durably; :meth:`rebuild` gives the same answers as an index
    maintained incrementally over the same records; a missing, stale or
    foreign index is rebuilt by the next :meth:`apply_intents`. Safe to share
    between threads; several processes may update one index (LMDB serializes
    their writes and each write re-reads the index state).
    """

    WHAT = "search index"

    def __init__(
        self,
        shared: Environment,
        path: str,
        backend: IntentSource | None,
        languages: tuple[str, ...] = (),
    ) -> None:
        """Use :meth:`open` or :meth:`for_backend`."""
        super().__init__(shared, path, backend)
        self._languages = languages

    @classmethod
    def _open_shared(cls, key: str) -> Environment:
        return open_env(key, _DB_NAMES, cls.WHAT, MAP_SIZE, Environment)

    @classmethod
    def open(
        cls,
        context_dir: str | os.PathLike[str],
        *,
        backend: IntentSource | None = None,
        languages: str | Iterable[str] | None = None,
    ) -> LexicalIndex:
        """Open (creating if needed) the index of the context stored at *context_dir*.

        *backend* is the context's store: the default for :meth:`apply_intents`,
        :meth:`rebuild` and the snippets and version of :meth:`search`.
        *languages* are the Snowball languages whose stems the index holds
        (:func:`~storage.search.morphology.languages_from`: None is the default,
        English unless ``MORPHZ_SEARCH_LANGUAGES`` says otherwise; ``()`` turns
        stemming off). An index built for other languages is rebuilt by the
        next :meth:`apply_intents`; until then searches use the languages it was
        built for. An unknown language is a ``RequestError`` (``bad_language``).
        """
        langs = languages_from(languages)
        path = os.path.join(os.fspath(context_dir), INDEX_DIR)
        return cls(cls._acquire(path), path, backend, langs)

    @classmethod
    def for_backend(
        cls, backend: Any, *, languages: str | Iterable[str] | None = None
    ) -> LexicalIndex:
        """The index of the context whose store is *backend* (an :class:`LmdbStore`).

        *languages* as for :meth:`open`.
        """
        langs = languages_from(languages)
        return cls.open(cls._backend_dir(backend), backend=backend, languages=langs)

    @property
    def languages(self) -> tuple[str, ...]:
        """The languages this handle builds the index for (sorted Snowball names)."""
        return self._languages

    # -- state ---------------------------------------------------------------

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
            if not state.usable or state.created != created or state.languages != self._languages:
                raise _Rebuild
            intents = source.outbox_read(state.applied, limit)
            if not intents:
                if source.outbox_last() > state.applied:
                    raise _Rebuild  # acknowledged by someone else: we missed intents
                return 0, state.applied
            if intents[0][0] != state.applied + 1:
                raise _Rebuild
            if any(intent.get("forget") for _, intent in intents):
                raise _Rebuild  # content was forgotten: no posting of it may survive
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
            ack(source, upto)
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
            state = IndexState(built=True, applied=last, languages=self._languages)
            postings = _Postings(txn, dbs)
            _bulk_load(txn, dbs, state, postings, source)
            postings.flush()
            _save_state(txn, dbs, state)
            return state

        state = self._write(run)
        ack(source, last)
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
        questions: bool = True,
        neighbours: bool = True,
        explain: bool = False,
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

        *questions* applies the question rules (:mod:`storage.search.questions`:
        function and role words down-weighted, a question asking when favours documents
        that state a time, a question about what the user said favours the user's
        turns, one about how things ended or began the later or earlier turns of a
        session); *neighbours* lets a turn's neighbours in its session
        lend it evidence (:data:`~storage.search.ranking.NEIGHBOUR_WEIGHT`): for a
        question (a query with function words and content words) a turn next to
        a strong match is a hit even without a word of the query (the other
        speaker's answer); for keywords, only turns holding a query word are
        hits. Both are on by default; turning both off ranks by BM25 over the
        words alone. In a context of several sessions, a turn also gets
        :data:`~storage.search.ranking.SESSION_WEIGHT` of the summed scores of
        the other best matches of its session (with *neighbours*). *explain* gives each hit
        that its conversation lent evidence its ``signals`` (``lexical``: its
        own BM25, ``neighbours``: the share lent, ``session``: its session's,
        ``speaker``: a user turn's share for a question about the user's words,
        ``order``: a turn's share for its place in its session);
        without it, hits carry no signals (the lexical reply's shape).
        """
        if not isinstance(query, str):
            raise RequestError("a query is a string", code="bad_query")
        if len(query) > MAX_QUERY_CHARS:
            raise OutOfRange(f"a query is at most {MAX_QUERY_CHARS} characters")
        if not query.isascii() and SURROGATE.search(query) is not None:
            # ICU's word breaker takes UTF-8: the CLI's argv (surrogateescape) can carry one.
            raise RequestError("a query holds a lone surrogate: text must be valid Unicode",
                               code="bad_query")  # fmt: skip
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
            raise OutOfRange(f"limit must be between 1 and {MAX_LIMIT}, not {limit!r}")
        filt = _make_filter(kinds, lifecycle, since, until, id_prefix, trust, valid_at)
        dbs = self._env().dbs

        def run(
            txn: lmdb.Transaction[bytes],
        ) -> tuple[IndexState, _Ranked, Morphology | None, list[str]]:
            state = _load_state(txn, dbs)
            if not _readable(state):
                # Another format, byte order or stemmer: answer as an empty index until it
                # is rebuilt.
                return IndexState(), _Ranked(), None, query_plan(query, None, MAX_QUERY_TERMS)[0]
            # The query is analyzed with the languages the index was built for.
            morph = morphology(state.languages)
            qterms, stems = query_plan(query, morph, MAX_QUERY_TERMS)
            intent = query_intent(query) if questions else QueryIntent({}, False, False)
            weights = intent.weights
            ranked = _rank(
                txn,
                dbs,
                state,
                qterms,
                limit,
                filt,
                stems,
                weights=weights,
                when=intent.when,
                neighbours=NEIGHBOUR_WEIGHT if neighbours else 0.0,
                borrow=bool(weights),
                session=SESSION_WEIGHT if neighbours else 0.0,
                speaker=intent.speaker,
                order=intent.order,
                names=intent.names,
                reaction=intent.reaction,
                amount=intent.amount,
            )
            return state, ranked, morph, qterms

        state, ranked, morph, qterms = self._read(run)
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
        highlight = _Highlighter(ranked.weights, ranked.stems, morph)
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
            signals: tuple[Signal, ...] = ()
            share = ranked.lent.get(doc, 0.0)
            given = ranked.session.get(doc, 0.0)
            told = ranked.speaker.get(doc, 0.0)
            placed = ranked.order.get(doc, 0.0)
            counted = ranked.amount.get(doc, 0.0)
            if (share or given or told or placed or counted) and explain:
                # Evidence from the conversation: said apart from the turn's own match.
                own = score - share - given - told - placed - counted
                signals = (Signal("lexical", i + 1, own),) if own > 1e-9 else ()
                for name, part in (
                    ("neighbours", share),
                    ("session", given),
                    ("speaker", told),
                    ("order", placed),
                    ("amount", counted),
                ):
                    if part:
                        signals += (Signal(name, i + 1, part),)
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
                    signals=signals,
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


def _readable(state: IndexState) -> bool:
    """True if searches can use the stored index: its layout and its stemmers are this build's."""
    if not state.usable:
        return False
    try:
        return languages_from(state.languages) == state.languages
    except RequestError:
        return False
