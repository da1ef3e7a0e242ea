"""The model's ``search`` tool: its arguments checked, governance applied, its answer as text."""

from __future__ import annotations

from typing import Any

from protocol.errors import OutOfRange, RequestError
from protocol.recall import MODEL_TRUST, trust_filter
from protocol.state import HIDDEN_TRUST, LEDGER
from storage.search.format import KINDS
from storage.search.index import LexicalIndex
from storage.search.results import SearchResult

MODEL_SEARCH_ARGS = frozenset(
    {
        "query",
        "limit",
        "since",
        "until",
        "kinds",
        "lifecycle",
        "id_prefix",
        "trust",
        "valid_at",
        "include_recalls",
    }
)
"""Arguments of the model's ``search`` tool (``agents.tools.MEMORY_TOOL_SPECS``)."""
MODEL_SEARCH_LIMIT = 50
"""Most hits one model-facing search returns (the model pages with narrower queries)."""
RECALLS = "recall_result"
"""The kind of the observations that record searches and recalls themselves."""
MODEL_KINDS = tuple(k for k in KINDS if k not in (LEDGER, RECALLS))
"""What a model's search covers by default: everything but the action ledger (R43) and the
recorded searches and recalls (each would match the same query again next time)."""


def model_search_args(args: Any) -> dict[str, Any]:
    """A model's ``search`` tool arguments checked, governance applied, as search keywords.

    Like recall for a model (:func:`protocol.recall.for_model`): without a
    ``trust`` argument only candidate and accepted frames come back, and naming
    rejected or quarantined is refused (``not_permitted``); the action ledger
    is searched only when ``kinds`` names it, and the ``recall_result``
    observations that record earlier searches and recalls only when ``kinds``
    names them or ``include_recalls`` is true. An unknown argument or a value of
    the wrong type is a :class:`RequestError`; *limit* is 1 to
    :data:`MODEL_SEARCH_LIMIT` (default 10). The answer holds ``query`` and
    the keyword arguments of :meth:`LexicalIndex.search` (the filters are
    checked there, and by the vector index in the same way).
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
    include_recalls = args.get("include_recalls", False)
    if not isinstance(include_recalls, bool):
        raise RequestError("include_recalls is true or false", code="bad_argument")
    default_kinds = (*MODEL_KINDS, RECALLS) if include_recalls else MODEL_KINDS
    return {
        "query": query,
        "limit": limit,
        "since": args.get("since"),
        "until": args.get("until"),
        "kinds": args.get("kinds", default_kinds),
        "lifecycle": args.get("lifecycle"),
        "id_prefix": id_prefix,
        "trust": trust,
        "valid_at": args.get("valid_at"),
    }


def model_search(index: LexicalIndex, args: Any) -> SearchResult:
    """One lexical search for a model's ``search`` tool call (:func:`model_search_args`)."""
    kw = model_search_args(args)
    return index.search(kw.pop("query"), **kw)


def search_text(result: SearchResult) -> str:
    """A search result as the model reads it in a ``recall_result`` observation.

    A hybrid search also says, per hit, which signals found it
    (``[lexical+semantic]``) and, in the head, how far the vectors lag or
    why the semantic side did not answer.
    """
    lag = f", {result.lag} updates not yet indexed" if result.lag else ""
    head = (
        f"search {result.query!r}: {len(result.hits)} hits"
        f" (index at version {result.indexed_version}{lag})"
    )
    sem = result.semantic
    if sem is not None:
        if sem.degraded is not None:
            head += f"; semantic search unavailable ({sem.degraded}), keyword hits only"
        elif sem.lag:
            head += f"; {sem.lag} updates not yet embedded"
    lines = [head]
    for h in result.hits:
        trust = f" [{h.trust}]" if h.trust is not None and h.trust != "accepted" else ""
        label = "frame" if h.type == "frame" else h.kind
        found = f" [{'+'.join(s.name for s in h.signals)}]" if sem is not None else ""
        lines.append(f"- {h.id} {label} {h.lifecycle}{trust}{found}: {h.snippet}")
    return "\n".join(lines)
