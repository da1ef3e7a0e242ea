"""Lexical search over a context: the index fed by the outbox, its text analysis and ranking.

Modules by concern: :mod:`~storage.search.text` (analysis), :mod:`~storage.search.format`
(format version, key layout, codecs), :mod:`~storage.search.postings`,
:mod:`~storage.search.documents` (records to documents, rebuild),
:mod:`~storage.search.ranking` (BM25, filters), :mod:`~storage.search.highlighting`
(snippets), :mod:`~storage.search.index` (:class:`LexicalIndex`),
:mod:`~storage.search.worker` (:class:`IndexWorker`) and :mod:`~storage.search.tool`
(the model's search tool).
"""

from storage.derived import IntentSource
from storage.search.documents import frame_text
from storage.search.format import FRAME_BASE, INDEX_DIR, INDEX_FORMAT, KINDS, LIFECYCLES, IndexState
from storage.search.index import LexicalIndex
from storage.search.results import Hit, SearchResult
from storage.search.tool import (
    MODEL_KINDS,
    MODEL_SEARCH_ARGS,
    MODEL_SEARCH_LIMIT,
    model_search,
    search_text,
)
from storage.search.worker import IndexWorker

__all__ = [
    "FRAME_BASE",
    "Hit",
    "INDEX_DIR",
    "INDEX_FORMAT",
    "IndexState",
    "IndexWorker",
    "IntentSource",
    "KINDS",
    "LIFECYCLES",
    "LexicalIndex",
    "MODEL_KINDS",
    "MODEL_SEARCH_ARGS",
    "MODEL_SEARCH_LIMIT",
    "SearchResult",
    "frame_text",
    "model_search",
    "search_text",
]
