"""Load tests of context actors: many agent threads, optional kills, every history checked.

:func:`run_loadtest` is what ``morphz loadtest`` runs (see docs/loadtest.md):

1. connect to Ray (``address``, else ``RAY_ADDRESS``, else a new local cluster;
   a process already connected keeps its connection);
2. create ``contexts`` context actors ``lt-<run id>-<i>`` serving stores under
   ``store_dir``, spread over the nodes of this machine (a store is a local
   directory), and a few :class:`LoadAgent` actors spread over every node;
3. spread ``threads`` logical agent threads over the contexts (contiguous
   ranges ``t<k>``, context by context) and over the agents, and run the
   workload for ``duration_s`` seconds or ``transactions`` steps in all:

   * ``synthetic`` — :mod:`harness.workload`, with ``conflict_rate`` the share
     of steps that write frames other threads also write;
   * ``trajectories`` — the STATE-Bench agent conversations replayed as
     observations (:meth:`LoadAgent.replay`), read from the directory given
     as ``trajectories_dir`` or in ``MORPHZ_TRAJECTORIES`` (never guessed);

4. meanwhile, with ``kill_every_s``, SIGKILL one context actor's process every
   that many seconds (only actors on this machine; Ray restarts them);
5. hold each context's recorded submissions against what it kept
   (:meth:`~actors.client.handle.ContextHandle.export`) with
   :func:`harness.checker.check_history`, and read every acknowledged commit
   back from the store on disk;
6. answer one dict of figures (:data:`REPORT_KEYS`), ``history_ok`` true when
   no check found a violation.

The modules: :mod:`~harness.loadtest.options` (what to run),
:mod:`~harness.loadtest.trajectories` (the data), :mod:`~harness.loadtest.agent`
(the agent actor), :mod:`~harness.loadtest.cluster` (Ray, nodes, kills),
:mod:`~harness.loadtest.run` (the run), :mod:`~harness.loadtest.checks` and
:mod:`~harness.loadtest.report` (the verdict and the figures).

Ray is imported inside the functions that use it, never at module import.
"""

from harness.loadtest.agent import ROUND_STEPS, LoadAgent, TrajectorySpec, TrajectoryThread
from harness.loadtest.checks import (
    CHECK_RETRY,
    ContextCheck,
    check_after_run,
    check_context,
    check_on_disk,
    submissions_of,
)
from harness.loadtest.options import LoadtestOptions, Progress, Tamper, check_options
from harness.loadtest.report import REPORT_KEYS, conflict_counts, figures, percentile
from harness.loadtest.run import default_agents, run_loadtest, spread
from harness.loadtest.trajectories import (
    TRAJECTORIES_ENV,
    Conversation,
    NoTrajectories,
    ToolCall,
    Turn,
    load_conversations,
    trajectories_dir,
)

__all__ = [
    "CHECK_RETRY",
    "ContextCheck",
    "Conversation",
    "LoadAgent",
    "LoadtestOptions",
    "NoTrajectories",
    "Progress",
    "REPORT_KEYS",
    "ROUND_STEPS",
    "TRAJECTORIES_ENV",
    "Tamper",
    "ToolCall",
    "TrajectorySpec",
    "TrajectoryThread",
    "Turn",
    "check_after_run",
    "check_context",
    "check_on_disk",
    "check_options",
    "conflict_counts",
    "default_agents",
    "figures",
    "load_conversations",
    "percentile",
    "run_loadtest",
    "spread",
    "submissions_of",
    "trajectories_dir",
]
