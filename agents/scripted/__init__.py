"""A deterministic scripted model for tests and demos (R38), and the seed stories as policies.

* :mod:`agents.scripted.scene` — what a model reads in a compiled input
  (:class:`Scene`, :func:`read_scene`);
* :mod:`agents.scripted.model` — :class:`ScriptedModel`, which follows a
  policy (a function of the input, or a list of steps), and the builders of
  its turns (:func:`first_match`, :func:`build_tx`, :func:`tool`, …);
* :mod:`agents.scripted.stories` — the seed stories as policies
  (:func:`release_policy`, :func:`deployment_policy`,
  :func:`consolidation_policy`, :func:`pause_policy`) and
  :func:`scripted_model`, a story's model by name.

All are pure and deterministic. Nothing here imports Ray.
"""

from agents.scripted.model import (
    Policy,
    PolicyFn,
    Rule,
    ScriptedModel,
    Step,
    build_tx,
    fact,
    first_match,
    sym,
    tool,
)
from agents.scripted.scene import FrameView, Observation, Scene, message_text, read_scene
from agents.scripted.stories import (
    POLICIES,
    consolidation_policy,
    deployment_policy,
    pause_policy,
    release_policy,
    scripted_model,
    sweep_rule,
)

__all__ = [
    "POLICIES",
    "FrameView",
    "Observation",
    "Policy",
    "PolicyFn",
    "Rule",
    "Scene",
    "ScriptedModel",
    "Step",
    "build_tx",
    "consolidation_policy",
    "deployment_policy",
    "fact",
    "first_match",
    "message_text",
    "pause_policy",
    "read_scene",
    "release_policy",
    "scripted_model",
    "sweep_rule",
    "sym",
    "tool",
]
