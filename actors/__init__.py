"""Ray actors: context actors and their client handles.

Importing this package does not import Ray: every Ray call imports it when it
runs, so the store commands (``morphz state`` …) never pay Ray's import time.
See docs/actors.md.
"""

from actors.client.handle import ContextHandle, RetryPolicy, new_client_id
from actors.cluster.connection import connect, lookup, place
from actors.cluster.directory import ContextEntry, Member, directory
from actors.cluster.placement import current_node_id, node_with_resource
from actors.server.context_actor import ContextActor

__all__ = [
    "ContextActor",
    "ContextEntry",
    "ContextHandle",
    "Member",
    "RetryPolicy",
    "connect",
    "current_node_id",
    "directory",
    "lookup",
    "new_client_id",
    "node_with_resource",
    "place",
]
