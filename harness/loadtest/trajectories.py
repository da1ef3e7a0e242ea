"""The STATE-Bench trajectories a load test replays: where they are and how they read.

The data is found by option or environment only: :func:`trajectories_dir`
takes the directory given (``--trajectories DIR``), else the
``MORPHZ_TRAJECTORIES`` environment variable, and otherwise raises
:class:`NoTrajectories` saying how to give it. No path is guessed from the
source tree.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from protocol.errors import NotFound, RequestError

TRAJECTORIES_ENV = "MORPHZ_TRAJECTORIES"
"""The environment variable naming the trajectory directory when no option does."""


class NoTrajectories(RequestError):
    """The ``trajectories`` workload was asked for and no trajectory directory was given."""

    code = "no_trajectories"


def trajectories_dir(given: str | os.PathLike[str] | None = None) -> Path:
    """The trajectory directory: *given*, else ``$MORPHZ_TRAJECTORIES``.

    :class:`NoTrajectories` when neither names one (the message says how to
    give it); whether the directory exists is :func:`load_conversations`'s check.
    """
    if given is not None and str(given):
        return Path(given)
    from_env = os.environ.get(TRAJECTORIES_ENV, "")
    if from_env:
        return Path(from_env)
    raise NoTrajectories(
        "the trajectories workload needs the STATE-Bench trajectory directory "
        "(<domain>/<n>-<name>.json files): pass --trajectories DIR "
        f"(trajectories_dir=...) or set {TRAJECTORIES_ENV}=DIR"
    )


class ToolCall(BaseModel):
    """One tool call of an assistant turn: its name and the text recorded as its result."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    text: str


class Turn(BaseModel):
    """One message of a conversation: a user request, or an assistant reply with tool calls."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Literal["user", "assistant"]
    text: str
    tools: tuple[ToolCall, ...] = ()


class Conversation(BaseModel):
    """One STATE-Bench trajectory: ``key`` is ``<domain>-<task number>``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str
    domain: str
    turns: tuple[Turn, ...]


def tool_call_text(call: dict[str, Any]) -> str:
    """The text a trajectory's tool call is observed (and searched) as: its name, arguments
    and result as one JSON object with sorted keys, non-ASCII kept."""
    return json.dumps(
        {"name": call["name"], "arguments": call.get("arguments"), "result": call.get("result")},
        ensure_ascii=False,
        sort_keys=True,
    )


def slug(text: str) -> str:
    """*text* as an id segment: word characters, ``.`` and ``-``, starting with a letter."""
    out = re.sub(r"[^\w.\-]+", "-", text).strip("-_.") or "x"
    return out if out[0].isalpha() else "x" + out


def load_conversations(
    directory: str | os.PathLike[str], limit: int | None = None
) -> list[Conversation]:
    """The trajectories under *directory* (``<domain>/<n>-<name>.json``), domains interleaved.

    Ordered by task number, then domain, so the first few span the domains.
    Each file is ``{"conversation": [{"role", "content", "tool_calls"?}, …]}``;
    system messages are skipped, a tool call's result is recorded as the JSON
    of ``{"name", "arguments", "result"}``. :class:`NotFound` if there is none.
    """
    root = Path(directory)
    if not root.is_dir():
        raise NotFound(f"no trajectory directory {root}")
    found = []
    for path in root.glob("*/*.json"):
        digits = re.match(r"\d+", path.stem)
        found.append((int(digits.group()) if digits else 0, path.parent.name, path))
    found.sort()
    if limit is not None:
        found = found[:limit]
    if not found:
        raise NotFound(f"no trajectories (<domain>/<task>.json) under {root}")
    out = []
    for number, domain, path in found:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            turns = []
            for msg in doc["conversation"]:
                if msg["role"] not in ("user", "assistant"):
                    continue
                tools = tuple(
                    ToolCall(name=str(call["name"]), text=tool_call_text(call))
                    for call in msg.get("tool_calls") or ()
                )
                turns.append(
                    Turn(role=msg["role"], text=str(msg.get("content") or ""), tools=tools)
                )
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise RequestError(f"unreadable trajectory {path}: {e}", code="bad_trajectory") from e
        out.append(
            Conversation(key=f"{slug(domain)}-{number}", domain=slug(domain), turns=tuple(turns))
        )
    return out
