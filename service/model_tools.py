"""The tools a model calls, declared once: what the MCP server serves, made from this table.

A :class:`ModelTool` is one tool as the model sees it: its name, the description
the model reads, whether it writes, and a function ``fn(port, **arguments)`` whose
annotated parameters are the tool's input schema (with the bounds a model's call
gets) and whose body calls registered operations (:mod:`service.operations`) on
whatever port it is given: an embedded :class:`~service.context.Context` or a
context actor's :class:`~actors.client.handle.ContextHandle`, so every step keeps
that port's guard, idempotency and group commit. Some tools are one operation in
the model's words (``frame`` takes ``id``); some compose a few (``observe`` claims
what waits, ``recall`` and ``search`` answer the text they recorded, ``state`` is
paged, ``commit`` adds a hint to a rejection).

:func:`model_tools` answers these and one tool for every operation declared with
``mcp=Tool(...)`` (its arguments are its argument model's). The MCP server
(:mod:`servers.mcp_server`) adds every one as it is; ``docs/mcp.md`` describes them.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import Field

from protocol.replies import plain
from service.operations import operations
from service.registry import Operation

__all__ = [
    "COMMIT_DESCRIPTION",
    "MAX_ID_CHARS",
    "MAX_TEXT_CHARS",
    "READ_CHUNK",
    "STATE_PAGE",
    "ModelTool",
    "model_tools",
]

MAX_TEXT_CHARS = 1 << 20
"""The longest text argument a tool accepts (an observation, a transaction), in characters."""

MAX_ID_CHARS = 4096
"""The longest frame id, event reference, query or cursor a tool accepts."""

STATE_PAGE = 200
"""The most frames (and events) one ``state`` call lists."""

READ_CHUNK = 64 << 10
"""Characters a ``read_event`` call returns when no length is given."""


@dataclass(frozen=True)
class ModelTool:
    """One tool a model calls: *fn(port, **arguments)*, its *name*, the *description* the
    model reads, and whether it *writes* (a read-only tool is annotated so)."""

    fn: Callable[..., Any]
    name: str
    description: str
    writes: bool

    @cached_property
    def parameters(self) -> tuple[inspect.Parameter, ...]:
        """The tool's arguments: *fn*'s parameters after the port, keyword-only, with their
        annotated types (the input schema the model reads)."""
        hints = typing.get_type_hints(self.fn, include_extras=True)
        params = list(inspect.signature(self.fn).parameters.values())[1:]
        return tuple(
            p.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=hints[p.name]) for p in params
        )

    def call(self, port: Any, arguments: dict[str, Any]) -> Any:
        """The tool's answer on *port* to *arguments*, as plain JSON data."""
        return plain(self.fn(port, **arguments))


# -- argument types (their JSON schemas are what the model reads) ----------------------

Text = Annotated[str, Field(max_length=MAX_TEXT_CHARS)]
Ident = Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS)]
Session = Annotated[
    str,
    Field(
        min_length=1,
        max_length=128,
        description="The session (conversation or agent thread) the record belongs to.",
    ),
]
Kind = Literal["user_message", "tool_result", "external", "recall_result"]


# -- the tools ------------------------------------------------------------------------


def observe(
    port: Any,
    text: Annotated[Text, Field(description="The observation's text, verbatim.")],
    kind: Annotated[Kind, Field(description="What the input is.")] = "tool_result",
    session: Session = "main",
    claim: Annotated[
        bool, Field(description="Claim the waiting inputs now (advances the tick).")
    ] = True,
) -> dict[str, Any]:
    doc = dict(plain(port.observe(kind, text, session=session)))
    if claim:
        doc["claim"] = plain(port.claim())
    return doc


COMMIT_DESCRIPTION = """\
Change memory with one context transaction: S-expression text that commits whole \
or not at all. Shape:
(context-tx (base-version N) (reason "why")
  (derive ID (from SOURCE...) BODY)   ; new frame from events @eN / frames
  (revise ID BODY)                    ; new revision of a frame (the whole body)
  (set|append|remove ID (FIELD VALUE...)) (incr ID (FIELD N)) (unset ID FIELD) ; one field
  (relate SUBJECT LABEL OBJECT) (unrelate SUBJECT LABEL OBJECT)
  (retire ID-or-@eN) (restore ID) (protect ID) (unprotect ID))
N is the version you read (from `state` or a receipt). Bodies are S-expressions \
such as (tests passed) or (region "cn-shanghai"). The reply is the receipt: status \
"committed" (new version, what was retired) or "rejected" — then nothing was \
written, and `errors` (code, message, op) and `conflicts` (ids changed by others \
and the versions that changed them) say what to do: re-read and resubmit on the \
current version. Transactions on frames nobody else touched are rebased \
automatically. On a frame others write too, edit fields instead of revising: an \
append never conflicts, a set only with a change to the same field (named in \
`conflicts`). The full language and lifecycle are in the `protocol` prompt. \
client_id makes a retry safe: the same id returns the original receipt."""


def commit(
    port: Any,
    tx: Annotated[Text, Field(min_length=1, description="The whole (context-tx …) text.")],
    client_id: Annotated[
        str | None,
        Field(
            min_length=1,
            max_length=128,
            description="Idempotency key: resubmitting with it returns the first receipt.",
        ),
    ] = None,
) -> dict[str, Any]:
    """The receipt as the model reads it, with a hint on what to do after a rejection."""
    doc = dict(port.submit(tx, client_id).to_dict())
    if doc.get("status") == "rejected":
        codes = sorted({str(e.get("code")) for e in doc.get("errors") or ()})
        doc["hint"] = (
            "nothing was written. "
            + (
                "Other writers changed the ids in 'conflicts' since your base-version: read"
                " them again (frame, state), then resubmit on the current version."
                if doc.get("conflicts")
                else "Fix the operation named in 'errors' and resubmit."
            )
            + (f" Codes: {', '.join(codes)}." if codes else "")
        )
    return doc


def frame(port: Any, id: Annotated[Ident, Field(description="The frame id.")]) -> Any:
    return port.frame(id)


def recall(
    port: Any,
    frame_id: Annotated[Ident, Field(description="The frame to start from.")],
    depth: Annotated[int, Field(ge=0, le=4, description="How many hops.")] = 1,
    direction: Literal["ancestors", "descendants", "both"] = "both",
    include_bodies: bool = True,
    include_events: bool = False,
    max_nodes: Annotated[int, Field(ge=1, le=128)] = 32,
    cursor: Annotated[
        str | None, Field(max_length=MAX_ID_CHARS, description="next_cursor of a page.")
    ] = None,
    session: Session = "main",
) -> dict[str, Any]:
    request = {
        "frame_id": frame_id,
        "depth": depth,
        "direction": direction,
        "include_bodies": include_bodies,
        "include_events": include_events,
        "max_nodes": max_nodes,
    }
    reply = plain(port.recall_observation(request, cursor=cursor, session=session))
    page = plain(port.read_event(reply["ref"], 0, MAX_TEXT_CHARS))
    return {**reply, "text": page["text"]}


def search(
    port: Any,
    query: Annotated[Ident, Field(description="Words to look for.")],
    limit: Annotated[int, Field(ge=1, le=100)] = 10,
    kinds: Annotated[
        list[Annotated[str, Field(max_length=64)]] | None,
        Field(max_length=8, description="Only these kinds: frame, tool_result, …"),
    ] = None,
    id_prefix: Annotated[str | None, Field(max_length=MAX_ID_CHARS)] = None,
    include_recalls: Annotated[
        bool,
        Field(description="Also search the recorded results of earlier searches/recalls."),
    ] = False,
    session: Session = "main",
) -> dict[str, Any]:
    args: dict[str, Any] = {"query": query, "limit": limit}
    if include_recalls:
        args["include_recalls"] = True
    if kinds is not None:
        args["kinds"] = kinds
    if id_prefix is not None:
        args["id_prefix"] = id_prefix
    reply = plain(port.search(args, session))
    page = plain(port.read_event(reply["ref"], 0, MAX_TEXT_CHARS))
    return {**reply, "text": page["text"]}


def read_event(
    port: Any,
    ref: Annotated[Ident, Field(description="An event reference such as @e42.")],
    offset: Annotated[int, Field(ge=0)] = 0,
    length: Annotated[int, Field(ge=0, le=MAX_TEXT_CHARS)] = READ_CHUNK,
) -> Any:
    return port.read_event(ref, offset, length)


def history(port: Any, id: Annotated[Ident, Field(description="The frame id.")]) -> dict[str, Any]:
    return {"id": id, "writes": plain(port.history(id))}


def state(
    port: Any,
    offset: Annotated[int, Field(ge=0, description="Skip this many frames/events.")] = 0,
    limit: Annotated[int, Field(ge=1, le=STATE_PAGE)] = 50,
) -> dict[str, Any]:
    s = plain(port.state())
    frames, events = s["frames"], s["events"]
    end = offset + limit
    return {
        "context": s["context"],
        "version": s["version"],
        "tick": s["tick"],
        "window": s["window"],
        "frames": frames[offset:end],
        "events": events[offset:end],
        "counts": {
            "frames": len(frames),
            "events": len(events),
            "relations": len(s["relations"]),
            "waiting": len(s["waiting"]),
        },
        "next_offset": end if end < max(len(frames), len(events)) else None,
    }


TOOLS = (
    ModelTool(
        observe,
        "observe",
        "Record an observation (a user message, tool result or external input) in memory;"
        " it is kept verbatim and gets a reference @eN that transactions cite in (from …)."
        " With claim (default true) the waiting inputs are claimed at once as one batch"
        " (one tick), so a transaction may cite it right away.",
        writes=True,
    ),
    ModelTool(commit, "commit", COMMIT_DESCRIPTION, writes=True),
    ModelTool(
        frame,
        "frame",
        "Read one frame by id: its body, revision, lifecycle, sources and relations.",
        writes=False,
    ),
    ModelTool(
        recall,
        "recall",
        "Walk the memory graph from a frame (sources, relations, the events behind"
        " them; retired ones too). The page is recorded as a recall_result observation"
        " and returned as text; pass next_cursor back as cursor for the next page.",
        writes=True,
    ),
    ModelTool(
        search,
        "search",
        "Search frames and events (retired content too) by keywords, and by meaning"
        " when the server has an embedder (MORPHZ_EMBED_*). The result is recorded as a"
        " recall_result observation and returned as text: each hit's id, kind,"
        " lifecycle, the signals that found it (hybrid) and snippet.",
        writes=True,
    ),
    ModelTool(
        read_event,
        "read_event",
        "Read a chunk of an observation's original text by reference (@eN), retired"
        f" ones too. Returns text, size and more (default length {READ_CHUNK}).",
        writes=False,
    ),
    ModelTool(
        history,
        "history",
        "Every committed write of a frame, oldest first: op, revision, body, version.",
        writes=False,
    ),
    ModelTool(
        state,
        "state",
        "A summary of the context: version (use it as base-version), tick, window, and"
        f" one page of frames and events (at most {STATE_PAGE} each; pass offset for"
        " the next page) with relation and waiting-input counts.",
        writes=False,
    ),
)
"""The model-facing tools that are not one operation as it is declared."""


def _operation_tool(op: Operation[Any, Any]) -> ModelTool:
    """The tool of an operation declared with ``mcp=Tool(...)``: its arguments, its reply."""
    assert op.mcp is not None

    def fn(port: Any, **arguments: Any) -> Any:
        return getattr(port, op.name)(**arguments)

    tool = ModelTool(fn, op.mcp.name or op.name, op.mcp.description or op.doc, writes=op.writes)
    tool.__dict__["parameters"] = op.parameters  # the argument model's, not fn's
    return tool


def model_tools() -> list[ModelTool]:
    """Every tool a model may call: :data:`TOOLS`, then one per operation exposed on MCP."""
    return [*TOOLS, *(_operation_tool(op) for op in operations() if op.mcp is not None)]
