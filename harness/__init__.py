"""The harness around the runtime: load test, workload, agent threads, history checker, demo.

- :mod:`harness.workload` — the synthetic workload (pure: plans and transactions);
- :mod:`harness.agent_threads` — :class:`AgentThread`, the actor that runs it
  against context actors through their public client;
- :mod:`harness.loadtest` — ``morphz loadtest``: many agent threads, kills,
  every history checked;
- :mod:`harness.checker` — the concurrency history checker;
- :mod:`harness.demo` — ``morphz demo``: the seed stories run at once.

Nothing in the runtime packages (protocol, storage, service, actors, agents)
imports this package. Ray is imported only inside the functions that use it.
"""

from harness.agent_threads import AgentThread, decode_records, run_agents, spawn_agent
from harness.checker import Submission, Verdict, Violation, check_history
from harness.demo import run_demo
from harness.loadtest import LoadtestOptions, run_loadtest
from harness.workload import Step, WorkloadSpec, build_tx, plan_thread

__all__ = [
    "AgentThread",
    "LoadtestOptions",
    "Step",
    "Submission",
    "Verdict",
    "Violation",
    "WorkloadSpec",
    "build_tx",
    "check_history",
    "decode_records",
    "plan_thread",
    "run_agents",
    "run_demo",
    "run_loadtest",
    "spawn_agent",
]
