"""Ray actors: context actors and their client handles, in three packages.

* :mod:`actors.client` — what a caller needs: the transport, the handle
  (:class:`ContextHandle`), :func:`lookup`, the reply envelope and the names
  every side shares (:mod:`actors.client.names`). It never imports the other two.
* :mod:`actors.server` — the context actor and what runs inside it,
  :func:`connect`, which starts one, and the context hosts (:func:`start_host`:
  one process serving many contexts, activated on demand). It never imports the cluster side;
  replication reaches it through a hook it is given.
* :mod:`actors.cluster` — the context directory, :func:`place`, the followers
  and the failover supervisor.

The names below are loaded when first used (module ``__getattr__``), so
``import actors`` loads none of the three packages, and importing one of them
loads only what it imports. Nothing imports Ray before a Ray call runs, so the
store commands (``morphz state`` …) never pay Ray's import time. See
docs/actors.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from actors.client.handle import ContextHandle, new_client_id
    from actors.client.lookup import lookup
    from actors.client.names import ContextEntry, Member
    from actors.client.nodes import current_node_id, node_with_resource
    from actors.client.transport import RetryPolicy
    from actors.cluster.directory_handle import directory
    from actors.cluster.placing import place
    from actors.server.connect import connect
    from actors.server.context_actor import ContextActor
    from actors.server.hosting import HostHandle, start_host

__all__ = [
    "ContextActor",
    "ContextEntry",
    "ContextHandle",
    "HostHandle",
    "Member",
    "RetryPolicy",
    "connect",
    "current_node_id",
    "directory",
    "lookup",
    "new_client_id",
    "node_with_resource",
    "place",
    "start_host",
]


def __getattr__(name: str) -> Any:
    """Load an exported name from its home module on first use (then keep it here)."""
    value: Any
    if name in ("ContextHandle", "new_client_id"):
        from actors.client import handle

        value = getattr(handle, name)
    elif name in ("ContextEntry", "Member"):
        from actors.client import names

        value = getattr(names, name)
    elif name in ("current_node_id", "node_with_resource"):
        from actors.client import nodes

        value = getattr(nodes, name)
    elif name == "RetryPolicy":
        from actors.client.transport import RetryPolicy as value
    elif name == "lookup":
        from actors.client.lookup import lookup as value
    elif name == "connect":
        from actors.server.connect import connect as value
    elif name in ("HostHandle", "start_host"):
        from actors.server import hosting

        value = getattr(hosting, name)
    elif name == "ContextActor":
        from actors.server.context_actor import ContextActor as value
    elif name == "directory":
        from actors.cluster.directory_handle import directory as value
    elif name == "place":
        from actors.cluster.placing import place as value
    else:
        raise AttributeError(f"module 'actors' has no attribute {name!r}")
    globals()[name] = value
    return value
