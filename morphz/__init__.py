"""Morphz: structured, transactional memory for long-running AI agents.

``import morphz`` gives the embedded API::

    ctx = morphz.open_context("./.morphz", "default")
    e = ctx.observe("tool_result", "regression tests: 412 passed")
    ctx.claim()
    receipt = ctx.commit(f"(context-tx (base-version {ctx.version()}) "
                         f"(derive test-result (from {e.ref}) (tests passed)))")

and the Ray one under the same names: :func:`connect` (start or reach the
actor serving one context), :func:`lookup` (find a running one) and
:func:`place` (on the node a cluster's context directory chooses), each
answering a :class:`ContextHandle`; their errors (:class:`TransportError`,
:class:`PermissionDenied` …) and the typed replies both forms answer
(:class:`ClaimReply`, :class:`FrameReply` …) are here too.

``import morphz`` does not import Ray, nor the actor layer, the embedding clients,
the compiler, the model clients or the recall walk: those names load on first use (module
``__getattr__``). ``open_context(..., embedder=morphz.EmbedderConfig(...))``
makes search hybrid: words and meaning, fused (docs/search.md).
"""

from typing import TYPE_CHECKING, Any

from protocol.capabilities import PermissionDenied
from protocol.errors import (
    MorphzError,
    NotFound,
    OutOfRange,
    ParseError,
    RequestError,
    StoreError,
    StoreFull,
    StoreLocked,
    TransportError,
    WireError,
)
from protocol.forms import Symbol
from protocol.receipts import Receipt
from protocol.replies import (
    ClaimReply,
    DeliverReply,
    EventPage,
    EventReply,
    FrameReply,
    HistoryEntry,
    MetaReply,
    ObserveReply,
    RecallReply,
    Reply,
    SearchReply,
    SnapshotReply,
    StateReply,
    UpdateReadReply,
)
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

if TYPE_CHECKING:
    from actors import ContextHandle, RetryPolicy, connect, directory, lookup, place
    from adapters.embeddings import EmbedderConfig
    from agents import ModelConfig, OpenAIChatModel, ScriptedModel, first_match
    from agents.scripted import build_tx
    from protocol.compiler import Compiler, CompilerConfig, compile_input
    from protocol.recall import RecallRequest, as_recall_observation, read_recall, recall
    from protocol.turns import ModelTurn
    from service.protocol_text import PROTOCOL_TEXT

__all__ = [
    "ClaimReply",
    "Compiler",
    "CompilerConfig",
    "Context",
    "ContextHandle",
    "ContextTx",
    "DeliverReply",
    "Derive",
    "EmbedderConfig",
    "EventPage",
    "EventReply",
    "FrameReply",
    "HistoryEntry",
    "MetaReply",
    "ModelConfig",
    "ModelTurn",
    "MorphzError",
    "NotFound",
    "ObserveReply",
    "OpenAIChatModel",
    "OutOfRange",
    "PROTOCOL_TEXT",
    "ParseError",
    "PermissionDenied",
    "Protect",
    "RecallReply",
    "RecallRequest",
    "Receipt",
    "Relate",
    "Reply",
    "RequestError",
    "Restore",
    "Retire",
    "RetryPolicy",
    "Revise",
    "ScriptedModel",
    "SearchReply",
    "SnapshotReply",
    "StateReply",
    "Store",
    "StoreError",
    "StoreFull",
    "StoreLocked",
    "Symbol",
    "TransportError",
    "Unprotect",
    "Unrelate",
    "UpdateReadReply",
    "WireError",
    "as_recall_observation",
    "build_tx",
    "compile_input",
    "connect",
    "directory",
    "first_match",
    "lookup",
    "open_context",
    "parse_tx",
    "place",
    "print_tx",
    "read_recall",
    "recall",
]


def __getattr__(name: str) -> Any:
    """Load a name of the actor layer, the compiler, the model clients or the recall
    walk on first use (``import morphz`` imports none of them, nor Ray)."""
    value: Any
    if name in ("ContextHandle", "RetryPolicy", "connect", "directory", "lookup", "place"):
        import actors

        value = getattr(actors, name)
    elif name in ("ModelConfig", "OpenAIChatModel", "ScriptedModel", "first_match"):
        import agents

        value = getattr(agents, name)
    elif name == "build_tx":
        from agents.scripted import build_tx as value
    elif name in ("Compiler", "CompilerConfig", "compile_input"):
        from protocol import compiler

        value = getattr(compiler, name)
    elif name in ("RecallRequest", "as_recall_observation", "read_recall", "recall"):
        from protocol.recall import RecallRequest, as_recall_observation, read_recall, recall

        value = {
            "RecallRequest": RecallRequest,
            "as_recall_observation": as_recall_observation,
            "read_recall": read_recall,
            "recall": recall,
        }[name]
    elif name == "EmbedderConfig":
        from adapters.embeddings import EmbedderConfig as value
    elif name == "ModelTurn":
        from protocol.turns import ModelTurn as value
    elif name == "PROTOCOL_TEXT":
        from service.protocol_text import PROTOCOL_TEXT as value
    else:
        raise AttributeError(f"module 'morphz' has no attribute {name!r}")
    globals()[name] = value
    return value
