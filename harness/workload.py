"""The synthetic workload of the load test: agent threads sharing one context, pure, no Ray.

It is a load generator, not part of the runtime: :class:`~harness.agent_threads.AgentThread`
interprets it through the context actors' public client, and nothing in the
runtime packages imports it.

Each logical thread ``t<k>`` runs ``transactions`` steps. A step is chosen by a
seeded random generator (seed and thread number), so a plan is reproducible:

* ``shared`` (probability ``conflict_rate``): write one of the shared frames
  ``shared/release`` or ``shared/plan-<i>`` — derive it on first touch, revise
  it afterwards — citing the thread's ``t<k>/note-0`` when it exists and
  relating it (``supports``) to the shared frame. Threads collide here.
* ``observe`` (``observe_rate``): record a tool result and claim the inputs in one
  call (``observe_and_claim``: one cognitive tick), then derive or revise
  ``t<k>/log`` from the observation and retire the observation in the same
  transaction.
* ``relate`` (``relate_rate``): relate two of the thread's own notes
  (``refines``), deriving whichever does not exist yet.
* ``note`` (the rest): derive or revise one of the thread's notes
  ``t<k>/note-<j>``.

:func:`build_tx` turns a step into a transaction from what the thread last read
(which frames exist) and the version it read them at: the transaction is based
on that version, so when other threads committed meanwhile it is rebased (no
overlap) or rejected (overlap), and the thread rebuilds it from what the
rejection's receipt carries (its version and the conflicting frames as they
stand now), re-reading only when the receipt cannot tell (``too_old``).
Its models are built without running their validators (``model_construct``):
what it builds is valid by construction (``tests/harness/test_workload.py``
validates every kind of step's transaction against the checked models), the
context actor validates every transaction it decodes, and the checks cost an
agent thread more CPU per step than the rest of its bookkeeping
(docs/loadtest.md, "Where the agent's CPU goes").
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from actors.client.names import DEFAULT_NAMESPACE
from protocol.forms import Symbol
from protocol.tx import ContextTx, Derive, Relate, Retire, Revise

StepKind = Literal["note", "relate", "shared", "observe"]
RETRY_CODES = frozenset({"conflict", "too_old"})
"""Rejections an agent thread answers by re-reading and rebuilding the transaction."""


class WorkloadSpec(BaseModel):
    """What one :class:`~harness.agent_threads.AgentThread` runs (``AgentThread.run(spec)``).

    ``threads`` logical threads run as asyncio tasks in one actor process,
    named ``t<first_thread>`` … ``t<first_thread + threads - 1>``; give each
    actor a distinct ``first_thread`` so names stay unique across actors.
    ``reread_own`` false: a step on the thread's own frames only (which no other
    thread writes) is not read first; it is based on the version the thread last read
    or committed at (``read_every`` still applies to steps on shared frames).
    ``pipeline`` is how many of a thread's steps may be in flight at once; a step
    waits for the steps in flight that touch any of its frames (1: one at a time).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    context: str
    namespace: str = DEFAULT_NAMESPACE
    threads: int = Field(default=1, ge=1, le=1024)
    first_thread: int = Field(default=0, ge=0, le=1 << 20)
    transactions: int = Field(default=10, ge=0, le=1_000_000)
    conflict_rate: float = Field(default=0.1, ge=0.0, le=1.0)
    observe_rate: float = Field(default=0.1, ge=0.0, le=1.0)
    relate_rate: float = Field(default=0.15, ge=0.0, le=1.0)
    shared_plans: int = Field(default=4, ge=0, le=64)
    notes: int = Field(default=4, ge=2, le=1024)
    read_every: int = Field(default=1, ge=1, le=1_000_000)
    reread_own: bool = True
    max_attempts: int = Field(default=5, ge=1, le=100)
    backoff_ms: float = Field(default=5.0, ge=0.0, le=60_000.0)
    backoff_max_ms: float = Field(default=200.0, ge=0.0, le=600_000.0)
    think_ms: float = Field(default=0.0, ge=0.0, le=60_000.0)
    pipeline: int = Field(default=1, ge=1, le=64)
    timeout_s: float | None = Field(default=None, gt=0.0)
    seed: int = 0


@dataclass(frozen=True, slots=True)
class Step:
    """One unit of work of a thread: what it writes (``target``) and what else it touches."""

    thread: str
    index: int
    kind: StepKind
    target: str
    other: str | None = None

    def frames(self) -> tuple[str, ...]:
        """The frames the thread must read before building this step's transaction."""
        return (self.target,) if self.other is None else (self.target, self.other)


def thread_name(number: int) -> str:
    """The name of logical thread *number*: ``t<number>``."""
    return f"t{number}"


def shared_frames(spec: WorkloadSpec) -> tuple[str, ...]:
    """The frames every thread may write: ``shared/release`` and ``shared/plan-<i>``."""
    return ("shared/release",) + tuple(f"shared/plan-{i}" for i in range(spec.shared_plans))


def plan_thread(spec: WorkloadSpec, number: int) -> list[Step]:
    """The steps of logical thread *number*, reproducible from ``spec.seed``."""
    rng = random.Random(f"{spec.seed}:{number}")
    name = thread_name(number)
    shared = shared_frames(spec)
    steps: list[Step] = []
    for i in range(spec.transactions):
        roll = rng.random()
        if roll < spec.conflict_rate:
            steps.append(Step(name, i, "shared", rng.choice(shared), f"{name}/note-0"))
            continue
        roll = rng.random()
        if roll < spec.observe_rate:
            steps.append(Step(name, i, "observe", f"{name}/log"))
        elif roll < spec.observe_rate + spec.relate_rate:
            a, b = rng.sample(range(spec.notes), 2)
            steps.append(Step(name, i, "relate", f"{name}/note-{a}", f"{name}/note-{b}"))
        else:
            steps.append(Step(name, i, "note", f"{name}/note-{rng.randrange(spec.notes)}"))
    return steps


def _write(
    frame: str, exists: bool, body: tuple[object, ...], sources: tuple[str, ...] = ()
) -> Derive | Revise:
    if exists:
        return Revise.model_construct(id=frame, sources=sources, body=body)
    return Derive.model_construct(id=frame, sources=sources, body=body)


def build_tx(
    step: Step,
    known: Mapping[str, bool],
    base_version: int,
    client_id: str,
    *,
    event_ref: str | None = None,
) -> ContextTx:
    """The transaction of *step*, given which frames exist (*known*) at *base_version*.

    ``observe`` steps need the reference of the observation recorded for them.
    """
    S = Symbol
    stamp = (S("by"), S(step.thread), S("step"), step.index)
    ops: list[Derive | Revise | Relate | Retire] = []
    if step.kind == "note":
        ops.append(_write(step.target, known.get(step.target, False), ((S("note"), *stamp),)))
    elif step.kind == "relate":
        assert step.other is not None
        for frame in (step.target, step.other):
            if not known.get(frame, False):
                ops.append(Derive.model_construct(id=frame, body=((S("note"), *stamp),)))
        ops.append(Relate.model_construct(subject=step.target, label="refines", object=step.other))
    elif step.kind == "shared":
        assert step.other is not None
        has_note = known.get(step.other, False)
        sources = (step.other,) if has_note else ()
        body = ((S("owner"), S(step.thread)), (S("stage"), S("step"), step.index))
        ops.append(_write(step.target, known.get(step.target, False), body, sources))
        if has_note:
            ops.append(
                Relate.model_construct(subject=step.other, label="supports", object=step.target)
            )
    else:
        if event_ref is None:
            raise ValueError("an observe step needs the reference of its observation")
        observed = ((S("observed"), *stamp),)
        ops.append(_write(step.target, known.get(step.target, False), observed, (event_ref,)))
        ops.append(Retire.model_construct(refs=(event_ref,)))
    return ContextTx.model_construct(
        base_version=base_version,
        reason=f"{step.thread} step {step.index} ({step.kind})",
        client_id=client_id,
        ops=tuple(ops),
    )


def written_frames(tx: ContextTx) -> list[str]:
    """Frames a committed *tx* derived or revised: they exist afterwards."""
    return [op.id for op in tx.ops if isinstance(op, (Derive, Revise))]


def footprint_keys(tx: ContextTx) -> list[str]:
    """The transaction's footprint (R22): reads and writes, as one sorted list of keys."""
    reads, writes = tx.footprint()
    return sorted(reads | writes)
