"""Morphz: structured, transactional memory for long-running AI agents.

``import morphz`` gives the embedded API::

    ctx = morphz.open_context("./.morphz", "default")
    e = ctx.observe("tool_result", "regression tests: 412 passed")
    ctx.claim()
    receipt = ctx.commit(f"(context-tx (base-version {ctx.version}) "
                         f"(derive test-result (from {e.ref}) (tests passed)))")

``open_context(..., embedder=adapters.embeddings.EmbedderConfig(...))`` makes
search hybrid: words and meaning, fused (docs/search.md). Ray is never
imported here; the actor layer lives in :mod:`actors`.
"""

from protocol.engine import ClaimResult
from protocol.errors import (
    MorphzError,
    NotFound,
    OutOfRange,
    ParseError,
    RequestError,
    StoreError,
    StoreLocked,
    WireError,
)
from protocol.forms import Symbol
from protocol.receipts import Receipt
from protocol.tx import (
    ContextTx,
    Derive,
    Protect,
    Relate,
    Restore,
    Retire,
    Revise,
    Unprotect,
    Unrelate,
)
from protocol.txlang import parse_tx, print_tx
from service.context import Context
from service.store import Store, open_context

__all__ = [
    "ClaimResult",
    "Context",
    "ContextTx",
    "Derive",
    "MorphzError",
    "NotFound",
    "OutOfRange",
    "ParseError",
    "Protect",
    "Receipt",
    "Relate",
    "RequestError",
    "Restore",
    "Retire",
    "Revise",
    "Store",
    "StoreError",
    "StoreLocked",
    "Symbol",
    "Unprotect",
    "Unrelate",
    "WireError",
    "open_context",
    "parse_tx",
    "print_tx",
]
