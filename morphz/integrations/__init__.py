"""Adapters that let other agent frameworks keep their memory in a Morphz context.

Each adapter is a submodule that imports its framework itself, so ``import morphz``
needs none of them: ``from morphz.integrations.langgraph import MorphzStore``
(installed by the ``morphz[langgraph]`` extra).
"""

__all__: list[str] = []
