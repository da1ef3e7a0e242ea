"""Search for a context: its lexical index and, with an embedder, its vector index, fused.

:class:`Searcher` owns the indexes of one context and how they are kept
current: either caught up synchronously before a search (the embedded
default: a search sees everything committed before it), or by worker threads
(:meth:`Searcher.start_worker`) that a server starts so that indexing and
embedding never run on its store thread; then a search waits for them, at
most a given number of seconds, and reports what it could not wait for as
``lag`` (lexical) and ``semantic.lag`` (vectors).

Without an embedder, search is the lexical index's, unchanged. With one
(:class:`adapters.embeddings.EmbedderConfig` or an
:class:`~storage.embeddings.Embedder`), :meth:`Searcher.find` is hybrid: the
lexical and the semantic rankings (each :data:`FUSE_DEPTH` deep, same
filters) are fused by weighted reciprocal rank (:func:`storage.vectors.fuse`,
:data:`FUSE_K`, :data:`FUSE_WEIGHTS`), ties
broken by id, and each hit says which signals found it. If the query cannot
be embedded (the endpoint is down), the answer is the lexical ranking with
``semantic.degraded`` saying why: a search never fails because of the
embedder.

Both indexes read the context's outbox; it is acknowledged only up to what
both applied (:class:`storage.vectors.SharedOutbox`). A context whose
directory holds a vector index keeps that floor even when opened without an
embedder, so the vectors never miss an update (delete ``vectors/`` to drop it).

A model's search (:func:`storage.search.tool.model_search_args`: its
arguments checked, governance applied) is recorded as a ``recall_result``
observation naming the frames it found, like a recall (:meth:`Searcher.search`).
"""

from __future__ import annotations

import os
import re
import threading
import time
from typing import TYPE_CHECKING, Any

from protocol.errors import MorphzError, StoreError
from protocol.replies import SearchReply
from service.registry import Session
from storage.search import Hit, IndexWorker, LexicalIndex, SearchResult, search_text
from storage.search.results import SemanticInfo, Signal
from storage.search.tool import model_search_args

if TYPE_CHECKING:
    from adapters.embeddings import EmbedderConfig
    from service.context import Context
    from storage.embeddings import Embedder
    from storage.vectors import SharedOutbox, VectorIndex, VectorWorker

# storage.vectors (numpy, usearch) and adapters.embeddings (httpx) are imported only
# when an embedder is configured or a vector index exists: lexical search and
# every other command do not pay for them.
VECTORS_DIR = "vectors"
"""The vector index's directory in a context's (:data:`storage.vectors.VECTOR_DIR`)."""

SEARCH_CATCH_UP = 2.0
"""Seconds a search waits for the index workers to reflect what was committed before it."""
FUSE_DEPTH = 50
"""How many hits of each ranking a hybrid search fuses (at least the limit asked for)."""
FUSE_K = 5
"""The rank offset of the hybrid search's reciprocal-rank fusion (chosen on the dev split)."""
FUSE_WEIGHTS = {"lexical": 1.0, "semantic": 0.5}
"""Each ranking's weight in the fusion: ``weight / (FUSE_K + rank)`` (chosen on the dev split:
docs/search.md, "Fusion by evidence")."""
ENGLISH_ONLY_MODELS = ("all-minilm", "all-mpnet", "all-distilroberta", "msmarco", "-en-", "-en")
"""Parts of a model id that name an embedding model trained on English only (the packaged
all-MiniLM-L6-v2 among them): matched case-insensitively, ``-en`` only at the end."""
FOREIGN_SEMANTIC_WEIGHT = 0.0
"""The semantic ranking's weight for a query in Chinese, Japanese or Korean when the model
is English-only (:data:`ENGLISH_ONLY_MODELS`): its ranking of such a query is close to
chance and fusing it lowers the lexical ranking's (docs/search.md, "Fusion by evidence")."""
_CJK = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
EMBEDDER_PAUSE = 30.0
"""Seconds after an embedder failure during which searches do not call it again (they
answer lexical hits with the failure as ``degraded`` at once, instead of each waiting
out the client's retries); the vector worker keeps retrying on its own."""


class Searcher:
    """The indexes of one context and their upkeep; see the module docstring.

    *index* is a lexical index opened by the caller (kept open by :meth:`close`);
    by default the index beside the context's store is opened at first use.
    *embedder* (a config, built at first use and closed by :meth:`close`, or an
    embedder the caller owns) makes search hybrid.
    """

    def __init__(
        self,
        backend: Any,
        index: LexicalIndex | None = None,
        *,
        embedder: Embedder | EmbedderConfig | None = None,
    ) -> None:
        self._backend = backend
        self._index = index
        self._owns_index = index is None
        self._worker: IndexWorker | None = None
        self._spec = embedder
        self._embedder: Embedder | None = None
        self._vectors: VectorIndex | None = None
        self._vector_worker: VectorWorker | None = None
        self._outbox: SharedOutbox | None = None
        self._down: tuple[float, str] | None = None  # (when, why) the embedder last failed
        self._closed = False
        self._lock = threading.RLock()  # opening is the one step two threads may race

    # -- what it holds ---------------------------------------------------------------

    @property
    def hybrid(self) -> bool:
        """True if an embedder is configured (searches are hybrid)."""
        return self._spec is not None

    def _source(self) -> Any:
        """What the indexes read the outbox through: the store itself, or, when a vector
        index exists or is configured, a :class:`SharedOutbox` over both consumers."""
        if self._outbox is not None:
            return self._outbox
        path = getattr(self._backend, "path", None)
        has_vectors = isinstance(path, str) and os.path.isdir(os.path.join(path, VECTORS_DIR))
        if not self.hybrid and not has_vectors:
            return self._backend
        from storage.vectors import SharedOutbox

        outbox = SharedOutbox(self._backend)
        self._outbox, self._closed = outbox, False  # in use (again, after a close)
        outbox.consumers = [self._lexical_applied, self._vectors_applied]
        return outbox

    def _lexical_applied(self) -> int:
        index = self._index
        return 0 if index is None else index.applied()

    def _vectors_applied(self) -> int:
        # Opened here if need be (its position is durable); never again once closed.
        vectors = self._vectors
        if vectors is None and not self._closed:
            vectors = self.vectors
        return 0 if vectors is None else vectors.applied()

    @property
    def index(self) -> LexicalIndex:
        """The lexical index, opened on first use (a :class:`~protocol.errors.StoreError`
        when the context is not stored in a directory)."""
        with self._lock:
            if self._index is None:
                source = self._source()
                if source is self._backend:
                    self._index = LexicalIndex.for_backend(self._backend)
                else:
                    self._index = LexicalIndex.open(source.path, backend=source)
            return self._index

    @property
    def vectors(self) -> VectorIndex:
        """The vector index beside the store, opened on first use."""
        with self._lock:
            if self._vectors is None:
                path = getattr(self._backend, "path", None)
                if not isinstance(path, str):
                    raise StoreError("the vector index needs a context stored in a directory")
                from storage.vectors import VectorIndex

                self._vectors = VectorIndex.open(path, backend=self._source())
            return self._vectors

    @property
    def embedder(self) -> Embedder | None:
        """The embedder (built from its config at first use), or None without one."""
        with self._lock:
            if self._embedder is None and self._spec is not None:
                from adapters.embeddings import EmbedderConfig, make_embedder

                spec = self._spec
                self._embedder = make_embedder(spec) if isinstance(spec, EmbedderConfig) else spec
            return self._embedder

    # -- upkeep ----------------------------------------------------------------------

    def start_worker(self) -> IndexWorker:
        """Keep the indexes current from worker threads from now on (idempotent): the
        lexical index's and, with an embedder, the vector index's."""
        index = self.index
        with self._lock:
            if self._worker is None:
                self._worker = IndexWorker(index)
        if self.hybrid:
            try:
                embedder = self.embedder
            except MorphzError:
                embedder = None  # built again at the next search, which reports why
            with self._lock:
                if self._vector_worker is None and embedder is not None:
                    from storage.vectors import VectorWorker

                    self._vector_worker = VectorWorker(self.vectors, embedder)
        return self._worker

    def catch_up(self, timeout: float = SEARCH_CATCH_UP) -> bool:
        """Bring the indexes up to what was committed before this call.

        With workers, wait for them at most *timeout* seconds in all (False when
        they did not get there); without, apply every pending update here (the
        vectors too: embedding what is pending, unless the embedder fails, which
        the next search reports).
        """
        deadline = time.monotonic() + timeout
        worker = self._worker
        if worker is not None:
            done = worker.wait_for(None, timeout)
        else:
            self.index.catch_up(self._source())
            done = True
        if not self.hybrid:
            return done
        vworker = self._vector_worker
        if vworker is not None:
            return vworker.wait_for(None, max(0.0, deadline - time.monotonic())) and done
        if self._paused() is not None:
            return False
        try:
            embedder = self.embedder
            if embedder is not None:
                self.vectors.catch_up(embedder)
        except MorphzError as e:
            self._down = (time.monotonic(), f"{e.code}: {e.message}")
            return False
        return done

    def _paused(self) -> str | None:
        """Why the embedder is not called now (it failed less than
        :data:`EMBEDDER_PAUSE` seconds ago), or None."""
        down = self._down
        if down is None or time.monotonic() - down[0] >= EMBEDDER_PAUSE:
            return None
        return down[1]

    # -- searching -------------------------------------------------------------------

    def find(self, query: str, *, limit: int = 10, **filters: Any) -> SearchResult:
        """One search on the indexes as they stand: lexical, or hybrid with an embedder.

        *filters* are :meth:`LexicalIndex.search`'s (``since``, ``until``,
        ``kinds``, ``lifecycle``, ``id_prefix``, ``trust``, ``valid_at``); they
        apply to both rankings alike. A hybrid result's hits carry their
        ``signals`` and its ``semantic`` field the vector index's state.
        """
        if not self.hybrid:
            return self.index.search(query, limit=limit, **filters)
        depth = max(limit, FUSE_DEPTH)
        lexical = self.index.search(query, limit=depth, explain=True, **filters)
        semantic: list[Any] = []
        info = SemanticInfo(model="", indexed_version=0, lag=None)
        try:
            paused = self._paused()
            if paused is not None:
                raise _Paused(paused)
            embedder = self.embedder
            assert embedder is not None
            vectors = self.vectors
            approximate = False
            if query.strip():  # an empty query has nothing to embed: no semantic opinion
                vector = embedder.embed([query], kind="query")[0]
                vres = vectors.search(vector, limit=depth, model_id=embedder.model_id, **filters)
                semantic, approximate = list(vres.hits), vres.approximate
            state = vectors.state()
            current = state.model_id == embedder.model_id
            info = SemanticInfo(
                model=embedder.model_id,
                indexed_version=state.indexed_version if current else 0,
                lag=vectors.lag(),
                building=state.syncing or not current,
                approximate=approximate,
            )
        except _Paused as e:
            info = self._degraded(str(e))
            semantic = []
        except MorphzError as e:
            why = f"{e.code}: {e.message}"
            if e.code.startswith("embed_"):
                self._down = (time.monotonic(), why)
            info = self._degraded(why)
            semantic = []
        return _fused(lexical, semantic, limit, info, fuse_weights(query, info.model))

    def _degraded(self, why: str) -> SemanticInfo:
        model = getattr(self._embedder, "model_id", "") or _spec_model(self._spec)
        return SemanticInfo(model=model, indexed_version=0, lag=None, degraded=why)

    def model_find(self, args: Any) -> SearchResult:
        """A model's search (:func:`storage.search.tool.model_search_args`: arguments
        checked, governance applied) on the indexes as they stand, not recorded."""
        kw = model_search_args(args)
        return self.find(kw.pop("query"), **kw)

    def record(self, ctx: Context, result: SearchResult, session: str = "main") -> dict[str, Any]:
        """Record *result* as a ``recall_result`` observation in *session*; answer the
        reply :meth:`search` describes."""
        frames = [h.id for h in result.hits if h.type == "frame"]
        e = ctx.observe_retrieval(search_text(result), frames, session=session)
        reply: dict[str, Any] = {
            "ref": e.ref,
            "hits": len(result.hits),
            "recalled": frames,
            "lag": result.lag,
            "results": [h.to_dict() for h in result.hits],
        }
        if result.semantic is not None:
            reply["semantic_lag"] = result.semantic.lag
            if result.semantic.degraded is not None:
                reply["degraded"] = result.semantic.degraded
        return reply

    def search(self, ctx: Context, args: dict[str, Any], session: str = "main") -> dict[str, Any]:
        """Run a model's search on the indexes as they stand, recorded as a ``recall_result``.

        Answers ``{"ref", "hits", "recalled", "lag", "results"}``: the
        observation's reference, the number of hits, the ids of the frames found,
        how many committed updates the lexical index had not applied yet, and the
        hits themselves; a hybrid search
        adds ``semantic_lag`` (updates not embedded yet, None if unknown) and,
        when the semantic side did not answer, ``degraded`` (why).
        """
        return self.record(ctx, self.model_find(args), session)

    def reindex(self) -> dict[str, Any]:
        """Rebuild the lexical index and, with an embedder, the vectors (everything re-embedded).

        Answers the lexical rebuild's ``{"indexed_version", "documents", "seconds"}``
        and, with an embedder, ``vectors``: the vector rebuild's figures.
        """
        stats = self.index.rebuild()
        out = {k: stats[k] for k in ("indexed_version", "documents", "seconds")}
        embedder = self.embedder
        if embedder is not None:
            v = self.vectors.rebuild(embedder)
            out["vectors"] = {k: v[k] for k in ("model", "indexed_version", "documents", "seconds")}
        return out

    def close(self) -> None:
        """Stop the workers, close what this searcher opened. Idempotent."""
        with self._lock:
            self._closed = True
            worker, self._worker = self._worker, None
            vworker, self._vector_worker = self._vector_worker, None
            index = self._index if self._owns_index else None
            if self._owns_index:
                self._index = None
            vectors, self._vectors = self._vectors, None
            embedder = self._embedder if not _is_instance(self._spec) else None
            self._embedder = None
            self._outbox = None
        if worker is not None:
            worker.stop()
        if vworker is not None:
            vworker.stop()
        if index is not None:
            index.close()
        if vectors is not None:
            vectors.close()
        if embedder is not None:
            embedder.close()


class _Paused(Exception):
    """The embedder failed moments ago: not called again yet."""


def embedder_from_env(env: Any = None) -> EmbedderConfig | None:
    """The embedder the ``MORPHZ_EMBED_*`` variables of *env* (default: the process's)
    describe, or None when none is set (search stays lexical); how the servers and the
    CLI pick one up. A bad value raises ``RequestError`` (``embed_config``)."""
    from adapters.embeddings import EmbedderConfig

    return EmbedderConfig.from_env(env)


def _is_instance(spec: Any) -> bool:
    """True if *spec* is an embedder the caller owns (not a config built here)."""
    return spec is not None and hasattr(spec, "embed")


def _spec_model(spec: Any) -> str:
    model = getattr(spec, "model", None)
    return model if isinstance(model, str) else ""


def english_only(model_id: str) -> bool:
    """True if *model_id* names an embedding model trained on English only."""
    name = model_id.casefold()
    return any(
        name.endswith(part) if part == "-en" else part in name for part in ENGLISH_ONLY_MODELS
    )


def fuse_weights(query: str, model_id: str) -> dict[str, float]:
    """The fusion's weights for *query*: :data:`FUSE_WEIGHTS`, with the semantic side at
    :data:`FOREIGN_SEMANTIC_WEIGHT` for a query holding Chinese, Japanese or Korean when
    the model is English-only."""
    if english_only(model_id) and _CJK.search(query[:MAX_QUERY_SCAN]):
        return {**FUSE_WEIGHTS, "semantic": FOREIGN_SEMANTIC_WEIGHT}
    return dict(FUSE_WEIGHTS)


MAX_QUERY_SCAN = 4096
"""Characters of a query looked at for its script (a query is at most that long)."""


def _fused(
    lexical: SearchResult,
    semantic: list[Any],
    limit: int,
    info: SemanticInfo,
    weights: dict[str, float] | None = None,
) -> SearchResult:
    """The lexical and semantic hits fused by weighted reciprocal rank, the best *limit*."""
    from storage.vectors import fuse

    by_id: dict[str, Any] = {h.id: h for h in semantic}
    by_id.update({h.id: h for h in lexical.hits})  # a lexical hit has the highlighted snippet
    ranked = fuse(
        [
            ("lexical", [(h.id, h.score) for h in lexical.hits]),
            ("semantic", [(h.id, h.score) for h in semantic]),
        ],
        FUSE_K,
        FUSE_WEIGHTS if weights is None else weights,
    )
    own = {h.id: h.signals for h in lexical.hits if h.signals}
    hits = []
    for ident, score, found in ranked[:limit]:
        h = by_id[ident]
        signals = found
        if ident in own:
            # The lexical ranking's own account: the turn's match and its neighbours' share.
            signals = tuple(
                t
                for s in found
                for t in (
                    [Signal(x.name, s.rank, x.score) for x in own[ident]]
                    if s.name == "lexical"
                    else [s]
                )
            )
        hits.append(
            Hit(
                id=h.id,
                type=h.type,
                kind=h.kind,
                lifecycle=h.lifecycle,
                score=score,
                snippet=h.snippet,
                time=h.time,
                trust=h.trust,
                signals=signals,
            )
        )
    return SearchResult(
        query=lexical.query,
        terms=lexical.terms,
        hits=tuple(hits),
        version=lexical.version,
        indexed_version=lexical.indexed_version,
        lag=lexical.lag,
        approximate=lexical.approximate,
        semantic=info,
    )


__all__ = [
    "EMBEDDER_PAUSE",
    "FUSE_DEPTH",
    "FUSE_K",
    "FUSE_WEIGHTS",
    "SEARCH_CATCH_UP",
    "Searcher",
    "VECTORS_DIR",
    "embedder_from_env",
]


# -- the operations (declared in service.operations) ---------------------------------


def find_for_model(ctx: Context, args: Any) -> SearchResult:
    """The part of a model's search that reads without the writer: the indexes brought up
    to what was committed before the call (waiting at most :data:`SEARCH_CATCH_UP`
    seconds for the index workers where a port runs them), then searched."""
    searcher = ctx.searcher
    searcher.catch_up(SEARCH_CATCH_UP)
    return searcher.model_find(args.args)


def search(
    ctx: Context,
    args: dict[str, Any],
    session: Session = "main",
    *,
    prepared: SearchResult | None = None,
) -> SearchReply:
    """A model's search, recorded as a ``recall_result`` observation in *session*.

    *args* are the ``search`` tool's (:func:`storage.search.tool.model_search_args`:
    without ``trust`` only candidate and accepted frames; the action ledger only when
    ``kinds`` names it). Answers the observation's ref, the number of hits, the frame
    ids found, the hits and the index ``lag`` (hybrid, with an embedder: also
    ``semantic_lag`` and, if the embedder failed, ``degraded``). A context not
    stored in a directory has no index (StoreError).
    """
    assert prepared is not None  # the registry runs find_for_model first
    return SearchReply.of(ctx.searcher.record(ctx, prepared, session))
