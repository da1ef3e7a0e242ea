"""The compiler: one context's records in, one model input out (R35, R36).

:class:`Compiler` follows one context across calls (:class:`Mirror`), renders
through a caching :class:`Renderer`, chooses how other sessions are shown,
and hands over to :func:`~protocol.compiler.capacity.maintenance_input` when
the request does not fit and to :func:`~protocol.compiler.delta.delta_input`
when ContextDelta is on.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from protocol.compiler.capacity import (
    capacity_for,
    choose_modes,
    maintenance_input,
    settle,
)
from protocol.compiler.config import (
    HIDDEN_KINDS,
    MESSAGE_OVERHEAD,
    OBSERVATIONS_HEADER,
    CompilerConfig,
)
from protocol.compiler.delta import delta_input
from protocol.compiler.mirror import Mirror
from protocol.compiler.render import Renderer
from protocol.compiler.sections import (
    Session,
    Snapshot,
    current_request,
    order_others,
    render_runtime,
    retrieved,
    runtime_lines,
    section,
    sessions_text,
    shown_to,
)
from protocol.state import ACTIVE, RETIRED, Frame, Meta
from protocol.tokens import Tokenizer, as_tokenizer
from protocol.turns import Capacity, CompiledInput
from protocol.view import ReadView


class Compiler:
    """Compiles model inputs for one context, caching what it read and rendered across calls.

    It follows the context incrementally (see :class:`Mirror`): a compile
    reads the new observations, the ones a claim or a delivery may have
    changed, and what the log says changed since the last compile, not every
    record. What it rendered is cached (see :class:`Renderer`); the cache keeps
    what recent inputs used. Meant for one context; another one (another
    ``meta.created``) clears the caches. Not thread-safe.

    The system message is *protocol_text* (the model-facing text the caller
    serves; :attr:`CompilerConfig.protocol_text` replaces it when set) followed
    by the model's limits. The compiler holds no protocol text of its own: the
    service passes :data:`service.protocol_text.PROTOCOL_TEXT`.
    """

    def __init__(
        self,
        config: CompilerConfig | None = None,
        tokenizer: Tokenizer | Callable[[str], int] | Any | None = None,
        *,
        protocol_text: str = "",
    ) -> None:
        self.config = config or CompilerConfig()
        self.tokenizer = as_tokenizer(tokenizer)
        text = self.config.protocol_text
        self._render = Renderer(
            self.config, self.tokenizer, protocol_text if text is None else text
        )
        self._mirror = Mirror()

    @property
    def system_text(self) -> str:
        """The system message every input of this compiler starts with."""
        return self._render.protocol.text

    def compile(
        self,
        view: ReadView,
        *,
        session: str,
        previous: CompiledInput | None = None,
        overflow: bool = False,
    ) -> CompiledInput:
        """The model input for *session* from *view*; see :mod:`protocol.compiler`.

        *previous* is the input compiled for the call before (for hysteresis and
        ContextDelta); *overflow* says the model API refused that input as too
        long. Raises :class:`~protocol.errors.RequestError`
        (``maintenance_cannot_fit``) when not even the smallest maintenance
        input fits the budget.
        """
        meta = view.meta()
        self._render.begin(meta.created)
        snap = self._snapshot(view, meta, session)
        try:
            return self._compile(view, snap, session, previous, overflow)
        finally:
            self._render.prune()

    def _snapshot(self, view: ReadView, meta: Meta, session: str) -> Snapshot:
        mirror = self._mirror
        mirror.refresh(view, meta)
        sessions: dict[str, Session] = {}
        for e in mirror.events.values():
            if e.kind in HIDDEN_KINDS:
                continue
            s = sessions.get(e.session)
            if s is None:
                s = sessions[e.session] = Session(e.session)
            if e.causally_protected:
                s.pending.append(e)
            if e.claimed_tick is None:
                s.waiting += 1
                continue
            if s.last_tick is None or e.claimed_tick > s.last_tick:
                s.last_tick = e.claimed_tick
            if e.lifecycle == ACTIVE:
                s.active.append(e)
            else:
                s.retired += 1
        frames: list[Frame] = []
        retired = 0
        hidden: set[str] = set()
        for f in mirror.frames.values():
            if f.lifecycle == RETIRED:
                retired += 1
            elif not shown_to(f, session):
                hidden.add(f.id)
            else:
                frames.append(f)
        frames.sort(key=lambda f: (f.created_version, f.id))
        visible = {f.id for f in frames}
        relations = sorted(
            x
            for x in mirror.relations
            if (x[0] in visible or x[2] in visible) and x[0] not in hidden and x[2] not in hidden
        )
        return Snapshot(meta, sessions, frames, retired, relations)

    def _compile(
        self,
        view: ReadView,
        snap: Snapshot,
        session: str,
        previous: CompiledInput | None,
        overflow: bool,
    ) -> CompiledInput:
        r = self._render
        cfg = self.config
        meta = snap.meta
        cur = snap.sessions.get(session) or Session(session)
        if previous is not None and previous.session != session:
            previous = None  # hysteresis and deltas follow one session's calls
        frames = [r.frame(view, f) for f in snap.frames]
        frames_text = section("## frames", [p.text for p in frames])
        frames_tokens = r.count("## frames") + sum(p.tokens for p in frames)
        rel_piece = r.piece(section("## relations", [" ".join(x) for x in snap.relations]))
        own = [r.observation(view, e) for e in cur.active]
        others = order_others(snap, session, cfg.working_set_ticks)

        # Other sessions (R36): in full while the input stays at or below resume_at
        # (they never push it into maintenance or hold it there), as metadata while
        # it stays below maintenance_at, else swapped out.
        fixed = (
            3 * MESSAGE_OVERHEAD
            + r.protocol.tokens
            + r.obs_header.tokens
            + sum(p.tokens for p in own)
            + frames_tokens
            + rel_piece.tokens
        )
        # Below the maintenance threshold: total + reserve < maintenance_at * budget.
        soft = math.ceil(cfg.maintenance_at * cfg.budget_tokens - cfg.reserve_tokens) - 1
        calm = math.floor(cfg.resume_at * cfg.budget_tokens - cfg.reserve_tokens)
        swapped = {s.name: "swapped" for s in others}
        probe = Capacity(tokens=soft, budget=cfg.budget_tokens, pressure=1.0, maintenance=False)
        probe_lines = runtime_lines(meta, cfg, probe, soft, None, cur, snap, None)
        used = (
            fixed
            + r.count(sessions_text(cur, others, swapped, None))
            + r.count(render_runtime(probe_lines))
        )
        modes = choose_modes(r, view, others, meta.tick, used, soft, full_limit=calm)
        shown = sorted(
            [*cur.active, *(e for s in others if modes[s.name] == "full" for e in s.active)],
            key=lambda e: e.seq,
        )
        pieces = [r.observation(view, e) for e in shown]
        obs_text = OBSERVATIONS_HEADER + "".join("\n" + p.text for p in pieces)
        obs_tokens = r.obs_header.tokens + sum(p.tokens for p in pieces)
        sessions_piece = r.piece(sessions_text(cur, others, modes, None))
        state_fixed = frames_tokens + rel_piece.tokens + sessions_piece.tokens
        head = frames_text + "\n\n" + rel_piece.text + "\n\n" + sessions_piece.text + "\n\n"
        base_tokens = 3 * MESSAGE_OVERHEAD + r.protocol.tokens + obs_tokens + state_fixed
        request = current_request(cur)

        def runtime(total: int) -> tuple[str, Capacity]:
            cap = capacity_for(cfg, total, previous, overflow)
            lines = runtime_lines(meta, cfg, cap, total, request, cur, snap, None)
            return render_runtime(lines), cap

        runtime_text, total, cap = settle(self.tokenizer, base_tokens, runtime)
        if overflow or total + cfg.reserve_tokens > cfg.budget_tokens:
            return maintenance_input(r, view, snap, cur, others, request, total, previous, overflow)

        state_text = head + runtime_text
        messages = (
            {"role": "system", "content": r.protocol.text},
            {"role": "user", "content": obs_text},
            {"role": "user", "content": state_text},
        )
        full = CompiledInput(
            messages=messages,
            tokens=total,
            prefix_tokens=2 * MESSAGE_OVERHEAD + r.protocol.tokens + obs_tokens,
            capacity=cap,
            version=meta.version,
            tick=meta.tick,
            session=session,
            frames_present=tuple(f.id for f in snap.frames),
            events_present=tuple(e.ref for e in shown),
            retrieved=retrieved(shown),
        )
        if cfg.context_delta and previous is not None:
            # What a full render sends beyond the prefix it shares with the previous
            # request: the state block, plus the observations after the first one that
            # left the input since the previous request's observations block.
            msgs = previous.messages
            before = str(msgs[1].get("content", "")) if len(msgs) > 1 else ""
            kept = 0
            if before.startswith(OBSERVATIONS_HEADER):
                kept = r.obs_header.tokens
                pos = len(OBSERVATIONS_HEADER)
                for p in pieces:  # entry by entry, without copying the texts
                    if not (before.startswith("\n", pos) and before.startswith(p.text, pos + 1)):
                        break
                    kept += p.tokens
                    pos += 1 + len(p.text)
            uncached = total - 2 * MESSAGE_OVERHEAD - r.protocol.tokens - kept
            delta = delta_input(
                r, view, snap, cur, others, modes, shown, request, previous, overflow, uncached
            )
            if delta is not None and not (delta.capacity.maintenance and not cap.maintenance):
                return delta
        return full


def compile_input(
    view: ReadView,
    *,
    session: str,
    config: CompilerConfig | None = None,
    tokenizer: Tokenizer | Callable[[str], int] | Any | None = None,
    previous: CompiledInput | None = None,
    overflow: bool = False,
    protocol_text: str = "",
) -> CompiledInput:
    """Compile one model input for *session* from *view* with no cache kept across calls.

    Equivalent to ``Compiler(config, tokenizer, protocol_text=...).compile(view, ...)``;
    an agent loop that compiles often keeps one :class:`Compiler` per context instead.
    """
    return Compiler(config, tokenizer, protocol_text=protocol_text).compile(
        view, session=session, previous=previous, overflow=overflow
    )
