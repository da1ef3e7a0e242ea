"""How inputs are compiled for one model: :class:`CompilerConfig`, the layout's fixed strings."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from protocol.state import LEDGER

MESSAGE_OVERHEAD = 4
"""Tokens counted per chat message for its role and framing (OpenAI's documented rule of thumb)."""

OBSERVATIONS_HEADER = "## observations (active, oldest first)"
BATCH_HEADER = (
    "## observations: maintenance batch (the current request and its dependencies, then "
    "older observations to process; the others are left out of this input and keep their state)"
)
DELTA_HEADER = "## context-delta"
"""First line of every delta message (R37)."""
RUNTIME_HEADER = "## runtime"
RUNTIME_CHANGES_HEADER = "## runtime changes"
NONE = "none"
"""The value of a runtime key that a delta removes."""

LONG_KINDS = frozenset({"tool_result", "external"})
"""Observation kinds shown as a preview plus a reference when long (R36). User
messages and recall results are never cut: the request is the work, and a recall
is something the model asked to read."""
HIDDEN_KINDS = frozenset({LEDGER})
"""Event kinds never shown to a model: the action ledger (R43) is for the runtime."""

MAX_MIRROR_GAP = 256
"""A compiler reads the log of at most this many versions to catch up; beyond, everything."""
MAX_DELTA_SPAN = 4096
"""A delta is only computed across at most this many versions; beyond, re-render."""


class CompilerConfig(BaseModel):
    """How inputs are compiled for one model (frozen). Budgets are in tokens."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    budget_tokens: int = Field(default=128_000, gt=0)
    """The model's input limit."""
    maintenance_at: float = Field(default=0.85, gt=0.0, le=1.0)
    """Pressure at or above this enters maintenance mode (R32)."""
    resume_at: float = Field(default=0.70, gt=0.0, le=1.0)
    """Maintenance is left only when the pressure falls to this or below (hysteresis)."""
    reserve_tokens: int = Field(default=4_000, ge=0)
    """Tokens kept free for the model's answer; counted into the pressure."""
    preview_chars: int = Field(default=600, ge=1)
    """Characters of a long tool result shown as its preview."""
    long_result_tokens: int = Field(default=400, ge=1)
    """A tool result or external event above this many tokens is shown as a preview."""
    context_delta: bool = False
    """R37 ContextDelta: append structured deltas between consecutive calls (experimental)."""
    delta_rebase_every: int = Field(default=8, ge=1)
    """With ContextDelta, render in full at least every this many calls (bounds drift)."""
    working_set_ticks: int = Field(default=8, ge=0)
    """Another session is in the working set if it has a pending request or was active
    within this many ticks; only working-set sessions are shown in full (R36)."""
    maintenance_batch_max: int = Field(default=32, ge=1)
    """At most this many older observations in one maintenance batch (R33)."""
    protocol_text: str | None = None
    """The protocol text for this model, replacing the one the compiler was given
    (the service gives :data:`service.protocol_text.PROTOCOL_TEXT`)."""

    @model_validator(mode="after")
    def _check(self) -> CompilerConfig:
        if self.resume_at > self.maintenance_at:
            raise ValueError(
                f"resume_at ({self.resume_at}) must not exceed maintenance_at "
                f"({self.maintenance_at})"
            )
        if self.reserve_tokens >= self.budget_tokens:
            raise ValueError(
                f"reserve_tokens ({self.reserve_tokens}) must be below budget_tokens "
                f"({self.budget_tokens})"
            )
        return self


def limits_text(cfg: CompilerConfig) -> str:
    """The limits of the model a config describes; ends the system message (stable per config)."""
    return (
        f"# Limits\nInput budget {cfg.budget_tokens} tokens, {cfg.reserve_tokens} of them "
        f"reserved for your answer; maintenance at {cfg.maintenance_at:.0%} pressure, work "
        f"resumes at {cfg.resume_at:.0%}.\n"
    )
