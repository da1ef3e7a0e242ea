"""The scripted model (R38): a :class:`~protocol.turns.Model` that follows a policy.

:class:`ScriptedModel` answers a :class:`~protocol.turns.CompiledInput` by
following a *policy*, which is either

* a **function** of the compiled input returning a :class:`~protocol.turns.ModelTurn`
  (or ``None``: nothing to do, a ``done`` turn); :func:`first_match` builds one
  from *rules* (functions of a :class:`~agents.scripted.scene.Scene` tried in
  order), or
* a **list of steps** played in order, one per call: each step is a fixed
  ``ModelTurn`` or a function of the scene (so it can read the base version
  and the refs); after the last step every call is a ``done`` turn.

In maintenance mode (R32) a scripted model never emits an external tool
action: the model drops any the policy returns. :func:`sym`, :func:`fact`,
:func:`build_tx` and :func:`tool` build the parts of a turn. Deterministic;
nothing here imports Ray.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

from agents.scripted.scene import Scene, read_scene
from protocol.forms import Form, Symbol
from protocol.turns import CompiledInput, ModelTurn, ToolCall
from protocol.tx import ContextTx
from protocol.txlang import print_tx

# -- building answers -------------------------------------------------------


def sym(text: str) -> Symbol:
    """An atom."""
    return Symbol(text)


def fact(name: str, *values: Form) -> tuple[Form, ...]:
    """The form ``(name value…)``; plain ``str`` values that are not atoms stay strings."""
    return (Symbol(name), *values)


def build_tx(scene: Scene, reason: str | None, *ops: Any) -> str:
    """The canonical text of a transaction based on the scene's version."""
    return print_tx(ContextTx(base_version=scene.version, reason=reason, ops=tuple(ops)))


def tool(name: str, scene: Scene, **arguments: Any) -> ToolCall:
    """An external tool call with a deterministic call id."""
    return ToolCall(name=name, arguments=arguments, call_id=f"{name}-v{scene.version}")


Rule: TypeAlias = Callable[[Scene], ModelTurn | None]
"""A rule answers a scene with a turn, or None when it does not apply."""
Step: TypeAlias = ModelTurn | Callable[[Scene], ModelTurn | None]
PolicyFn: TypeAlias = Callable[[CompiledInput], ModelTurn | None]
Policy: TypeAlias = PolicyFn | Sequence[Step]


def first_match(*rules: Rule) -> PolicyFn:
    """A policy that reads the scene and answers with the first rule that applies."""

    def policy(compiled: CompiledInput) -> ModelTurn | None:
        scene = read_scene(compiled)
        for rule in rules:
            turn = rule(scene)
            if turn is not None:
                return turn
        return None

    return policy


_DONE = ModelTurn(finish="done")


class ScriptedModel:
    """A :class:`protocol.turns.Model` that follows a policy (see the module docstring).

    ``calls`` counts the calls answered. In maintenance mode an external tool
    action returned by the policy is dropped (transactions and memory calls
    stay); a turn left empty becomes ``done``.
    """

    def __init__(self, policy: Policy) -> None:
        if callable(policy):
            self._fn: PolicyFn | None = policy
            self._steps: tuple[Step, ...] = ()
        elif isinstance(policy, Sequence) and not isinstance(policy, (str, bytes)):
            for step in policy:
                if not (isinstance(step, ModelTurn) or callable(step)):
                    raise TypeError(f"a step is a ModelTurn or a function, not {step!r}")
            self._fn = None
            self._steps = tuple(policy)
        else:
            raise TypeError("a policy is a function of the compiled input or a list of steps")
        self.calls = 0

    def respond(self, compiled: CompiledInput, tools: tuple[dict[str, Any], ...]) -> ModelTurn:
        """The policy's turn for *compiled*; ``tools`` is not consulted."""
        index = self.calls
        self.calls += 1
        if self._fn is not None:
            turn = self._fn(compiled)
        elif index < len(self._steps):
            step = self._steps[index]
            turn = step if isinstance(step, ModelTurn) else step(read_scene(compiled))
        else:
            turn = None
        if turn is None:
            return _DONE
        action = turn.action
        if (
            compiled.capacity.maintenance
            and isinstance(action, ToolCall)
            and not action.is_memory_tool
        ):
            if not turn.transactions and not turn.memory_calls:
                return _DONE
            turn = turn.model_copy(update={"action": None})
        return turn


__all__ = [
    "Policy",
    "PolicyFn",
    "Rule",
    "ScriptedModel",
    "Step",
    "build_tx",
    "fact",
    "first_match",
    "sym",
    "tool",
]
