"""What a load test is asked to run: :class:`LoadtestOptions` and their validation."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from actors.client.handle import DEFAULT_NAMESPACE
from harness.loadtest.nemeses import FAULTS
from protocol.errors import RequestError

Progress = Callable[[Mapping[str, Any]], None]
"""Called about twice a second while the load runs (see :func:`harness.loadtest.run_loadtest`)."""
Tamper = Callable[[str, list[dict[str, Any]]], list[dict[str, Any]]]
"""Given a context's name and its records, the records to check (a test seam)."""


DEFAULT_FAULT_FOR = 3.0
"""Seconds a fault lasts unless told."""


class NemesisRun(BaseModel):
    """The nemesis a load test runs: every ``every_s`` seconds, a fault of ``kind`` (a
    name of :data:`harness.loadtest.nemeses.FAULTS`) lasting ``for_s`` seconds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str
    every_s: float = Field(gt=0.0)
    for_s: float = Field(default=DEFAULT_FAULT_FOR, gt=0.0, le=3600.0)

    @model_validator(mode="after")
    def _known(self) -> NemesisRun:
        if self.kind not in FAULTS:
            raise ValueError(f"kind must be one of {', '.join(FAULTS)}")
        if self.for_s >= self.every_s:
            raise ValueError("a fault must last less than its period")
        return self


class LoadtestOptions(BaseModel):
    """What to run; exactly one of ``duration_s`` and ``transactions`` bounds it.

    ``transactions`` counts workload steps in all threads together (each step
    is one transaction, submitted again after a conflict). ``conversations``
    limits how many trajectories are replayed. ``shared_frames`` is how many
    frames the synthetic threads share (``shared/release`` and
    ``shared/plan-<i>``); one makes every shared step contend. ``agents`` is the number of
    agent actors (default: one per thread, at most 32; past 32 threads the threads
    share them). ``baseline`` also measures, in the same run and just before the
    load, bare Ray clients calling a no-op actor (:mod:`harness.loadtest.baseline`).
    ``pipeline`` is how many steps each synthetic thread keeps in flight (steps
    touching the same frame wait for each other). ``reread_own`` makes a synthetic
    thread read before every step, also one on its own frames only (which no other
    thread writes; by default it bases those on what it last read or committed).
    ``trajectories_dir`` is where the STATE-Bench trajectories are for the
    ``trajectories`` workload (None: the ``MORPHZ_TRAJECTORIES`` environment
    variable, see :func:`~harness.loadtest.trajectories.trajectories_dir`).
    ``shared_mode`` is how a trajectory step writes its domain's shared frame:
    ``replace`` revises its whole body with the step's note, ``list`` appends the
    note to the frame's ``(seen …)`` list by read-modify-write (a ``revise`` of the
    whole list, based on the read), ``fields`` appends it with
    ``(append shared/<domain> (seen NOTE))`` (no read; never refused for concurrency).
    ``store_dir`` is where the contexts' stores go; None (the default) makes a
    temporary directory, removed after the run (kept with ``keep``).
    ``followers`` is each context's number of followers (docs/cluster.md).
    ``kill_node_every_s`` makes the run start its own cluster of ``nodes``
    nodes on this machine (``ray.cluster_utils.Cluster``, each node's stores
    under ``<store_dir>/node-<i>``) and remove a non-head node and add it back
    every that many seconds. ``nemesis`` (:class:`NemesisRun`) is a fault of
    :mod:`harness.loadtest.nemeses` done every so often (a replicated context's primary
    paused, or cut off from its followers and the supervisor); it starts the run's own
    cluster too, and needs ``followers``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    threads: int = Field(ge=1, le=4096)
    contexts: int = Field(default=1, ge=1, le=256)
    duration_s: float | None = Field(default=None, gt=0.0, le=7 * 86400.0)
    transactions: int | None = Field(default=None, ge=1, le=1_000_000_000)
    conflict_rate: float = Field(default=0.1, ge=0.0, le=1.0)
    shared_frames: int = Field(default=1, ge=1, le=65)
    shared_mode: Literal["replace", "list", "fields"] = "replace"
    workload: Literal["synthetic", "trajectories"] = "synthetic"
    trajectories_dir: str | None = None
    conversations: int | None = Field(default=None, ge=1)
    kill_every_s: float | None = Field(default=None, gt=0.0)
    followers: int = Field(default=0, ge=0, le=8)
    kill_node_every_s: float | None = Field(default=None, gt=0.0)
    nemesis: NemesisRun | None = None
    nodes: int = Field(default=3, ge=2, le=16)
    address: str | None = None
    store_dir: str | None = None
    seed: int = 0
    agents: int | None = Field(default=None, ge=1, le=256)
    namespace: str = Field(default=DEFAULT_NAMESPACE, min_length=1)
    keep: bool = False
    baseline: bool = False
    pipeline: int = Field(default=1, ge=1, le=64)
    reread_own: bool = False
    run_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_\-]{1,32}$")

    @model_validator(mode="after")
    def _one_bound(self) -> LoadtestOptions:
        if (self.duration_s is None) == (self.transactions is None):
            raise ValueError("give exactly one of duration_s and transactions")
        if self.kill_node_every_s is not None and self.address is not None:
            raise ValueError(
                "kill_node_every_s runs on a test cluster of this machine: give no address"
            )
        if self.pipeline > 1 and self.workload != "synthetic":
            raise ValueError("pipeline applies to the synthetic workload only")
        if self.followers >= self.nodes and self.own_cluster:
            raise ValueError(f"followers must be below nodes ({self.nodes})")
        if self.nemesis is not None:
            if self.kill_node_every_s is not None:
                raise ValueError("give one of kill_node_every_s and nemesis")
            if self.address is not None:
                raise ValueError(
                    "a nemesis runs on a test cluster of this machine: give no address"
                )
            if not self.followers:
                raise ValueError("a nemesis faults a replicated primary: give followers")
        return self

    @property
    def own_cluster(self) -> bool:
        """True if the run starts its own test cluster (node removals or a nemesis)."""
        return self.kill_node_every_s is not None or self.nemesis is not None


def check_options(options: LoadtestOptions | Mapping[str, Any]) -> LoadtestOptions:
    """The validated options; :class:`RequestError` (``bad_option``) naming the bad field."""
    if isinstance(options, LoadtestOptions):
        return options
    try:
        return LoadtestOptions.model_validate(dict(options))
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err.get("loc", ())) or "options"
        raise RequestError(
            f"bad load test option: {where}: {err.get('msg')}", code="bad_option"
        ) from e


# --- trajectories -------------------------------------------------------------
