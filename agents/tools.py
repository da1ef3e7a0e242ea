"""The memory tools (R28–R32): how a model reads and changes its memory, in one place.

A model works on its memory through four function tools, ``context_tx``,
``recall``, ``search`` and ``read_event``; unlike external tools they stay
offered in maintenance mode (R32). Their names are
:data:`protocol.turns.MEMORY_TOOLS`, which stays in the pure layer because the
compiler names the tools in every input and :attr:`~protocol.turns.ToolCall.is_memory_tool`
checks them. Everything else about the tools is here:

* :data:`MEMORY_TOOL_SPECS` — their descriptions and JSON-schema parameters, in
  OpenAI's function-tool form, offered with every model call;
* :func:`external_tool_specs` — the external tools offered beside them, each
  checked not to take a memory tool's name;
* :func:`transaction_text`, :func:`recall_arguments`, :func:`read_event_arguments`
  — what a call's arguments mean (a search's arguments are checked where the
  search runs, :func:`storage.search.tool.model_search`);
* :func:`answer_memory_call` — how a ``recall``, ``search`` or ``read_event``
  call is answered: always as a ``recall_result`` observation in the caller's
  session, the same path as any tool result (R30). A failed call is answered
  the same way, with the error's code and message, so the model reads it.

Nothing here imports Ray or performs I/O of its own: the answers go through the
port the loop was given.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from protocol.errors import MorphzError, RequestError
from protocol.turns import MEMORY_TOOLS, ToolCall

if TYPE_CHECKING:  # the port is only named: this module stays importable without the service
    from agents.port import ContextPort

RESULT_KIND = "recall_result"
"""The observation kind every memory-call answer is recorded as."""


def _function_tool(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


MEMORY_TOOL_SPECS: tuple[dict[str, Any], ...] = (
    _function_tool(
        "context_tx",
        "Commit one context transaction to memory: S-expression text "
        '(context-tx (base-version N) (reason "...") OPERATION...). Operations: '
        "derive, revise, relate, unrelate, retire, restore, protect, unprotect.",
        {
            "type": "object",
            "properties": {
                "tx": {"type": "string", "description": "the (context-tx ...) text"},
            },
            "required": ["tx"],
            "additionalProperties": False,
        },
    ),
    _function_tool(
        "recall",
        "Walk the cognitive graph from a frame: its sources, relations and the "
        "events behind them. Retired frames and events are reachable.",
        {
            "type": "object",
            "properties": {
                "request": {
                    "type": "object",
                    "properties": {
                        "frame_id": {"type": "string"},
                        "depth": {"type": "integer", "minimum": 0, "maximum": 4},
                        "direction": {
                            "type": "string",
                            "enum": ["ancestors", "descendants", "both"],
                        },
                        "include_bodies": {"type": "boolean"},
                        "include_events": {"type": "boolean"},
                        "max_nodes": {"type": "integer", "minimum": 1, "maximum": 128},
                        "valid_at": {
                            "type": "string",
                            "description": "ISO date: only frames valid then",
                        },
                        "trust": {
                            "type": "array",
                            "items": {"type": "string", "enum": ["candidate", "accepted"]},
                            "description": "only frames of these trust statuses (default both)",
                        },
                    },
                    "required": ["frame_id"],
                },
                "cursor": {"type": "string", "description": "next_cursor of the previous page"},
            },
            "required": ["request"],
        },
    ),
    _function_tool(
        "search",
        "Search frames and events by keywords (and by meaning, when the context has an"
        " embedder), retired content included.",
        {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer", "minimum": 1},
                "since": {"type": "number", "description": "seconds since the epoch"},
                "until": {"type": "number", "description": "seconds since the epoch"},
                "kinds": {"type": "array", "items": {"type": "string"}},
                "lifecycle": {"type": "array", "items": {"type": "string"}},
                "id_prefix": {"type": "string"},
                "valid_at": {"type": "string", "description": "ISO date: only frames valid then"},
                "trust": {
                    "type": "array",
                    "items": {"type": "string", "enum": ["candidate", "accepted"]},
                    "description": "only frames of these trust statuses (default both)",
                },
            },
            "required": ["query"],
        },
    ),
    _function_tool(
        "read_event",
        "Read a chunk of an observation's original text by reference (@eN), retired too.",
        {
            "type": "object",
            "properties": {
                "ref": {"type": "string", "description": "an event reference such as @e42"},
                "offset": {"type": "integer", "minimum": 0},
                "length": {"type": "integer", "minimum": 0},
            },
            "required": ["ref"],
        },
    ),
)
"""The function tools of :data:`protocol.turns.MEMORY_TOOLS`, in that order, in OpenAI's form."""


def external_tool_specs(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """External tools in OpenAI's ``{"type": "function", "function": {…}}`` form.

    Accepts that form or the bare ``{"name", "description", "parameters"}``.
    A tool named like a memory tool, without a name, or named twice raises
    :class:`RequestError` (code ``bad_tool``).
    """
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for tool in tools:
        fn = tool.get("function") if tool.get("type") == "function" else tool
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise RequestError("an external tool needs a name", code="bad_tool")
        name = fn["name"]
        if name in MEMORY_TOOLS or name in seen:
            raise RequestError(f"tool name {name!r} is taken", code="bad_tool")
        seen.add(name)
        spec: dict[str, Any] = {"name": name}
        if fn.get("description"):
            spec["description"] = fn["description"]
        spec["parameters"] = fn.get("parameters") or {"type": "object", "properties": {}}
        out.append({"type": "function", "function": spec})
    return out


# -- what a call's arguments mean ---------------------------------------------


def transaction_text(arguments: Mapping[str, Any], raw: Any = None) -> str:
    """The transaction text of a ``context_tx`` call: its ``tx`` argument.

    When ``tx`` is not a string and the call's *raw* arguments are given (the
    model's own text), that text is the transaction, so the runtime's parse
    error reaches the model as feedback instead of vanishing; without *raw*,
    the ``tx`` value as text (empty when missing).
    """
    tx = arguments.get("tx")
    if isinstance(tx, str):
        return tx
    if raw is not None:
        return raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)
    return str(arguments.get("tx", ""))


def recall_arguments(arguments: Mapping[str, Any]) -> tuple[dict[str, Any], Any]:
    """The recall request and the page cursor of a ``recall`` call.

    The tool's arguments are ``{"request": {...}, "cursor": ...}``; a bare
    request (the scripted models' shape) is accepted too. The request is
    checked where it is answered (:class:`protocol.recall.RecallRequest`).
    """
    request = arguments["request"] if isinstance(arguments.get("request"), dict) else arguments
    return dict(request), arguments.get("cursor")


def read_event_arguments(arguments: Mapping[str, Any]) -> tuple[str, int, Any]:
    """The ``(ref, offset, length)`` of a ``read_event`` call (offset 0, length open by default)."""
    return str(arguments.get("ref", "")), int(arguments.get("offset", 0)), arguments.get("length")


def read_event_text(doc: Mapping[str, Any]) -> str:
    """The observation text answering a ``read_event`` call: a header line, then the chunk."""
    return f"read_event {doc['ref']} [{doc['offset']}:+{doc['length']}]\n{doc['text']}"


# -- answering a call ----------------------------------------------------------


@dataclass(frozen=True)
class MemoryAnswer:
    """How one memory call was answered: the ``recall_result`` observation recorded.

    ``frames`` lists the frames a recall or search returned (for the usage
    trace, R42); it is None when the answer is a text — a ``read_event``
    chunk, an error, or a tool the port does not offer.
    """

    ref: str
    frames: tuple[str, ...] | None = None


def answer_memory_call(port: ContextPort, call: ToolCall, session: str) -> MemoryAnswer:
    """Answer a ``recall``, ``search`` or ``read_event`` *call* as a ``recall_result`` in *session*.

    A recall or search goes through the port's ``recall_observation`` or
    ``search``, which record the result themselves; a port without one answers
    that the tool is not available. Any :class:`MorphzError` of the call is
    answered as ``"NAME: CODE: MESSAGE"``. Other exceptions propagate. A
    ``context_tx`` call is not answered here: it is a transaction to submit.
    """
    args = call.arguments
    try:
        if call.name == "recall":
            recall = getattr(port, "recall_observation", None)
            if recall is not None:
                request, cursor = recall_arguments(args)
                return _recorded(recall(request, session, cursor))
            text = "recall: not available through this context"
        elif call.name == "read_event":
            text = read_event_text(port.read_event(*read_event_arguments(args)))
        else:
            search = getattr(port, "search", None)
            if search is not None:
                return _recorded(search(dict(args), session))
            text = "search: not available through this context"
    except MorphzError as e:
        text = f"{call.name}: {e.code}: {e.message}"
    obs = port.observe(RESULT_KIND, text, session=session)
    return MemoryAnswer(str(obs["ref"]))


def _recorded(obs: Mapping[str, Any]) -> MemoryAnswer:
    """The answer of a recall or search the port recorded: its ref and the frames it named."""
    return MemoryAnswer(str(obs["ref"]), tuple(str(f) for f in obs.get("recalled") or ()))


__all__ = [
    "MEMORY_TOOL_SPECS",
    "RESULT_KIND",
    "MemoryAnswer",
    "answer_memory_call",
    "external_tool_specs",
    "read_event_arguments",
    "read_event_text",
    "recall_arguments",
    "transaction_text",
]
