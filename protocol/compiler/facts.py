"""Reading compiled inputs back: what an input presents, in either encoding (R37).

:func:`input_facts` gives the frames, relations and observations an input
shows, the same for a full input and a delta-encoded one of the same state;
:func:`replay` gives the relations, sessions and runtime lines a chain of
state and delta messages leaves in effect (the delta encoder starts from it).
Both trust the layout the compiler writes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from protocol.compiler.config import (
    BATCH_HEADER,
    DELTA_HEADER,
    NONE,
    OBSERVATIONS_HEADER,
    RUNTIME_CHANGES_HEADER,
    RUNTIME_HEADER,
)


@dataclass(slots=True)
class InputFacts:
    """What an input tells the model about the state, read back from its messages.

    The same for both encodings of the same state (R37): ``frames`` maps each
    shown frame id to ``(revision, lifecycle)``; ``relations`` holds the shown
    edges; ``observations`` the shown observation references.
    """

    frames: dict[str, tuple[int, str]] = field(default_factory=dict)
    relations: set[tuple[str, str, str]] = field(default_factory=set)
    observations: set[str] = field(default_factory=set)


@dataclass(slots=True)
class Replayed:
    """The state sections in effect after a state message and its deltas."""

    relations: set[tuple[str, str, str]]
    sessions: str
    runtime: dict[str, str]


def _sections(text: str) -> dict[str, str]:
    """``## name`` / ``### name`` sections of a state or delta message, by header line."""
    out: dict[str, str] = {}
    current: str | None = None
    lines: list[str] = []
    for line in text.split("\n"):
        if line.startswith("## ") or line.startswith("### "):
            if current is not None:
                out[current] = "\n".join(lines).strip("\n")
            current = line
            lines = []
        elif current is not None:
            lines.append(line)
    if current is not None:
        out[current] = "\n".join(lines).strip("\n")
    return out


def _edges(body: str) -> set[tuple[str, str, str]]:
    out: set[tuple[str, str, str]] = set()
    for line in body.split("\n"):
        words = line.split(" ")
        if len(words) == 3:
            out.add((words[0], words[1], words[2]))
    return out


def _runtime_dict(body: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in body.split("\n"):
        key, sep, value = line.partition(": ")
        if sep:
            out[key] = value
    return out


def replay(state_messages: list[str]) -> Replayed | None:
    """Relations, sessions and runtime text in effect after a state message and its deltas.

    None when there is no message, or a later one is not a delta.
    """
    if not state_messages:
        return None
    relations: set[tuple[str, str, str]] = set()
    sessions = ""
    runtime: dict[str, str] = {}
    for i, text in enumerate(state_messages):
        if i > 0 and not text.startswith(DELTA_HEADER):
            return None
        for head, body in _sections(text).items():
            if head == "## relations":
                relations = _edges(body)
            elif head == "### relations added":
                relations |= _edges(body)
            elif head == "### relations removed":
                relations -= _edges(body)
            elif head == "## sessions":
                sessions = head + "\n" + body
            elif head == RUNTIME_HEADER:
                runtime = _runtime_dict(body)
            elif head == RUNTIME_CHANGES_HEADER:
                for key, value in _runtime_dict(body).items():
                    if value == NONE:
                        runtime.pop(key, None)
                    else:
                        runtime[key] = value
    return Replayed(relations, sessions, runtime)


def _frame_fact(line: str) -> tuple[str, int, str] | None:
    words = line.split(" ", 4)
    if len(words) < 4 or words[0] != "frame" or not words[2].startswith("r"):
        return None
    try:
        return words[1], int(words[2][1:]), words[3]
    except ValueError:
        return None


def input_facts(messages: Iterable[dict[str, Any]]) -> InputFacts:
    """Read back what an input presents: shown frames, relations and observations.

    Understands both encodings (a full state message, then any deltas), so a
    delta-encoded input and a full one compiled from the same state give equal
    facts. Used by tests and traces; it trusts the layout the compiler writes.
    """
    facts = InputFacts()
    for m in messages:
        text = str(m.get("content", ""))
        if m.get("role") == "system":
            continue
        if text.startswith(OBSERVATIONS_HEADER) or text.startswith(BATCH_HEADER[:28]):
            facts.observations = {
                line.split(" ", 1)[0] for line in text.split("\n")[1:] if line.startswith("@e")
            }
            continue
        for head, body in _sections(text).items():
            lines = body.split("\n")
            if head == "## frames":
                facts.frames = {}
                for line in lines:
                    fact = _frame_fact(line)
                    if fact is not None:
                        facts.frames[fact[0]] = fact[1:]
            elif head == "### frames changed":
                for line in lines:
                    fact = _frame_fact(line)
                    if fact is not None:
                        facts.frames[fact[0]] = fact[1:]
            elif head == "### frames out of view":
                for line in lines:
                    facts.frames.pop(line.split(" ", 1)[0], None)
            elif head == "## relations":
                facts.relations = _edges(body)
            elif head == "### relations added":
                facts.relations |= _edges(body)
            elif head == "### relations removed":
                facts.relations -= _edges(body)
            elif head == "### new observations":
                facts.observations |= {
                    line.split(" ", 1)[0] for line in lines if line.startswith("@e")
                }
            elif head == "### observations out of view":
                facts.observations -= set(body.split())
    return facts
