"""What passes between the runtime and a model: the compiled input and the model's turn.

These are the seams of the agent loop (R35–R38): a compiler turns durable
records into a :class:`CompiledInput`; a :class:`Model` (scripted or an
OpenAI-compatible endpoint) answers with a :class:`ModelTurn` holding at most
one action and any number of context transactions, which run on separate
paths (R10).
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from protocol.errors import MorphzError


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


MEMORY_TOOLS = ("context_tx", "recall", "search", "read_event")
"""Tools that work on memory; they stay available in maintenance mode (R32)."""


class ToolCall(_Model):
    """A tool the model asks the runtime to run.

    ``irreversible`` actions carry an ``idempotency_key`` recorded before they run.
    """

    name: str = Field(min_length=1, max_length=128)
    arguments: dict[str, Any] = Field(default_factory=dict)
    call_id: str | None = None
    irreversible: bool = False
    idempotency_key: str | None = None

    @property
    def is_memory_tool(self) -> bool:
        """True for ``context_tx``, ``recall``, ``search`` and ``read_event``."""
        return self.name in MEMORY_TOOLS


class Reply(_Model):
    """A reply to the user; delivering it lifts the causal protection of ``request_ref``."""

    text: str
    request_ref: str | None = None


class ModelTurn(_Model):
    """One model response: at most one action, any number of transactions and memory calls."""

    action: ToolCall | Reply | None = None
    transactions: tuple[str, ...] = ()
    memory_calls: tuple[ToolCall, ...] = ()
    finish: Literal["continue", "done", "overflow"] = "continue"


class Capacity(_Model):
    """Input capacity: estimated tokens of the full request against the budget (R31)."""

    tokens: int
    budget: int
    pressure: float
    maintenance: bool
    reason: str | None = None


class CompiledInput(_Model):
    """The model input compiled from durable records for one call (R35–R37).

    ``messages`` is the chat form (OpenAI-compatible: system/user/assistant/tool
    roles); ``prefix_tokens`` counts the stable prefix (protocol text and
    append-only observations) for prompt-cache accounting. ``frames_present``
    lists the frame ids whose bodies are in the input: the trace of R39.
    """

    messages: tuple[dict[str, Any], ...]
    tokens: int
    prefix_tokens: int
    capacity: Capacity
    version: int
    tick: int
    session: str
    frames_present: tuple[str, ...]
    events_present: tuple[str, ...]
    retrieved: tuple[str, ...] = ()
    """Frames named by the recall results in the input (R42 usage traces)."""
    maintenance_batch: tuple[str, ...] = ()
    encoding: Literal["full", "delta"] = "full"


class Model(Protocol):
    """Anything that answers a compiled input with a turn."""

    def respond(self, compiled: CompiledInput, tools: tuple[dict[str, Any], ...]) -> ModelTurn:
        """Answer one model call. Raise :class:`InputOverflow` if the input is too long."""


class InputOverflow(MorphzError):
    """The model API reported that the input does not fit (maps to maintenance mode, R32)."""

    code = "input_overflow"
