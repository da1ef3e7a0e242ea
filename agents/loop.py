"""The agent loop (R10, R19, R20, R31–R38): claim a batch, compile, ask the model, act.

:class:`AgentLoop` is a plain class; it works against a :class:`ContextPort`,
which both an embedded :class:`~service.context.Context` (through
:class:`EmbeddedPort`) and a Ray :class:`~actors.client.handle.ContextHandle`
satisfy. One :meth:`AgentLoop.step` is one model call:

1. **claim** the waiting inputs as one batch (one cognitive tick, R20);
2. **compile** the model input for the loop's session (R35–R37); when the
   model reports :class:`~protocol.turns.InputOverflow`, compile again with
   ``overflow=True`` (a maintenance input, R32/R33) and ask once more;
3. **commit** every ``context_tx`` of the turn through the context (receipts:
   committed, rebased or rejected; after a conflict the next step re-reads);
4. answer the **memory calls** (``recall``, ``search``, ``read_event``) as
   ``recall_result`` observations — the same path as any tool result
   (:func:`agents.tools.answer_memory_call`);
5. run the **action** on its own path (R10): an external tool through a
   :class:`~agents.actions.ToolRunner`, its result observed as a ``tool_result``; a
   :class:`~protocol.turns.Reply` delivers its request (lifting R19). If a
   transaction of the turn was rejected, the action is dropped instead: it
   was decided on a state that no longer holds, and the next step re-reads. In
   maintenance mode an external tool action is *deferred* — recorded, not
   run — and runs once an input is out of maintenance (R32);
6. **trace** the call: frames and observations present, version, tick, the
   action and the committed versions (R39).

Nothing here imports Ray, the harness or a model client: the model is passed
in (:mod:`agents.models`, :mod:`agents.scripted`), and
:class:`~agents.actor.AgentLoopActor` runs a loop as a Ray actor.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from agents.actions import ToolRunner
from agents.port import ContextPort
from agents.tools import answer_memory_call, transaction_text
from protocol.compiler import CompilerConfig
from protocol.errors import MorphzError
from protocol.ids import is_event_ref
from protocol.receipts import Receipt
from protocol.turns import CompiledInput, InputOverflow, Model, ModelTurn, Reply, ToolCall
from protocol.txlang import parse_tx
from protocol.usage import mentions, tx_citations, tx_writes

RETRY_CODES = frozenset({"conflict", "too_old"})
"""Rejections after which re-reading and rebuilding can succeed (R24)."""
MAX_STUCK = 3
"""Consecutive steps whose transactions were all rejected (for other reasons) before stopping."""


class StepHooks(Protocol):
    """Optional callbacks around the commits of a step (the demo uses them to stage a race)."""

    def before_commit(self, loop: AgentLoop, turn: ModelTurn, compiled: CompiledInput) -> None:
        """Called after the model answered, before its transactions are submitted."""

    def after_commit(self, loop: AgentLoop, turn: ModelTurn, receipts: list[Receipt]) -> None:
        """Called after the transactions were decided."""


@dataclass
class StepResult:
    """What one step did; :meth:`to_dict` is its JSON form."""

    thread: str
    session: str
    step: int
    claimed: tuple[str, ...] = ()
    version: int = 0
    tick: int = 0
    tokens: int = 0
    pressure: float = 0.0
    maintenance: bool = False
    overflow: bool = False
    committed: list[int] = field(default_factory=list)
    rebased: int = 0
    rejected: list[str] = field(default_factory=list)
    """Error codes of the rejected transactions (the first error of each)."""
    conflicts: list[str] = field(default_factory=list)
    memory: list[str] = field(default_factory=list)
    action: str | None = None
    deferred: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    delivered: str | None = None
    dropped: bool = False
    """True when the action was not taken because a transaction of the turn was rejected."""
    observed: list[str] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)
    """Outcomes of irreversible tool calls: ran, reused, unknown, reconciled."""
    outcome: str | None = None
    """``ok`` or ``failed`` when a tool action ran (or its recorded result was reused)."""
    decisions: list[dict[str, Any]] = field(default_factory=list)
    """One per committed transaction: ``{"version", "writes", "cited"}`` (R42)."""
    recalls: list[dict[str, Any]] = field(default_factory=list)
    """Recalls asked for: ``{"ref", "frames"}``; the frames reach the next input."""
    action_cited: list[str] = field(default_factory=list)
    """Frames and ``@eN`` refs the action named."""
    idle: bool = False
    error: str | None = None
    seconds: float = 0.0

    @property
    def done(self) -> bool:
        """True when the step did nothing: the model has no more work for now."""
        return self.idle

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {
            "thread": self.thread,
            "session": self.session,
            "step": self.step,
            "claimed": list(self.claimed),
            "version": self.version,
            "tick": self.tick,
            "tokens": self.tokens,
            "pressure": self.pressure,
            "maintenance": self.maintenance,
            "overflow": self.overflow,
            "committed": list(self.committed),
            "rebased": self.rebased,
            "rejected": list(self.rejected),
            "conflicts": list(self.conflicts),
            "memory": list(self.memory),
            "action": self.action,
            "deferred": list(self.deferred),
            "resumed": list(self.resumed),
            "delivered": self.delivered,
            "dropped": self.dropped,
            "observed": list(self.observed),
            "tools": list(self.tools),
            "outcome": self.outcome,
            "decisions": [dict(d) for d in self.decisions],
            "recalls": [dict(r) for r in self.recalls],
            "action_cited": list(self.action_cited),
            "idle": self.idle,
            "error": self.error,
            "seconds": self.seconds,
        }


def usage_trace(result: StepResult, compiled: CompiledInput) -> dict[str, Any]:
    """The usage trace of one model call (R42; fields in :mod:`protocol.usage`)."""
    cited: dict[str, None] = {}
    for d in result.decisions:
        cited.update((r, None) for r in d["cited"])
    cited.update((r, None) for r in result.action_cited)
    return {
        "session": result.session,
        "thread": result.thread,
        "step": result.step,
        "version": compiled.version,
        "tick": compiled.tick,
        "frames_present": list(compiled.frames_present),
        "events_present": list(compiled.events_present),
        "retrieved": list(compiled.retrieved),
        "recalls": [dict(r) for r in result.recalls],
        "maintenance": compiled.capacity.maintenance,
        "tokens": compiled.tokens,
        "action": result.action,
        "action_cited": list(result.action_cited),
        "committed": list(result.committed),
        "decisions": [dict(d) for d in result.decisions],
        "cited": [r for r in cited if not is_event_ref(r)],
        "outcome": result.outcome,
    }


def _action_text(action: ToolCall | Reply) -> Any:
    """What an action names: a tool's arguments, or a reply's text and the request it answers."""
    if isinstance(action, Reply):
        return [action.text, action.request_ref or ""]
    return action.arguments


def describe_action(action: ToolCall | Reply | None) -> str | None:
    """A short text for an action: ``tool run_tests`` or ``reply @e3``."""
    if action is None:
        return None
    if isinstance(action, Reply):
        return f"reply {action.request_ref or ''}".rstrip()
    return f"tool {action.name}"


def _key(call: ToolCall) -> str:
    return call.idempotency_key or f"{call.name}:{sorted(call.arguments.items())!r}"


class AgentLoop:
    """One agent thread's loop over one session of a context (see the module docstring).

    ``deferred`` holds the external tool calls put off in maintenance mode, in
    order; ``results`` every :class:`StepResult`.
    """

    def __init__(
        self,
        port: ContextPort,
        model: Model,
        *,
        session: str = "main",
        thread: str | None = None,
        config: CompilerConfig | None = None,
        tools: ToolRunner | None = None,
        hooks: StepHooks | None = None,
        trace: bool = True,
    ) -> None:
        self.port = port
        self.model = model
        self.session = session
        self.thread = thread or session
        self.config = config or CompilerConfig()
        self.tools = tools or ToolRunner()
        self.hooks = hooks
        self.trace = trace
        self.deferred: list[ToolCall] = []
        self.results: list[StepResult] = []
        self.previous: CompiledInput | None = None
        self._stuck = 0

    # -- one step -------------------------------------------------------------

    def step(self) -> StepResult:
        """Claim, compile, ask the model, commit, answer memory calls, act, trace."""
        started = time.perf_counter()
        result = StepResult(thread=self.thread, session=self.session, step=len(self.results) + 1)
        claim = self.port.claim()
        result.claimed = tuple(claim.get("claimed", ()))
        compiled, turn = self._ask(result)
        result.version = compiled.version
        result.tick = compiled.tick
        result.tokens = compiled.tokens
        result.pressure = round(compiled.capacity.pressure, 4)
        result.maintenance = compiled.capacity.maintenance
        if self.hooks is not None:
            self.hooks.before_commit(self, turn, compiled)
        receipts = [self._submit(tx, result) for tx in turn.transactions]
        if self.hooks is not None:
            self.hooks.after_commit(self, turn, [r for r in receipts if r is not None])
        memory = list(turn.memory_calls)
        action = turn.action
        if isinstance(action, ToolCall) and action.is_memory_tool:
            memory.append(action)
            action = None
        for call in memory:
            self._memory(call, result)
        if action is not None and result.rejected:
            # The turn was decided on a state its own transaction could not commit
            # against (a conflict, most often): acting on it could package a release
            # that was just paused. Drop the action; the next step re-reads.
            result.action = f"dropped {describe_action(action)}"
            result.dropped = True
        else:
            self._act(action, compiled, result)
            if action is not None:
                known = {*compiled.frames_present, *compiled.retrieved}
                result.action_cited = mentions(_action_text(action), known)
        result.idle = not (turn.transactions or memory or action is not None or result.resumed)
        if turn.transactions and not result.committed:
            if all(code in RETRY_CODES for code in result.rejected):
                self._stuck = 0
            else:
                self._stuck += 1
        else:
            self._stuck = 0
        if self._stuck >= MAX_STUCK:
            result.error = "stuck: the model's transactions keep being rejected"
            result.idle = True
        if self.trace:
            self.port.record_trace(usage_trace(result, compiled))
        self.previous = compiled
        result.seconds = round(time.perf_counter() - started, 4)
        self.results.append(result)
        return result

    def run(self, max_steps: int = 32) -> list[StepResult]:
        """Step until a step does nothing (or *max_steps*); the steps of this run."""
        out: list[StepResult] = []
        for _ in range(max_steps):
            r = self.step()
            out.append(r)
            if r.done:
                break
        return out

    # -- pieces ------------------------------------------------------------------

    def _compile(self, overflow: bool) -> CompiledInput:
        return self.port.compile(self.session, self.config, self.previous, overflow)

    def _ask(self, result: StepResult) -> tuple[CompiledInput, ModelTurn]:
        compiled = self._compile(False)
        tools = () if compiled.capacity.maintenance else self.tools.specs()
        try:
            return compiled, self.model.respond(compiled, tools)
        except InputOverflow:
            # R32: the model API refused the input; ask again with a maintenance input.
            result.overflow = True
            compiled = self._compile(True)
            return compiled, self.model.respond(compiled, ())

    def _submit(self, tx: str, result: StepResult) -> Receipt | None:
        try:
            receipt = self.port.submit(tx)
        except MorphzError as e:  # not a transaction (bad text): no receipt
            result.rejected.append(e.code)
            return None
        if receipt.committed:
            result.committed.append(receipt.version)
            parsed = parse_tx(tx)
            result.decisions.append(
                {
                    "version": receipt.version,
                    "writes": tx_writes(parsed),
                    "cited": tx_citations(parsed),
                }
            )
            if receipt.rebased:
                result.rebased += 1
        else:
            result.rejected.append(receipt.errors[0].code if receipt.errors else "rejected")
            result.conflicts.extend(c.id for c in receipt.conflicts)
        return receipt

    def _memory(self, call: ToolCall, result: StepResult) -> None:
        """Submit a ``context_tx`` call; answer any other memory call (see :mod:`agents.tools`)."""
        result.memory.append(call.name)
        if call.name == "context_tx":
            self._submit(transaction_text(call.arguments), result)
            return
        answer = answer_memory_call(self.port, call, self.session)
        result.observed.append(answer.ref)
        if answer.frames is not None:
            result.recalls.append({"ref": answer.ref, "frames": list(answer.frames)})

    def _act(
        self, action: ToolCall | Reply | None, compiled: CompiledInput, result: StepResult
    ) -> None:
        result.action = describe_action(action)
        if isinstance(action, Reply):
            if action.request_ref is not None:
                try:
                    self.port.deliver(action.request_ref)
                    result.delivered = action.request_ref
                except MorphzError as e:
                    result.error = f"deliver {action.request_ref}: {e.code}"
            return
        maintenance = compiled.capacity.maintenance
        if isinstance(action, ToolCall):
            if maintenance:
                if all(_key(d) != _key(action) for d in self.deferred):
                    self.deferred.append(action)
                result.deferred.append(action.name)
                result.action = f"deferred {action.name}"
                return
            # A re-offered call replaces its deferred copy.
            self.deferred = [d for d in self.deferred if _key(d) != _key(action)]
            self._run_tool(action, result)
            return
        if not maintenance and self.deferred:
            call = self.deferred.pop(0)
            result.resumed.append(call.name)
            result.action = f"resumed {call.name}"
            self._run_tool(call, result)

    def _run_tool(self, call: ToolCall, result: StepResult) -> None:
        if call.irreversible and call.idempotency_key is not None and hasattr(self.port, "event"):
            outcome = self.tools.run_recorded(call, self.port, self.session)
            result.tools.append(outcome.status)
            if outcome.status == "unknown":
                result.error = f"needs reconciliation: {call.name} key={outcome.key}"
                return
        else:
            outcome = self.tools.call(call)
            obs = self.port.observe("tool_result", outcome.text, session=self.session)
            result.observed.append(str(obs["ref"]))
        result.outcome = "failed" if outcome.failed else "ok"


__all__ = [
    "MAX_STUCK",
    "RETRY_CODES",
    "AgentLoop",
    "StepHooks",
    "StepResult",
    "describe_action",
    "usage_trace",
]
