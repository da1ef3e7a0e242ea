"""Ray actors: context actors, agent threads and their client handles.

Importing this package does not import Ray: every Ray call imports it when it
runs, so the store commands (``morphz state`` …) never pay Ray's import time.
See docs/actors.md.
"""

from actors.agent import AgentThread, decode_records, run_agents, spawn_agent
from actors.client import ContextHandle, RetryPolicy, connect, lookup, new_client_id
from actors.context_actor import ContextActor
from actors.placement import current_node_id, node_with_resource
from actors.workload import Step, WorkloadSpec, build_tx, plan_thread

__all__ = [
    "AgentThread",
    "ContextActor",
    "ContextHandle",
    "RetryPolicy",
    "Step",
    "WorkloadSpec",
    "build_tx",
    "connect",
    "current_node_id",
    "decode_records",
    "lookup",
    "new_client_id",
    "node_with_resource",
    "plan_thread",
    "run_agents",
    "spawn_agent",
]
