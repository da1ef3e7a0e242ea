"""Capacity rules (R31–R33): pressure and maintenance mode, other sessions' modes, batches.

The tokens of the whole request plus the answer reserve, against the budget,
give the pressure; at ``maintenance_at`` or on a reported overflow the input
is in maintenance mode, left only when the pressure falls to ``resume_at``
(hysteresis). A request that does not fit becomes a *maintenance batch*
(:func:`maintenance_input`): the current request and its causal
dependencies, then older unprotected observations by a deterministic rule;
when not even that fits, :class:`~protocol.errors.RequestError` with code
``maintenance_cannot_fit``.
"""

from __future__ import annotations

from collections.abc import Callable

from protocol.compiler.config import BATCH_HEADER, MESSAGE_OVERHEAD, CompilerConfig
from protocol.compiler.render import Renderer
from protocol.compiler.sections import (
    BatchInfo,
    Session,
    Snapshot,
    render_runtime,
    retrieved,
    runtime_lines,
    section,
    session_line,
    sessions_text,
    working,
)
from protocol.errors import RequestError
from protocol.state import Event
from protocol.tokens import Tokenizer
from protocol.turns import Capacity, CompiledInput
from protocol.view import ReadView


def capacity_for(
    cfg: CompilerConfig, total: int, previous: CompiledInput | None, overflow: bool
) -> Capacity:
    """The pressure of a *total*-token input and whether it is in maintenance mode, and why.

    Maintenance on a reported *overflow*, when the input and the reserve do not
    fit, or at ``maintenance_at``; after a maintenance input (*previous*) it
    lasts until the pressure falls to ``resume_at``.
    """
    budget = cfg.budget_tokens
    pressure = (total + cfg.reserve_tokens) / budget
    shown = f"pressure {pressure:.1%}"
    reason: str | None = None
    if overflow:
        maintenance = True
        reason = "the model API reported an input overflow"
    elif total + cfg.reserve_tokens > budget:
        maintenance = True
        reason = (
            f"the full request ({total} tokens + {cfg.reserve_tokens} reserved) "
            f"does not fit the budget of {budget}"
        )
    elif pressure >= cfg.maintenance_at:
        maintenance = True
        reason = f"{shown} is at or above {cfg.maintenance_at:.0%}"
    elif previous is not None and previous.capacity.maintenance:
        maintenance = pressure > cfg.resume_at
        if maintenance:
            reason = f"{shown} has not yet fallen to {cfg.resume_at:.0%} (hysteresis)"
        else:
            reason = f"{shown} fell to {cfg.resume_at:.0%} or below: work resumes"
    else:
        maintenance = False
    return Capacity(
        tokens=total, budget=budget, pressure=pressure, maintenance=maintenance, reason=reason
    )


def settle(
    tokenizer: Tokenizer, fixed: int, render: Callable[[int], tuple[str, Capacity]]
) -> tuple[str, int, Capacity]:
    """Render the runtime section, whose own size is part of the total it reports.

    The total only grows between rounds, so this settles in a few steps; the
    figure reported is never below the true count.
    """
    text, cap = render(fixed)
    total = fixed + tokenizer.count(text)
    for _ in range(8):
        text, cap = render(total)
        actual = fixed + tokenizer.count(text)
        if actual <= total:
            break
        total = actual
    return text, total, cap


def choose_modes(
    r: Renderer,
    view: ReadView,
    others: list[Session],
    tick: int,
    used: int,
    limit: int,
    *,
    full_limit: int | None,
) -> dict[str, str]:
    """Greedy in working-set order: full if it fits, else metadata if it fits, else swapped.

    *used* is the size of the input with every other session swapped out. A
    working-set session is shown in full while the total stays at or below
    *full_limit* (None: never), as metadata while it stays at or below *limit*.
    """
    modes = {s.name: "swapped" for s in others}
    for s in others:
        swapped = r.count(session_line(s, "swapped"))
        if full_limit is not None and working(s, tick, r.config.working_set_ticks):
            line = r.count(session_line(s, "full")) - swapped
            cost = line + sum(r.observation(view, e).tokens for e in s.active)
            if used + cost <= min(limit, full_limit):
                modes[s.name] = "full"
                used += cost
                continue
        cost = r.count(session_line(s, "metadata")) - swapped
        if used + cost <= limit:
            modes[s.name] = "metadata"
            used += cost
    return modes


def maintenance_input(
    r: Renderer,
    view: ReadView,
    snap: Snapshot,
    cur: Session,
    others: list[Session],
    request: Event | None,
    full_tokens: int,
    previous: CompiledInput | None,
    overflow: bool,
) -> CompiledInput:
    """The maintenance batch for a request of *full_tokens* that does not fit (R33).

    Raises :class:`RequestError` ``maintenance_cannot_fit`` when not even the
    protocol text, the current request and its dependencies and the state fit.
    """
    cfg = r.config
    meta = snap.meta
    limit = cfg.budget_tokens - cfg.reserve_tokens
    refused: int | None = None
    if overflow:
        # The API refused a request our count thought smaller: aim well below it
        # (resume_at of its size), and never at or above it.
        refused = previous.tokens if previous is not None else full_tokens
    cap = capacity_for(cfg, full_tokens, previous, overflow)
    # The current request and its causal dependencies: this session's pending requests.
    required = [e for e in cur.active if e.causally_protected]
    required_ids = {e.id for e in required}
    candidates = sorted(
        (e for e in cur.active if e.id not in required_ids),
        key=lambda e: (e.claimed_tick or 0, -r.observation(view, e).tokens, e.seq),
    )
    frames = [r.frame(view, f) for f in snap.frames]
    frames_text = section("## frames", [p.text for p in frames])
    frames_tokens = r.count("## frames") + sum(p.tokens for p in frames)
    rel_piece = r.piece(section("## relations", [" ".join(x) for x in snap.relations]))
    swapped = {s.name: "swapped" for s in others}

    def build(batch: list[Event], modes: dict[str, str]) -> tuple[CompiledInput, int]:
        shown = sorted([*required, *batch], key=lambda e: e.seq)
        pieces = [r.observation(view, e) for e in shown]
        obs_text = BATCH_HEADER + "".join("\n" + p.text for p in pieces)
        obs_tokens = r.batch_header.tokens + sum(p.tokens for p in pieces)
        left_out = len(cur.active) - len(shown)
        batch_info: BatchInfo = (tuple(e.ref for e in batch), len(cur.active), left_out)
        sessions = r.piece(sessions_text(cur, others, modes, batch_info))
        base = (
            3 * MESSAGE_OVERHEAD
            + r.protocol.tokens
            + obs_tokens
            + frames_tokens
            + rel_piece.tokens
            + sessions.tokens
        )

        def runtime(total: int) -> tuple[str, Capacity]:
            lines = runtime_lines(meta, cfg, cap, total, request, cur, snap, batch_info)
            return render_runtime(lines), cap

        runtime_text, total, _ = settle(r.tokenizer, base, runtime)
        state = (
            frames_text + "\n\n" + rel_piece.text + "\n\n" + sessions.text + "\n\n"
        ) + runtime_text
        compiled = CompiledInput(
            messages=(
                {"role": "system", "content": r.protocol.text},
                {"role": "user", "content": obs_text},
                {"role": "user", "content": state},
            ),
            tokens=total,
            prefix_tokens=MESSAGE_OVERHEAD + r.protocol.tokens,
            capacity=cap,
            version=meta.version,
            tick=meta.tick,
            session=cur.name,
            frames_present=tuple(f.id for f in snap.frames),
            events_present=tuple(e.ref for e in shown),
            retrieved=retrieved(shown),
            maintenance_batch=tuple(e.ref for e in batch),
        )
        return compiled, total

    smallest, smallest_tokens = build([], swapped)
    if refused is not None:
        aim = max(int(cfg.resume_at * refused), smallest_tokens)
        limit = min(limit, aim if smallest_tokens < refused else refused - 1)
    if smallest_tokens > limit:
        raise RequestError(
            f"not even the smallest maintenance input fits: protocol text, the current "
            f"request and its dependencies ({len(required)} observations) and the state "
            f"({len(snap.frames)} frames, {len(snap.relations)} relations) take "
            f"{smallest_tokens} tokens, but only {limit} of the budget of "
            f"{cfg.budget_tokens} are available ({cfg.reserve_tokens} reserved for the "
            f"answer"
            + (f"; the model API refused a {refused}-token input" if refused else "")
            + f"); the full request needs {full_tokens}",
            code="maintenance_cannot_fit",
        )
    # Greedy by the rule (oldest tick, then largest, then seq), skipping what does not fit.
    room = limit - smallest_tokens
    batch: list[Event] = []
    for e in candidates:
        if len(batch) >= cfg.maintenance_batch_max:
            break
        cost = r.observation(view, e).tokens + r.count(f" {e.ref}")
        if cost <= room:
            batch.append(e)
            room -= cost
    modes = choose_modes(r, view, others, meta.tick, limit - room, limit, full_limit=None)
    compiled, total = build(batch, modes)
    while total > limit and any(m != "swapped" for m in modes.values()):
        modes = swapped
        compiled, total = build(batch, modes)
    while total > limit and batch:
        batch.pop()
        compiled, total = build(batch, modes)
    return compiled if total <= limit else smallest
