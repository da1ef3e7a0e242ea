"""The agent runtime: the agent loop, its memory tools, external actions, model clients and the
scripted model.

* :mod:`agents.loop` — :class:`AgentLoop`: claim, compile, ask the model, commit, act, trace;
* :mod:`agents.port` — :class:`ContextPort`, what the loop needs of a context, and
  :class:`EmbeddedPort` over an embedded context (a Ray ``ContextHandle`` is the other);
* :mod:`agents.tools` — the memory tools (``context_tx``, ``recall``, ``search``,
  ``read_event``): specs, arguments and how a call is answered;
* :mod:`agents.actions` — :class:`ToolRunner`, external tools and the ledger of
  irreversible actions;
* :mod:`agents.models` — :class:`OpenAIChatModel`, a client for OpenAI-compatible endpoints;
* :mod:`agents.scripted` — :class:`ScriptedModel` and the seed stories as policies;
* :mod:`agents.actor` — :class:`AgentLoopActor`, a loop with a scripted model run as a Ray actor.

Importing this package does not import Ray.
"""

from agents.actions import DEMO_TOOL_RESULTS, ToolFailed, ToolOutcome, ToolRunner, key_event_id
from agents.actor import AgentLoopActor, BoardGates
from agents.loop import AgentLoop, StepHooks, StepResult, describe_action, usage_trace
from agents.models import ModelConfig, OpenAIChatModel, is_overflow, parse_answer
from agents.port import ContextPort, EmbeddedPort
from agents.scripted import POLICIES, Scene, ScriptedModel, first_match, read_scene, scripted_model
from agents.tools import MEMORY_TOOL_SPECS, MemoryAnswer, answer_memory_call, external_tool_specs

__all__ = [
    "AgentLoop",
    "AgentLoopActor",
    "BoardGates",
    "ContextPort",
    "DEMO_TOOL_RESULTS",
    "EmbeddedPort",
    "MEMORY_TOOL_SPECS",
    "MemoryAnswer",
    "ModelConfig",
    "OpenAIChatModel",
    "POLICIES",
    "Scene",
    "ScriptedModel",
    "StepHooks",
    "StepResult",
    "ToolFailed",
    "ToolOutcome",
    "ToolRunner",
    "answer_memory_call",
    "describe_action",
    "external_tool_specs",
    "first_match",
    "is_overflow",
    "key_event_id",
    "parse_answer",
    "read_scene",
    "scripted_model",
    "usage_trace",
]
