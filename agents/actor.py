"""An agent thread as a Ray actor: an :class:`~agents.loop.AgentLoop` with a scripted model.

:class:`AgentLoopActor` is a plain class; whoever runs it (the demo) wraps it
with ``ray.remote``. It finds its context actor by name, so it can run
anywhere in the cluster, and reports every step to a *board* actor when one is
named. :class:`BoardGates` are the :class:`~agents.loop.StepHooks` that stage
a race through that board. A board is any named actor answering
``report(doc)``, ``signal(name)`` and ``wait(name, timeout) -> bool``; the
demo's :class:`~harness.demo.DemoBoard` is one. This module never imports the
harness; Ray is reached only through the actors layer
(:func:`actors.client.joining.ray_module`, when an actor runs).
"""

from __future__ import annotations

from typing import Any

from actors.client.joining import ray_module
from agents.loop import AgentLoop, StepHooks, StepResult
from agents.scripted import scripted_model
from protocol.compiler import CompilerConfig
from protocol.errors import MorphzError
from protocol.receipts import Receipt
from protocol.turns import CompiledInput, ModelTurn

GATE_TIMEOUT = 10.0
"""Seconds a gated thread waits for the other side of the staged race."""


class BoardGates:
    """:class:`~agents.loop.StepHooks` that wait and signal on a board actor.

    A gate is ``{"phase": "before"|"after", "match": TEXT, "signal": NAME,
    "wait": NAME}``: when a transaction of the turn contains *match* (before
    the commit; after it, only if committed), set *signal* then wait for
    *wait* (at most *timeout* seconds). Each gate fires once.
    """

    def __init__(
        self,
        board: str,
        namespace: str,
        gates: list[dict[str, Any]],
        timeout: float = GATE_TIMEOUT,
    ) -> None:
        self.board = board
        self.namespace = namespace
        self.gates = [dict(g) for g in gates]
        self.timeout = timeout
        self.fired: set[int] = set()

    def _fire(self, phase: str, texts: list[str]) -> None:
        ray = ray_module()
        for i, gate in enumerate(self.gates):
            if i in self.fired or gate.get("phase") != phase:
                continue
            if not any(str(gate.get("match", "")) in t for t in texts):
                continue
            self.fired.add(i)
            board = ray.get_actor(self.board, namespace=self.namespace)
            if gate.get("signal"):
                ray.get(board.signal.remote(gate["signal"]))
            if gate.get("wait"):
                ray.get(board.wait.remote(gate["wait"], self.timeout))

    def before_commit(self, loop: AgentLoop, turn: ModelTurn, compiled: CompiledInput) -> None:
        """Fire the ``before`` gates that match the turn's transactions."""
        self._fire("before", list(turn.transactions))

    def after_commit(self, loop: AgentLoop, turn: ModelTurn, receipts: list[Receipt]) -> None:
        """Fire the ``after`` gates that match a committed transaction of the turn."""
        committed = [tx for tx, r in zip(turn.transactions, receipts, strict=False) if r.committed]
        self._fire("after", committed)


_HOOKS_CHECK: type[StepHooks] = BoardGates  # BoardGates satisfies the protocol


class AgentLoopActor:
    """An agent thread as an actor: an :class:`AgentLoop` with a scripted model, over Ray.

    Plain class, run with ``ray.remote``. It finds the context actor by name,
    so it can run anywhere in the cluster. *story* names the scripted model
    (:data:`agents.scripted.POLICIES`); *gates* stage races through the
    *board* actor (:class:`BoardGates`); every step is reported to the board
    when one is named.
    """

    def __init__(
        self,
        context: str,
        namespace: str,
        story: str,
        session: str,
        thread: str,
        config: dict[str, Any] | None = None,
        board: str | None = None,
        gates: list[dict[str, Any]] | None = None,
    ) -> None:
        from actors.client.lookup import lookup

        self.handle = lookup(context, namespace)
        self.board = board
        self.namespace = namespace
        self.gates = list(gates or [])
        hooks: StepHooks | None = None
        if board is not None and self.gates:
            hooks = BoardGates(board, namespace, self.gates)
        self.loop = AgentLoop(
            self.handle,
            scripted_model(story),
            session=session,
            thread=thread,
            config=CompilerConfig.model_validate(config or {}),
            hooks=hooks,
        )

    def run(self, max_steps: int = 32) -> list[dict[str, Any]]:
        """Run the loop; every step's JSON form (also reported to the board as it happens)."""
        board = None
        if self.board is not None:
            board = ray_module().get_actor(self.board, namespace=self.namespace)
        out = []
        for _ in range(max_steps):
            try:
                r = self.loop.step()
            except MorphzError as e:
                r = StepResult(
                    thread=self.loop.thread, session=self.loop.session, step=-1, idle=True
                )
                r.error = f"{e.code}: {e.message}"
            doc = r.to_dict()
            out.append(doc)
            if board is not None:
                board.report.remote(doc)
            if r.done:
                break
        if board is not None:
            board.report.remote({"thread": self.loop.thread, "finished": True})
        return out

    def deferred(self) -> list[str]:
        """Names of the tool calls still deferred."""
        return [c.name for c in self.loop.deferred]


__all__ = ["GATE_TIMEOUT", "AgentLoopActor", "BoardGates"]
