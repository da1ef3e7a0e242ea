"""Agent threads: actors that run a workload against a context by name and record what happened.

They generate load for tests, benchmarks and ``morphz loadtest``; they talk
to context actors only through the public client (:mod:`actors.client.handle`).
:class:`AgentThread` is a plain class run as an async Ray actor
(:func:`spawn_agent`). One actor hosts ``spec.threads`` logical threads as
asyncio tasks, so 32 threads need not be 32 processes on a small machine; each
logical thread is sequential (read, build, submit, wait) like a real agent.

The retry policy for rejected transactions (R24): on ``conflict`` the thread
rebuilds the transaction from the receipt alone (its ``version`` and the
conflicting frames as they stand now, ``current``: one round trip per
attempt), on ``too_old`` it re-reads the version and the frames it needs; it
submits again after a backoff with jitter, up to ``spec.max_attempts``
attempts. After a conflict the thread's base is the receipt's version, and
the frames other threads wrote since its old base (``changed_since_base``) are
known to exist, so its next read is still only due after ``spec.read_every``
steps. A rebuilt
transaction is a new transaction and gets a new client id; a resubmission after a lost reply (inside
:meth:`~actors.client.handle.ContextHandle.submit_async`) keeps the same id (R25).
Any other rejection is final for that step.

Each submission attempt yields one record (a dict, see :data:`RECORD_KEYS`);
``run`` returns ``protocol.wire.pack(records)``.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from actors.client.handle import DEFAULT_NAMESPACE, ContextHandle, new_client_id
from actors.client.lookup import lookup
from actors.client.nodes import current_node_id, ensure_ray, pinned
from harness.workload import (
    RETRY_CODES,
    Step,
    WorkloadSpec,
    build_tx,
    footprint_keys,
    plan_thread,
    written_frames,
)
from protocol.errors import MorphzError, RequestError, StoreError, WireError
from protocol.receipts import MAX_CHANGES_LISTED, Receipt
from protocol.wire import pack, unpack

RECORD_KEYS = (
    "client_id",
    "thread",
    "step",
    "kind",
    "attempt",
    "base_version",
    "footprint",
    "outcome",
    "version",
    "rebased",
    "duplicate",
    "conflicts",
    "error_code",
    "latency_ms",
)
"""Keys of a submission record. ``outcome`` is ``committed``, ``rejected``, ``unknown``
(the actor could not be reached: the transaction may or may not have committed) or
``skipped`` (the step could not read the context; nothing was submitted, ``client_id``
is None). ``conflicts`` is ``[[id, version], …]``; ``version`` is the commit version,
or the context's version when rejected, or None."""


def check_spec(spec: Any) -> WorkloadSpec:
    """The validated workload spec; :class:`RequestError` naming the bad field otherwise."""
    if isinstance(spec, WorkloadSpec):
        return spec
    try:
        return WorkloadSpec.model_validate(spec)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err.get("loc", ())) or "spec"
        raise RequestError(f"bad workload spec: {where}: {err.get('msg')}", code="bad_spec") from e


def submission_record(step: Step | Any, attempt: int, **fields: Any) -> dict[str, Any]:
    """A submission record of *step* (anything with ``thread``, ``index`` and ``kind``)."""
    out: dict[str, Any] = {
        "client_id": None,
        "thread": step.thread,
        "step": step.index,
        "kind": step.kind,
        "attempt": attempt,
        "base_version": None,
        "footprint": [],
        "outcome": "skipped",
        "version": None,
        "rebased": False,
        "duplicate": False,
        "conflicts": [],
        "error_code": None,
        "latency_ms": 0.0,
    }
    out.update(fields)
    return out


class AgentThread:
    """Runs synthetic workloads against contexts found by name (see :mod:`harness.workload`)."""

    def __init__(self) -> None:
        self._handles: dict[tuple[str, str], ContextHandle] = {}
        self.bookkeeping_s = 0.0
        """CPU seconds spent on bookkeeping (see :meth:`costs`)."""
        self.calls = 0
        """Remote calls the synthetic threads made to contexts: submissions, reads,
        observations and claims (see :meth:`costs`)."""

    def _handle(self, context: str, namespace: str) -> ContextHandle:
        key = (context, namespace)
        if key not in self._handles:
            self._handles[key] = lookup(context, namespace)
        return self._handles[key]

    async def run(self, spec: dict[str, Any]) -> bytes:
        """Run *spec* (a :class:`WorkloadSpec` dict); answer ``pack(records)``.

        Records are grouped by logical thread, in submission order within a thread.
        """
        s = check_spec(spec)
        handle = self._handle(s.context, s.namespace)
        runs = [self._thread(handle, s, s.first_thread + i) for i in range(s.threads)]
        results = await asyncio.gather(*runs)
        return pack([record for records in results for record in records])

    async def _thread(
        self,
        handle: ContextHandle,
        spec: WorkloadSpec,
        number: int,
        steps: Iterable[Step] | None = None,
    ) -> list[dict[str, Any]]:
        """Run logical thread *number*: the steps of its plan, or *steps* (taken one at a
        time, as they come); its records."""
        if steps is None:
            clock = time.thread_time()
            steps = plan_thread(spec, number)
            self.bookkeeping_s += time.thread_time() - clock
        state = _ThreadState(
            rng=random.Random(f"{spec.seed}:{number}:backoff"), since_read=spec.read_every
        )
        if spec.pipeline == 1:
            for step in steps:
                await self._step(handle, spec, step, state)
            return state.records
        # Several steps in flight; a step waits for those in flight that touch its frames.
        flying: dict[asyncio.Task[None], frozenset[str]] = {}
        for step in steps:
            frames = frozenset(step.frames())
            while len(flying) >= spec.pipeline or any(frames & f for f in flying.values()):
                done, _ = await asyncio.wait(flying, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    del flying[task]
                    task.result()
            flying[asyncio.create_task(self._step(handle, spec, step, state))] = frames
        await asyncio.gather(*flying)
        return state.records

    async def _step(
        self, handle: ContextHandle, spec: WorkloadSpec, step: Step, state: _ThreadState
    ) -> None:
        """One step: observe first if it says so, read when due, build, submit, retry."""
        records, known = state.records, state.known
        event_ref: str | None = None
        if step.kind == "observe":
            try:
                text = f"{step.thread} step {step.index}: tool finished"
                self.calls += 1
                event = await handle.observe_and_claim.aio("tool_result", text, session=step.thread)
            except MorphzError as e:
                records.append(submission_record(step, 0, error_code=e.code))
                state.since_read = spec.read_every
                return
            event_ref = str(event["ref"])
        base = state.base
        for attempt in range(1, spec.max_attempts + 1):
            if _read_due(spec, step, state):
                self.calls += 1
                try:
                    snap = await handle.snapshot.aio(step.frames())
                except MorphzError as e:
                    records.append(submission_record(step, attempt, error_code=e.code))
                    state.since_read = spec.read_every
                    return
                base = state.base = max(state.base, int(snap["version"]))
                known.update({f: v is not None for f, v in snap["frames"].items()})
                state.since_read = 0
            if spec.think_ms:
                await asyncio.sleep(spec.think_ms / 1000)
            clock = time.thread_time()
            tx = build_tx(step, known, base, new_client_id(), event_ref=event_ref)
            fields: dict[str, Any] = {
                "client_id": tx.client_id,
                "base_version": base,
                "footprint": footprint_keys(tx),
            }
            self.bookkeeping_s += time.thread_time() - clock
            self.calls += 1
            started = time.perf_counter()
            try:
                receipt = await handle.submit_async(tx, timeout=spec.timeout_s)
            except MorphzError as e:
                latency = (time.perf_counter() - started) * 1000
                records.append(
                    submission_record(
                        step,
                        attempt,
                        **fields,
                        outcome="unknown",
                        error_code=e.code,
                        latency_ms=latency,
                    )
                )
                state.since_read = spec.read_every
                return
            latency = (time.perf_counter() - started) * 1000
            clock = time.thread_time()
            records.append(
                submission_record(step, attempt, **fields, **receipt_fields(receipt, latency))
            )
            self.bookkeeping_s += time.thread_time() - clock
            code = receipt.errors[0].code if receipt.errors else None
            if receipt.committed:
                for frame in written_frames(tx):
                    known[frame] = True
                state.since_read += 1
                state.base = max(state.base, receipt.version)
                return
            learned = learn(known, receipt)
            if learned is None:
                state.since_read = spec.read_every
            else:
                base = state.base = max(state.base, learned)
            if code not in RETRY_CODES or attempt == spec.max_attempts:
                return
            delay = min(spec.backoff_max_ms, spec.backoff_ms * 2 ** (attempt - 1))
            await asyncio.sleep(delay * (0.5 + state.rng.random()) / 1000)

    async def warm(self, context: str, namespace: str, calls: int) -> None:
        """Read *context* *calls* times, one read after the other, before a load: the
        handle, Ray's connection to the context actor and the code paths a step takes are
        warm when the load's clock starts, as the bare baseline's clients warm theirs.
        Reads only: the history a load is checked against is unchanged."""
        handle = self._handle(context, namespace)
        for _ in range(calls):
            await handle.snapshot.aio(["warm"])

    async def costs(self) -> dict[str, float]:
        """This process's CPU seconds so far (``cpu_s``: every thread, Ray's own included),
        its event loop's (``loop_cpu_s``: the thread every logical thread's Python runs
        on, as an async method answers on it), the CPU seconds its threads spent on the
        load test's own bookkeeping (``bookkeeping_s``: planning steps, building
        transactions and their footprints, recording submissions) and the remote
        ``calls`` its synthetic threads made."""
        return {
            "cpu_s": time.process_time(),
            "loop_cpu_s": time.thread_time(),
            "bookkeeping_s": self.bookkeeping_s,
            "calls": float(self.calls),
        }

    def node_id(self) -> str:
        """The id of the Ray node this agent runs on."""
        return current_node_id()

    def pid(self) -> int:
        """The agent's process id."""
        return os.getpid()


@dataclass
class _ThreadState:
    """What one logical thread knows between its steps: which frames exist, the version
    it last read (or learned from a rejection), steps since its last read, its records."""

    rng: random.Random
    since_read: int
    known: dict[str, bool] = field(default_factory=dict)
    base: int = 0
    records: list[dict[str, Any]] = field(default_factory=list)


def _read_due(spec: WorkloadSpec, step: Step, state: _ThreadState) -> bool:
    """Whether the thread reads before building *step*: when it does not know one of the
    step's frames, when ``read_every`` steps passed since its last read, or — unless
    ``spec.reread_own`` is false — before every step; with it false, a step on the
    thread's own frames only (which no other thread writes) is based on what the
    thread last read or committed, and a step on a shared frame still reads."""
    frames = step.frames()
    if state.since_read >= spec.read_every and spec.reread_own:
        return True
    if any(f not in state.known for f in frames):
        return True
    own = step.thread + "/"
    return state.since_read >= spec.read_every and not all(f.startswith(own) for f in frames)


def learn(known: dict[str, bool], receipt: Receipt) -> int | None:
    """What a ``conflict`` rejection tells a thread without a read: which frames exist
    (those written since its base, and the conflicting ones as they stand now), and the
    version to base the rebuilt transaction on; None when the thread must read again
    (another rejection, or more versions behind than the receipt lists)."""
    code = receipt.errors[0].code if receipt.errors else None
    if receipt.committed or code != "conflict" or not receipt.current:
        return None
    if receipt.version - receipt.base_version > MAX_CHANGES_LISTED:
        return None
    for c in receipt.changed_since_base:
        known[c.id] = True
    for f in receipt.current:
        known[f.id] = f.body is not None
    return receipt.version


def receipt_fields(receipt: Receipt, latency_ms: float) -> dict[str, Any]:
    """The outcome fields of a submission record, from its receipt."""
    return {
        "outcome": receipt.status,
        "version": receipt.version,
        "rebased": receipt.rebased,
        "duplicate": receipt.duplicate,
        "conflicts": [[c.id, c.version] for c in receipt.conflicts],
        "error_code": receipt.errors[0].code if receipt.errors else None,
        "latency_ms": latency_ms,
    }


def spawn_agent(
    *,
    node_id: str | None = None,
    name: str | None = None,
    namespace: str = DEFAULT_NAMESPACE,
    lifetime: str | None = None,
) -> Any:
    """Start an :class:`AgentThread` actor (no CPU reserved), pinned to *node_id* if given."""
    import ray

    ensure_ray()
    options: dict[str, Any] = {"num_cpus": 0, "max_concurrency": 1000, "namespace": namespace}
    if node_id is not None:
        options["scheduling_strategy"] = pinned(node_id)
    if name is not None:
        options["name"] = name
    if lifetime is not None:
        options["lifetime"] = lifetime
    return ray.remote(AgentThread).options(**options).remote()


def decode_records(data: Any) -> list[dict[str, Any]]:
    """The submission records inside what :meth:`AgentThread.run` answered."""
    records = unpack(data)
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise WireError("agent records must be a list of maps")
    return records


def run_agents(
    work: Sequence[tuple[Any, dict[str, Any] | WorkloadSpec]], *, timeout: float | None = None
) -> list[list[dict[str, Any]]]:
    """Run each ``(agent actor, spec)`` concurrently; the records of each, in order.

    Specs are validated before any remote call. A failed agent raises its
    typed error, or :class:`StoreError` (code ``agent_error``).
    """
    import ray
    from ray.exceptions import RayError, RayTaskError

    specs = [check_spec(spec).model_dump() for _, spec in work]
    refs = [agent.run.remote(spec) for (agent, _), spec in zip(work, specs, strict=True)]
    try:
        raws = ray.get(refs, timeout=timeout)
    except RayTaskError as e:
        cause = getattr(e, "cause", None)
        if isinstance(cause, MorphzError):
            raise cause from e
        raise StoreError(f"agent thread failed: {cause or e}", code="agent_error") from e
    except RayError as e:
        raise StoreError(f"agent thread failed: {e}", code="agent_error") from e
    return [decode_records(raw) for raw in raws]
