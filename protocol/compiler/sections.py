"""The text of an input's sections: sessions, the runtime lines, and what feeds them (R35–R37).

Pure functions of a :class:`Snapshot` (the records one compile reads) and a
configuration. The runtime section is kept as ``key: value`` lines so a delta
can repeat only the keys whose value changed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from protocol.compiler.config import (
    NONE,
    RUNTIME_CHANGES_HEADER,
    RUNTIME_HEADER,
    CompilerConfig,
)
from protocol.state import CANDIDATE, HIDDEN_TRUST, RETIRING, Event, Frame, Meta
from protocol.turns import MEMORY_TOOLS, Capacity

BatchInfo = tuple[tuple[str, ...], int, int]
"""A maintenance batch as the sections show it: its refs, the session's active count, left out."""


@dataclass(slots=True)
class Session:
    """One session's observations as an input shows them."""

    name: str
    active: list[Event] = field(default_factory=list)
    retired: int = 0
    waiting: int = 0
    pending: list[Event] = field(default_factory=list)
    last_tick: int | None = None


@dataclass(slots=True)
class Snapshot:
    """What one compile read: counters, sessions, visible frames and relations."""

    meta: Meta
    sessions: dict[str, Session]
    frames: list[Frame]
    """Visible frames (active and retiring), by (created_version, id)."""
    retired_frames: int
    relations: list[tuple[str, str, str]]
    """Edges with at least one visible endpoint, sorted."""


def retrieved(shown: Iterable[Event]) -> tuple[str, ...]:
    """Frames named by the recall results among *shown*, each once, in order (R42 traces)."""
    out: dict[str, None] = {}
    for e in shown:
        if e.kind == "recall_result":
            for fid in e.extra.get("recalled") or ():
                out.setdefault(str(fid), None)
    return tuple(out)


def shown_to(f: Frame, session: str) -> bool:
    """Governance (R42, R43): rejected and quarantined frames are in no input; a
    candidate only in the input of the session its content came from."""
    trust = f.trust
    if trust in HIDDEN_TRUST:
        return False
    return trust != CANDIDATE or f.envelope.get("session") == session


def indent(text: str) -> str:
    """Continuation lines indented, so only entry headers start at column 0."""
    return text.replace("\n", "\n  ") if "\n" in text else text


def section(header: str, lines: Iterable[str]) -> str:
    """A ``## header`` and its lines, ``(none)`` when there are none."""
    body = "\n".join(lines)
    return header + "\n" + (body or "(none)")


def working(s: Session, tick: int, ticks: int) -> bool:
    """True if *s* is in the working set: a pending request, or active within *ticks*."""
    return bool(s.pending) or (s.last_tick is not None and s.last_tick >= tick - ticks)


def order_others(snap: Snapshot, session: str, ticks: int) -> list[Session]:
    """The other sessions, working set first, then the most recently active, then by name."""
    tick = snap.meta.tick
    others = [s for name, s in snap.sessions.items() if name != session]
    others.sort(
        key=lambda s: (
            0 if working(s, tick, ticks) else 1,
            -(s.last_tick if s.last_tick is not None else -1),
            s.name,
        )
    )
    return others


def current_request(cur: Session) -> Event | None:
    """The newest undelivered, claimed user message of the session."""
    claimed = [e for e in cur.pending if e.claimed_tick is not None]
    return claimed[-1] if claimed else None


def _counts(s: Session) -> str:
    out = f"{len(s.active)} active observation{'' if len(s.active) == 1 else 's'}"
    if s.retired:
        out += f", {s.retired} retired"
    if s.waiting:
        out += f", {s.waiting} waiting"
    if s.pending:
        out += "; pending requests " + " ".join(e.ref for e in s.pending)
    return out


def session_line(s: Session, mode: str) -> str:
    """The line of another session under ``## sessions``: ``full``, ``metadata`` or swapped."""
    if mode == "swapped":
        return f"- {s.name} (swapped out)"
    if mode == "full":
        return f"- {s.name} (shown in full): {_counts(s)}"
    last = f"; last active at tick {s.last_tick}" if s.last_tick is not None else ""
    return f"- {s.name} (metadata only; observations not shown): {_counts(s)}{last}"


def sessions_text(
    cur: Session,
    others: list[Session],
    modes: dict[str, str],
    batch: BatchInfo | None,
) -> str:
    """The ``## sessions`` section: the current session, then the others in their modes."""
    if batch is None:
        line = f"- {cur.name} (current; its active observations are shown above)"
    else:
        line = (
            f"- {cur.name} (current; this maintenance batch shows its pending requests and "
            f"{len(batch[0])} of its {batch[1]} active observations)"
        )
    lines = [line]
    lines.extend(session_line(s, modes[s.name]) for s in others)
    return section("## sessions", lines)


def runtime_lines(
    meta: Meta,
    cfg: CompilerConfig,
    cap: Capacity,
    total: int,
    request: Event | None,
    cur: Session,
    snap: Snapshot,
    batch: BatchInfo | None,
) -> dict[str, str]:
    """The runtime section as ``key: value`` lines; deltas repeat only changed keys."""
    lines = {
        "version": str(meta.version),
        "tick": str(meta.tick),
        "retirement window": f"{meta.window} ticks",
    }
    if batch is None:
        # Coarse on purpose: the exact count is in the Capacity record; a figure that
        # moves on every call would cost every delta a line (R37).
        lines["capacity"] = f"pressure {cap.pressure:.0%} (about {_thousands(total)} tokens)"
    else:
        lines["capacity"] = (
            f"the full input needs {cap.tokens} tokens, pressure {cap.pressure:.1%}; "
            f"this maintenance input holds {total}"
        )
    if cap.maintenance:
        lines["mode"] = (
            f"maintenance ({cap.reason}); new external tool actions are deferred; "
            f"{', '.join(MEMORY_TOOLS)} stay available"
        )
    else:
        lines["mode"] = "normal"
    if batch is not None:
        refs, _, left_out = batch
        lines["maintenance batch"] = (
            f"{' '.join(refs) or '(none fits)'}; {left_out} other active "
            f"observations of this session are left out of this input, their state untouched"
        )
    if request is not None:
        lines["current request"] = request.ref
    if cur.pending:
        lines["pending requests"] = (
            " ".join(e.ref for e in cur.pending) + " (causally protected until answered)"
        )
    retiring = [f for f in snap.frames if f.lifecycle == RETIRING]
    if retiring:
        lines["retiring frames"] = ", ".join(
            f"{f.id} ({max(0, (f.due_tick or 0) - meta.tick)} ticks left, due at tick {f.due_tick})"
            for f in retiring
        )
    hidden = sum(s.retired for s in snap.sessions.values())
    if snap.retired_frames or hidden:
        lines["not shown"] = (
            f"{snap.retired_frames} retired frames, {hidden} retired observations "
            "(recall, search and read_event still reach them)"
        )
    return lines


def _thousands(n: int) -> str:
    return f"{max(1, round(n / 1000))}k"


def render_runtime(lines: dict[str, str]) -> str:
    """The ``## runtime`` section of a full input."""
    return RUNTIME_HEADER + "\n" + "\n".join(f"{k}: {v}" for k, v in lines.items())


def render_runtime_changes(lines: dict[str, str], before: dict[str, str]) -> str:
    """``## runtime changes``: the keys whose value changed since *before* ("" if none)."""
    out = [f"{k}: {v}" for k, v in lines.items() if before.get(k) != v]
    out.extend(f"{k}: {NONE}" for k in before if k not in lines)
    return RUNTIME_CHANGES_HEADER + "\n" + "\n".join(out) if out else ""
