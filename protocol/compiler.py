"""The context compiler: durable records in, one model input out (R31–R37).

:func:`compile_input` (or a long-lived :class:`Compiler`, which caches what it
rendered) reads one snapshot through a :class:`~protocol.view.ReadView` and
returns a :class:`~protocol.turns.CompiledInput`. It is pure: no I/O beyond
the view, no clock, no randomness; the same records (and the same
``previous``) always give byte-identical messages. It only selects and
renders records; it never summarizes (R34).

Layout, most stable first so prompt caches keep the longest prefix (R35)::

    system  the protocol text (fixed)
    user    ## observations — the active observations in sequence order,
            ``@eN kind [session] : text``; long tool results as a preview
            plus a reference (R36). Only grows at its end while nothing retires.
    user    ## frames, ## relations, ## sessions, ## runtime — the state,
            which changes more (the runtime section changes every call)

With ContextDelta on (R37, :attr:`CompilerConfig.context_delta`), a call that
follows one of the same session keeps the previous messages byte for byte and
appends one ``## context-delta`` message with what changed; every
:attr:`CompilerConfig.delta_rebase_every` calls, or when a delta would cost
more than re-rendering the state, the input is rendered in full again.

Capacity (R31–R33): the tokens of the whole request plus the answer reserve,
against the budget, give the pressure; at :attr:`CompilerConfig.maintenance_at`
or on a reported overflow the input is in maintenance mode, left only when the
pressure falls to :attr:`CompilerConfig.resume_at` (hysteresis). A request
that does not fit becomes a *maintenance batch*: the current request and its
causal dependencies, then older unprotected observations by a deterministic
rule; when not even that fits, :class:`~protocol.errors.RequestError` with
code ``maintenance_cannot_fit``. See ``docs/compiler.md``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from protocol.errors import RequestError
from protocol.state import (
    ACTIVE,
    CANDIDATE,
    HIDDEN_TRUST,
    LEDGER,
    RETIRED,
    RETIRING,
    Event,
    Frame,
    Meta,
)
from protocol.tokens import EstimateTokenizer, Tokenizer, as_tokenizer
from protocol.turns import MEMORY_TOOLS, Capacity, CompiledInput
from protocol.txlang import print_form
from protocol.view import ReadView

PROTOCOL_TEXT = """\
You work inside Morphz, a memory runtime. Every input is compiled from durable \
records; nothing is summarized for you. You decide what stays in your context.

# Layout of every input
1. This protocol (fixed).
2. Observations: the active input records, oldest first, one entry each:
   @eN kind [session] : text
   kind is user_message, tool_result, external or recall_result; continuation \
lines are indented by two spaces. A long tool result shows a preview followed by \
"(… N more chars; read_event @eN for the rest)".
3. State: ## frames, ## relations, ## sessions, ## runtime. A frame reads
   frame ID rREVISION LIFECYCLE [protected] [due-tick T reason "…"] (from SOURCE…)
     BODY
   and a relation "SUBJECT LABEL OBJECT". The state may arrive re-rendered in \
full or as later "## context-delta" messages listing only what changed since the \
input before; the newest text of a frame or section is the current one, and \
"## runtime changes" repeats only the runtime lines whose value changed ("none" \
removes one).

# Changing your context
Write a context transaction and pass it to the context_tx tool. It commits \
whole or not at all; its receipt gives the new version and the space released.

(context-tx
  (base-version 17)
  (reason "current production configuration confirms cn-shanghai")
  (derive deployment/target-v2 (from @e42 deployment/target-v1) (fact (region cn-shanghai)))
  (relate deployment/target-v2 supersedes deployment/target-v1)
  (retire deployment/target-v1)
  (retire @e42))

base-version is the version shown under ## runtime. Operations apply in order:
- (derive ID (from REF…) BODY…) creates a frame; every source must exist.
- (revise ID [(from REF…)] BODY…) replaces the whole body (restate what should \
stay) and cancels a pending retirement.
- (relate A LABEL B) and (unrelate A LABEL B) add and remove named edges between \
frames; A supersedes B lets B retire at once when A cites it.
- (retire REF…) takes observations out of your next input at once (their text \
stays readable with read_event) and starts the retirement window of frames.
- (restore REF), (protect ID), (unprotect ID).
- (envelope ID (kind procedural) (valid-from "2026-01-01") (keys release) \
(risk medium)) describes a frame; a frame built on unreviewed material is shown \
as [candidate] until admission accepts it. Mark your own reflections and session \
summaries meant for other tasks (trust candidate): admission reviews them first.
REF is a frame id (path-like: release, deployment/target-v2) or an observation \
reference @eN. Strings are double-quoted; atoms may be any letters, Chinese \
included.

# Memory tools
context_tx(tx) commits a transaction. recall(frame_id, depth, direction) walks \
sources and relations, retired records included. search(query) finds frames and \
observations by their words. read_event(ref, offset, length) reads an \
observation's original text. These four stay available in maintenance mode.

# Lifecycle in brief
- Retiring an observation frees its space now; the original is kept forever.
- A frame you retire first spends a window of ticks as retiring (still shown, \
still counted); a tick passes per input batch that brings a new external fact. \
Revise, restore or protect cancels it; a successor that cites the old frame and \
supersedes it retires it at once.
- A protected frame cannot be retired until unprotected.
- A user request not yet answered is pending and cannot be retired.
- Keep what later work needs as frames; retire raw observations once processed.

# Capacity
The runtime section reports the pressure: the whole input against the budget. Under high \
pressure the runtime enters maintenance: new external tool actions are deferred \
until you make room with context_tx (retire processed observations, consolidate \
frames); work resumes when the pressure falls. If the full input no longer fits, \
you receive a maintenance batch: the current request and a few older \
observations to process; the others are left out of that input and keep their \
state.
"""
"""The default protocol text: the system message of every input (R35)."""

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
HIDDEN_KINDS = frozenset({LEDGER})
"""Event kinds never shown to a model: the action ledger (R43) is for the runtime."""
"""Observation kinds shown as a preview plus a reference when long (R36). User
messages and recall results are never cut: the request is the work, and a recall
is something the model asked to read."""

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
    """Replaces :data:`PROTOCOL_TEXT` as the system message."""

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


@dataclass(slots=True)
class _Piece:
    """A rendered text and its token count."""

    text: str
    tokens: int


@dataclass(slots=True)
class _Session:
    name: str
    active: list[Event] = field(default_factory=list)
    retired: int = 0
    waiting: int = 0
    pending: list[Event] = field(default_factory=list)
    last_tick: int | None = None


@dataclass(slots=True)
class _Snapshot:
    meta: Meta
    sessions: dict[str, _Session]
    frames: list[Frame]
    """Visible frames (active and retiring), by (created_version, id)."""
    retired_frames: int
    relations: list[tuple[str, str, str]]
    """Edges with at least one visible endpoint, sorted."""


class _Mirror:
    """The records of one context as of the last compile, brought up to date cheaply.

    What can change between two compiles, and how it is found without reading
    everything again:

    * new observations: sequence numbers from the last ``next_seq`` on;
    * claims and deliveries (they bump no version): observations that were
      waiting in the inbox or were pending user requests are read again;
    * everything else bumps the version, and every version's log record lists
      the keys it changed (``changes``, the same list the conflict check's
      ``lastmod`` comes from): those frames, events and edges are read again.

    Anything unexpected (another context, a version or sequence going back, a
    missing log record, a long gap) makes it read everything again.
    """

    __slots__ = ("created", "version", "next_seq", "events", "frames", "relations")

    def __init__(self) -> None:
        self.created: float | None = None
        self.version = -1
        self.next_seq = 0
        self.events: dict[int, Event] = {}
        self.frames: dict[str, Frame] = {}
        self.relations: set[tuple[str, str, str]] = set()

    def load(self, view: ReadView, meta: Meta) -> None:
        self.events = {e.seq: e for e in view.iter_events()}
        self.frames = {f.id: f for f in view.iter_frames()}
        self.relations = set(view.iter_relations())
        self._mark(meta)

    def _mark(self, meta: Meta) -> None:
        self.created, self.version, self.next_seq = meta.created, meta.version, meta.next_seq

    def refresh(self, view: ReadView, meta: Meta) -> None:
        if (
            self.created != meta.created
            or meta.version < self.version
            or meta.next_seq < self.next_seq
            or meta.version - self.version > MAX_MIRROR_GAP
        ):
            self.load(view, meta)
            return
        events, frames, edges = set(), set(), set()
        for version in range(self.version + 1, meta.version + 1):
            record = view.txlog(version)
            if record is None:
                self.load(view, meta)
                return
            for key in record.get("changes") or ():
                if key.startswith("@e"):
                    events.add(int(key[2:]))
                elif " " in key:
                    parts = key.split(" ")
                    if len(parts) == 3:
                        edges.add((parts[0], parts[1], parts[2]))
                else:
                    frames.add(key)
        events.update(
            seq for seq, e in self.events.items() if e.claimed_tick is None or e.causally_protected
        )
        for seq in events:
            fresh = view.event(seq)
            if fresh is not None:
                self.events[seq] = fresh
        if meta.next_seq > self.next_seq:
            for e in view.iter_events(self.next_seq):
                self.events[e.seq] = e
        for fid in frames:
            f = view.frame(fid)
            if f is not None:
                self.frames[fid] = f
        for edge in edges:
            if view.has_relation(*edge):
                self.relations.add(edge)
            else:
                self.relations.discard(edge)
        self._mark(meta)


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


class Compiler:
    """Compiles model inputs for one context, caching what it read and rendered across calls.

    It follows the context incrementally (see :class:`_Mirror`): a compile
    reads the new observations, the ones a claim or a delivery may have
    changed, and what the log says changed since the last compile, not every
    record. Rendered observations are cached by event id (their text never changes),
    rendered frames by id and record (a hit needs an equal record, checked
    cheaply by ``updated_version`` first), event references of frame sources by
    event id; the cache keeps what recent inputs used. Meant for one context;
    another one (another ``meta.created``) clears the caches. Not thread-safe.
    """

    def __init__(
        self,
        config: CompilerConfig | None = None,
        tokenizer: Tokenizer | Callable[[str], int] | Any | None = None,
    ) -> None:
        self.config = config or CompilerConfig()
        self.tokenizer = as_tokenizer(tokenizer)
        self._estimate = isinstance(self.tokenizer, EstimateTokenizer)
        text = self.config.protocol_text
        self._protocol = self._piece(
            (PROTOCOL_TEXT if text is None else text).rstrip("\n")
            + "\n\n"
            + limits_text(self.config)
        )
        self._obs_header = self._piece(OBSERVATIONS_HEADER)
        self._batch_header = self._piece(BATCH_HEADER)
        self._identity: float | None = None
        self._obs: dict[tuple[str, int, int], _Piece] = {}
        self._frames: dict[str, tuple[Frame, _Piece]] = {}
        self._seqs: dict[str, int | None] = {}
        self._used_obs: set[tuple[str, int, int]] = set()
        self._used_frames: set[str] = set()
        self._mirror = _Mirror()

    # -- public -------------------------------------------------------------

    def compile(
        self,
        view: ReadView,
        *,
        session: str,
        previous: CompiledInput | None = None,
        overflow: bool = False,
    ) -> CompiledInput:
        """The model input for *session* from *view*; see the module docstring.

        *previous* is the input compiled for the call before (for hysteresis and
        ContextDelta); *overflow* says the model API refused that input as too
        long. Raises :class:`RequestError` (``maintenance_cannot_fit``) when not
        even the smallest maintenance input fits the budget.
        """
        meta = view.meta()
        if self._identity != meta.created:
            self._identity = meta.created
            self._obs.clear()
            self._frames.clear()
            self._seqs.clear()
        self._used_obs = set()
        self._used_frames = set()
        snap = self._snapshot(view, meta, session)
        try:
            return self._compile(view, snap, session, previous, overflow)
        finally:
            self._prune()

    # -- reading ------------------------------------------------------------

    def _snapshot(self, view: ReadView, meta: Meta, session: str) -> _Snapshot:
        mirror = self._mirror
        mirror.refresh(view, meta)
        sessions: dict[str, _Session] = {}
        for e in mirror.events.values():
            if e.kind in HIDDEN_KINDS:
                continue
            s = sessions.get(e.session)
            if s is None:
                s = sessions[e.session] = _Session(e.session)
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
            elif not _shown_to(f, session):
                hidden.add(f.id)
            else:
                frames.append(f)
        frames.sort(key=lambda f: (f.created_version, f.id))
        visible = {f.id for f in frames}
        relations = sorted(
            r
            for r in mirror.relations
            if (r[0] in visible or r[2] in visible) and r[0] not in hidden and r[2] not in hidden
        )
        return _Snapshot(meta, sessions, frames, retired, relations)

    # -- rendering pieces ---------------------------------------------------

    def _piece(self, text: str) -> _Piece:
        return _Piece(text, self.tokenizer.count(text))

    def _obs_piece(self, view: ReadView, e: Event) -> _Piece:
        key = (e.id, e.seq, e.size)
        self._used_obs.add(key)
        p = self._obs.get(key)
        if p is None:
            p = self._obs[key] = self._render_obs(view, e)
        return p

    def _render_obs(self, view: ReadView, e: Event) -> _Piece:
        cfg = self.config
        head = f"{e.ref} {e.kind} [{e.session}] : "
        text: str | None
        cut = False
        if e.kind in LONG_KINDS and self._estimate:
            # The stored estimate is this tokenizer's count: no need to read it all.
            cut = e.tokens > cfg.long_result_tokens
            if cut:
                text = view.event_chunk(e.seq, 0, cfg.preview_chars)
            else:
                text = view.event_content(e.seq)
        else:
            text = view.event_content(e.seq)
            if text is not None and e.kind in LONG_KINDS:
                cut = self.tokenizer.count(text) > cfg.long_result_tokens
                if cut:
                    text = text[: cfg.preview_chars]
        if text is None:
            return self._piece(f"{head}(text unavailable; read_event {e.ref})")
        body = _indent(text)
        if cut and e.size > len(text):
            more = e.size - len(text)
            body += f"\n  (… {more} more chars; read_event {e.ref} for the rest)"
        return self._piece(head + body)

    def _frame_piece(self, view: ReadView, f: Frame) -> _Piece:
        self._used_frames.add(f.id)
        hit = self._frames.get(f.id)
        # Equal records render equally; comparing whole records (not just the
        # version) keeps the cache right even for a fork that reuses versions.
        if hit is not None and hit[0].updated_version == f.updated_version and hit[0] == f:
            return hit[1]
        p = self._piece(self._render_frame(view, f))
        self._frames[f.id] = (f, p)
        return p

    def _render_frame(self, view: ReadView, f: Frame) -> str:
        parts = [f"frame {f.id} r{f.revision} {f.lifecycle}"]
        if f.trust == CANDIDATE:
            parts.append("[candidate]")
        if f.protected:
            parts.append("protected")
        if f.lifecycle == RETIRING:
            parts.append(f"due-tick {f.due_tick}")
            if f.retire_reason:
                parts.append("reason " + print_form(f.retire_reason))
        if f.sources:
            parts.append("(from " + " ".join(self._source_ref(view, s) for s in f.sources) + ")")
        line = " ".join(parts)
        if f.body:
            line += "\n  " + " ".join(print_form(x) for x in f.body)
        return line

    def _source_ref(self, view: ReadView, source: str) -> str:
        if not source.startswith("ev:"):
            return source
        if source in self._seqs:
            seq = self._seqs[source]
        else:
            seq = self._seqs[source] = view.event_seq(source)
        return f"@e{seq}" if seq is not None else source

    def _prune(self) -> None:
        # Keep the cache near the size of what the last inputs used.
        if len(self._obs) > 2 * len(self._used_obs) + 1024:
            self._obs = {k: v for k, v in self._obs.items() if k in self._used_obs}
        if len(self._frames) > 2 * len(self._used_frames) + 1024:
            self._frames = {k: v for k, v in self._frames.items() if k in self._used_frames}
        if len(self._seqs) > 65_536:
            self._seqs.clear()

    # -- compiling ----------------------------------------------------------

    def _compile(
        self,
        view: ReadView,
        snap: _Snapshot,
        session: str,
        previous: CompiledInput | None,
        overflow: bool,
    ) -> CompiledInput:
        cfg = self.config
        meta = snap.meta
        cur = snap.sessions.get(session) or _Session(session)
        if previous is not None and previous.session != session:
            previous = None  # hysteresis and deltas follow one session's calls
        frames = [self._frame_piece(view, f) for f in snap.frames]
        frames_text = _section("## frames", [p.text for p in frames])
        frames_tokens = self.tokenizer.count("## frames") + sum(p.tokens for p in frames)
        rel_piece = self._piece(_section("## relations", [" ".join(r) for r in snap.relations]))
        own = [self._obs_piece(view, e) for e in cur.active]
        others = _order_others(snap, session, cfg.working_set_ticks)

        # Other sessions (R36): in full while the input stays at or below resume_at
        # (they never push it into maintenance or hold it there), as metadata while
        # it stays below maintenance_at, else swapped out.
        fixed = (
            3 * MESSAGE_OVERHEAD
            + self._protocol.tokens
            + self._obs_header.tokens
            + sum(p.tokens for p in own)
            + frames_tokens
            + rel_piece.tokens
        )
        # Below the maintenance threshold: total + reserve < maintenance_at * budget.
        soft = math.ceil(cfg.maintenance_at * cfg.budget_tokens - cfg.reserve_tokens) - 1
        calm = math.floor(cfg.resume_at * cfg.budget_tokens - cfg.reserve_tokens)
        swapped = {s.name: "swapped" for s in others}
        probe = Capacity(tokens=soft, budget=cfg.budget_tokens, pressure=1.0, maintenance=False)
        probe_lines = _runtime_lines(meta, cfg, probe, soft, None, cur, snap, None)
        used = (
            fixed
            + self.tokenizer.count(_sessions_text(cur, others, swapped, None))
            + self.tokenizer.count(_render_runtime(probe_lines))
        )
        modes = self._choose_modes(view, others, meta.tick, used, soft, full_limit=calm)
        shown = sorted(
            [*cur.active, *(e for s in others if modes[s.name] == "full" for e in s.active)],
            key=lambda e: e.seq,
        )
        pieces = [self._obs_piece(view, e) for e in shown]
        obs_text = OBSERVATIONS_HEADER + "".join("\n" + p.text for p in pieces)
        obs_tokens = self._obs_header.tokens + sum(p.tokens for p in pieces)
        sessions_piece = self._piece(_sessions_text(cur, others, modes, None))
        state_fixed = frames_tokens + rel_piece.tokens + sessions_piece.tokens
        head = frames_text + "\n\n" + rel_piece.text + "\n\n" + sessions_piece.text + "\n\n"
        base_tokens = 3 * MESSAGE_OVERHEAD + self._protocol.tokens + obs_tokens + state_fixed
        request = _current_request(cur)

        def runtime(total: int) -> tuple[str, Capacity]:
            cap = self._capacity(total, previous, overflow)
            lines = _runtime_lines(meta, cfg, cap, total, request, cur, snap, None)
            return _render_runtime(lines), cap

        runtime_text, total, cap = self._settle(base_tokens, runtime)
        if overflow or total + cfg.reserve_tokens > cfg.budget_tokens:
            return self._batched(view, snap, cur, others, request, total, previous, overflow)

        state_text = head + runtime_text
        messages = (
            {"role": "system", "content": self._protocol.text},
            {"role": "user", "content": obs_text},
            {"role": "user", "content": state_text},
        )
        full = CompiledInput(
            messages=messages,
            tokens=total,
            prefix_tokens=2 * MESSAGE_OVERHEAD + self._protocol.tokens + obs_tokens,
            capacity=cap,
            version=meta.version,
            tick=meta.tick,
            session=session,
            frames_present=tuple(f.id for f in snap.frames),
            events_present=tuple(e.ref for e in shown),
            retrieved=_retrieved(shown),
        )
        if cfg.context_delta and previous is not None:
            # What a full render sends beyond the prefix it shares with the previous
            # request: the state block, plus the observations after the first one that
            # left the input since the previous request's observations block.
            msgs = previous.messages
            before = str(msgs[1].get("content", "")) if len(msgs) > 1 else ""
            kept = 0
            if before.startswith(OBSERVATIONS_HEADER):
                kept = self._obs_header.tokens
                pos = len(OBSERVATIONS_HEADER)
                for p in pieces:  # entry by entry, without copying the texts
                    if not (before.startswith("\n", pos) and before.startswith(p.text, pos + 1)):
                        break
                    kept += p.tokens
                    pos += 1 + len(p.text)
            uncached = total - 2 * MESSAGE_OVERHEAD - self._protocol.tokens - kept
            delta = self._delta(
                view, snap, cur, others, modes, shown, request, previous, overflow, uncached
            )
            if delta is not None and not (delta.capacity.maintenance and not cap.maintenance):
                return delta
        return full

    def _choose_modes(
        self,
        view: ReadView,
        others: list[_Session],
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
            swapped = self.tokenizer.count(_session_line(s, "swapped"))
            if full_limit is not None and _working(s, tick, self.config.working_set_ticks):
                line = self.tokenizer.count(_session_line(s, "full")) - swapped
                cost = line + sum(self._obs_piece(view, e).tokens for e in s.active)
                if used + cost <= min(limit, full_limit):
                    modes[s.name] = "full"
                    used += cost
                    continue
            cost = self.tokenizer.count(_session_line(s, "metadata")) - swapped
            if used + cost <= limit:
                modes[s.name] = "metadata"
                used += cost
        return modes

    def _capacity(self, total: int, previous: CompiledInput | None, overflow: bool) -> Capacity:
        cfg = self.config
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

    def _settle(
        self, fixed: int, render: Callable[[int], tuple[str, Capacity]]
    ) -> tuple[str, int, Capacity]:
        """Render the runtime section, whose own size is part of the total it reports.

        The total only grows between rounds, so this settles in a few steps; the
        figure reported is never below the true count.
        """
        text, cap = render(fixed)
        total = fixed + self.tokenizer.count(text)
        for _ in range(8):
            text, cap = render(total)
            actual = fixed + self.tokenizer.count(text)
            if actual <= total:
                break
            total = actual
        return text, total, cap

    # -- batched maintenance (R33) -------------------------------------------

    def _batched(
        self,
        view: ReadView,
        snap: _Snapshot,
        cur: _Session,
        others: list[_Session],
        request: Event | None,
        full_tokens: int,
        previous: CompiledInput | None,
        overflow: bool,
    ) -> CompiledInput:
        cfg = self.config
        meta = snap.meta
        limit = cfg.budget_tokens - cfg.reserve_tokens
        refused: int | None = None
        if overflow:
            # The API refused a request our count thought smaller: aim well below it
            # (resume_at of its size), and never at or above it.
            refused = previous.tokens if previous is not None else full_tokens
        cap = self._capacity(full_tokens, previous, overflow)
        # The current request and its causal dependencies: this session's pending requests.
        required = [e for e in cur.active if e.causally_protected]
        required_ids = {e.id for e in required}
        candidates = sorted(
            (e for e in cur.active if e.id not in required_ids),
            key=lambda e: (e.claimed_tick or 0, -self._obs_piece(view, e).tokens, e.seq),
        )
        frames = [self._frame_piece(view, f) for f in snap.frames]
        frames_text = _section("## frames", [p.text for p in frames])
        frames_tokens = self.tokenizer.count("## frames") + sum(p.tokens for p in frames)
        rel_piece = self._piece(_section("## relations", [" ".join(r) for r in snap.relations]))
        swapped = {s.name: "swapped" for s in others}

        def build(batch: list[Event], modes: dict[str, str]) -> tuple[CompiledInput, int]:
            shown = sorted([*required, *batch], key=lambda e: e.seq)
            pieces = [self._obs_piece(view, e) for e in shown]
            obs_text = BATCH_HEADER + "".join("\n" + p.text for p in pieces)
            obs_tokens = self._batch_header.tokens + sum(p.tokens for p in pieces)
            left_out = len(cur.active) - len(shown)
            batch_info = (tuple(e.ref for e in batch), len(cur.active), left_out)
            sessions = self._piece(_sessions_text(cur, others, modes, batch_info))
            base = (
                3 * MESSAGE_OVERHEAD
                + self._protocol.tokens
                + obs_tokens
                + frames_tokens
                + rel_piece.tokens
                + sessions.tokens
            )

            def runtime(total: int) -> tuple[str, Capacity]:
                lines = _runtime_lines(meta, cfg, cap, total, request, cur, snap, batch_info)
                return _render_runtime(lines), cap

            runtime_text, total, _ = self._settle(base, runtime)
            state = (
                frames_text + "\n\n" + rel_piece.text + "\n\n" + sessions.text + "\n\n"
            ) + runtime_text
            compiled = CompiledInput(
                messages=(
                    {"role": "system", "content": self._protocol.text},
                    {"role": "user", "content": obs_text},
                    {"role": "user", "content": state},
                ),
                tokens=total,
                prefix_tokens=MESSAGE_OVERHEAD + self._protocol.tokens,
                capacity=cap,
                version=meta.version,
                tick=meta.tick,
                session=cur.name,
                frames_present=tuple(f.id for f in snap.frames),
                events_present=tuple(e.ref for e in shown),
                retrieved=_retrieved(shown),
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
            cost = self._obs_piece(view, e).tokens + self.tokenizer.count(f" {e.ref}")
            if cost <= room:
                batch.append(e)
                room -= cost
        modes = self._choose_modes(view, others, meta.tick, limit - room, limit, full_limit=None)
        compiled, total = build(batch, modes)
        while total > limit and any(m != "swapped" for m in modes.values()):
            modes = swapped
            compiled, total = build(batch, modes)
        while total > limit and batch:
            batch.pop()
            compiled, total = build(batch, modes)
        return compiled if total <= limit else smallest

    # -- ContextDelta (R37) ----------------------------------------------------

    def _delta(
        self,
        view: ReadView,
        snap: _Snapshot,
        cur: _Session,
        others: list[_Session],
        modes: dict[str, str],
        shown: list[Event],
        request: Event | None,
        previous: CompiledInput,
        overflow: bool,
        full_uncached: int,
    ) -> CompiledInput | None:
        """The previous messages plus one delta message, or None to render in full.

        None when the chain is due for a re-render (every ``delta_rebase_every``
        calls) or when the delta would cost more than a full render sends beyond
        the prefix it shares with the previous request (*full_uncached*; with no
        observation retired that is the new observations plus the state block).
        """
        cfg = self.config
        meta = snap.meta
        msgs = previous.messages
        if (
            previous.maintenance_batch
            or len(msgs) < 3
            or msgs[0].get("content") != self._protocol.text
            or not str(msgs[1].get("content", "")).startswith(OBSERVATIONS_HEADER)
            or not str(msgs[2].get("content", "")).startswith("## frames")
            or previous.version > meta.version
            or previous.tick > meta.tick
            or meta.version - previous.version > MAX_DELTA_SPAN
            or len(msgs) - 2 >= cfg.delta_rebase_every
        ):
            return None
        contents = [str(m.get("content", "")) for m in msgs[2:]]
        before = _replay(contents)
        if before is None:
            return None
        prev_events = set(previous.events_present)
        prev_frames = set(previous.frames_present)
        added = [e for e in shown if e.ref not in prev_events]
        now_events = {e.ref for e in shown}
        gone_events = [r for r in previous.events_present if r not in now_events]
        visible = {f.id: f for f in snap.frames}
        changed = [
            f
            for f in snap.frames
            if f.updated_version > previous.version or f.id not in prev_frames
        ]
        gone_frames = [fid for fid in previous.frames_present if fid not in visible]
        rel_now = set(snap.relations)
        rel_added = sorted(rel_now - before.relations)
        rel_removed = sorted(before.relations - rel_now)
        sessions_text = _sessions_text(cur, others, modes, None)

        header = DELTA_HEADER
        parts: list[str] = []
        plain = [header]  # the parts whose tokens are not cached per record
        tokens = 0
        if added:
            ps = [self._obs_piece(view, e) for e in added]
            parts.append("### new observations\n" + "\n".join(p.text for p in ps))
            plain.append("### new observations")
            tokens += sum(p.tokens for p in ps)
        if gone_events:
            parts.append("### observations out of view\n" + " ".join(gone_events))
            plain.append(parts[-1])
        if changed:
            ps = [self._frame_piece(view, f) for f in changed]
            parts.append("### frames changed\n" + "\n".join(p.text for p in ps))
            plain.append("### frames changed")
            tokens += sum(p.tokens for p in ps)
        if gone_frames:
            lines = []
            for fid in gone_frames:
                f = view.frame(fid)
                state = "gone" if f is None else f.trust if f.trust in HIDDEN_TRUST else f.lifecycle
                lines.append(f"{fid} ({state})")
            parts.append("### frames out of view\n" + "\n".join(lines))
            plain.append(parts[-1])
        if rel_added:
            parts.append("### relations added\n" + "\n".join(" ".join(r) for r in rel_added))
            plain.append(parts[-1])
        if rel_removed:
            parts.append("### relations removed\n" + "\n".join(" ".join(r) for r in rel_removed))
            plain.append(parts[-1])
        if sessions_text != before.sessions:
            parts.append(sessions_text)
            plain.append(parts[-1])
        body = "\n\n".join([header, *parts])
        tokens += self.tokenizer.count("\n\n".join(plain))
        base = previous.tokens + MESSAGE_OVERHEAD + tokens

        def runtime(total: int) -> tuple[str, Capacity]:
            cap = self._capacity(total, previous, overflow)
            lines = _runtime_lines(meta, cfg, cap, total, request, cur, snap, None)
            return _render_runtime_changes(lines, before.runtime), cap

        if not parts:
            # Nothing changed: the previous input stands as it is if its runtime does too.
            text, cap = runtime(previous.tokens)
            if not text:
                return CompiledInput(
                    messages=msgs,
                    tokens=previous.tokens,
                    prefix_tokens=previous.tokens,
                    capacity=cap,
                    version=meta.version,
                    tick=meta.tick,
                    session=cur.name,
                    frames_present=tuple(visible),
                    events_present=tuple(e.ref for e in shown),
                    retrieved=_retrieved(shown),
                    encoding=previous.encoding,
                )
        runtime_text, total, cap = self._settle(base, runtime)
        if total - previous.tokens > full_uncached:
            return None
        content = body + "\n\n" + runtime_text if runtime_text else body
        return CompiledInput(
            messages=(*msgs, {"role": "user", "content": content}),
            tokens=total,
            prefix_tokens=previous.tokens,
            capacity=cap,
            version=meta.version,
            tick=meta.tick,
            session=cur.name,
            frames_present=tuple(visible),
            events_present=tuple(e.ref for e in shown),
            retrieved=_retrieved(shown),
            encoding="delta",
        )


def compile_input(
    view: ReadView,
    *,
    session: str,
    config: CompilerConfig | None = None,
    tokenizer: Tokenizer | Callable[[str], int] | Any | None = None,
    previous: CompiledInput | None = None,
    overflow: bool = False,
) -> CompiledInput:
    """Compile one model input for *session* from *view* with no cache kept across calls.

    Equivalent to ``Compiler(config, tokenizer).compile(view, ...)``; an agent
    loop that compiles often keeps one :class:`Compiler` per context instead.
    """
    return Compiler(config, tokenizer).compile(
        view, session=session, previous=previous, overflow=overflow
    )


# -- text helpers -----------------------------------------------------------


def _retrieved(shown: Iterable[Event]) -> tuple[str, ...]:
    """Frames named by the recall results among *shown*, each once, in order (R42 traces)."""
    out: dict[str, None] = {}
    for e in shown:
        if e.kind == "recall_result":
            for fid in e.extra.get("recalled") or ():
                out.setdefault(str(fid), None)
    return tuple(out)


def _shown_to(f: Frame, session: str) -> bool:
    """Governance (R42, R43): rejected and quarantined frames are in no input; a
    candidate only in the input of the session its content came from."""
    trust = f.trust
    if trust in HIDDEN_TRUST:
        return False
    return trust != CANDIDATE or f.envelope.get("session") == session


def _indent(text: str) -> str:
    """Continuation lines indented, so only entry headers start at column 0."""
    return text.replace("\n", "\n  ") if "\n" in text else text


def _section(header: str, lines: Iterable[str]) -> str:
    body = "\n".join(lines)
    return header + "\n" + (body or "(none)")


def _working(s: _Session, tick: int, ticks: int) -> bool:
    return bool(s.pending) or (s.last_tick is not None and s.last_tick >= tick - ticks)


def _order_others(snap: _Snapshot, session: str, ticks: int) -> list[_Session]:
    tick = snap.meta.tick
    others = [s for name, s in snap.sessions.items() if name != session]
    others.sort(
        key=lambda s: (
            0 if _working(s, tick, ticks) else 1,
            -(s.last_tick if s.last_tick is not None else -1),
            s.name,
        )
    )
    return others


def _current_request(cur: _Session) -> Event | None:
    """The newest undelivered, claimed user message of the session."""
    claimed = [e for e in cur.pending if e.claimed_tick is not None]
    return claimed[-1] if claimed else None


def _counts(s: _Session) -> str:
    out = f"{len(s.active)} active observation{'' if len(s.active) == 1 else 's'}"
    if s.retired:
        out += f", {s.retired} retired"
    if s.waiting:
        out += f", {s.waiting} waiting"
    if s.pending:
        out += "; pending requests " + " ".join(e.ref for e in s.pending)
    return out


def _session_line(s: _Session, mode: str) -> str:
    if mode == "swapped":
        return f"- {s.name} (swapped out)"
    if mode == "full":
        return f"- {s.name} (shown in full): {_counts(s)}"
    last = f"; last active at tick {s.last_tick}" if s.last_tick is not None else ""
    return f"- {s.name} (metadata only; observations not shown): {_counts(s)}{last}"


def _sessions_text(
    cur: _Session,
    others: list[_Session],
    modes: dict[str, str],
    batch: tuple[tuple[str, ...], int, int] | None,
) -> str:
    if batch is None:
        line = f"- {cur.name} (current; its active observations are shown above)"
    else:
        line = (
            f"- {cur.name} (current; this maintenance batch shows its pending requests and "
            f"{len(batch[0])} of its {batch[1]} active observations)"
        )
    lines = [line]
    lines.extend(_session_line(s, modes[s.name]) for s in others)
    return _section("## sessions", lines)


def _runtime_lines(
    meta: Meta,
    cfg: CompilerConfig,
    cap: Capacity,
    total: int,
    request: Event | None,
    cur: _Session,
    snap: _Snapshot,
    batch: tuple[tuple[str, ...], int, int] | None,
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


def limits_text(cfg: CompilerConfig) -> str:
    """The limits of the model a config describes; ends the system message (stable per config)."""
    return (
        f"# Limits\nInput budget {cfg.budget_tokens} tokens, {cfg.reserve_tokens} of them "
        f"reserved for your answer; maintenance at {cfg.maintenance_at:.0%} pressure, work "
        f"resumes at {cfg.resume_at:.0%}.\n"
    )


def _render_runtime(lines: dict[str, str]) -> str:
    return RUNTIME_HEADER + "\n" + "\n".join(f"{k}: {v}" for k, v in lines.items())


def _render_runtime_changes(lines: dict[str, str], before: dict[str, str]) -> str:
    out = [f"{k}: {v}" for k, v in lines.items() if before.get(k) != v]
    out.extend(f"{k}: {NONE}" for k in before if k not in lines)
    return RUNTIME_CHANGES_HEADER + "\n" + "\n".join(out) if out else ""


def _runtime_dict(body: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in body.split("\n"):
        key, sep, value = line.partition(": ")
        if sep:
            out[key] = value
    return out


# -- reading inputs back ----------------------------------------------------


@dataclass(slots=True)
class _Replayed:
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


def _replay(state_messages: list[str]) -> _Replayed | None:
    """Relations, sessions and runtime text in effect after a state message and its deltas."""
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
    return _Replayed(relations, sessions, runtime)


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
    facts. Used by tests and traces; it trusts the layout this module writes.
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
