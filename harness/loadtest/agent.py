"""The load test's agent actor: synthetic steps for a duration, and trajectory replays.

:class:`LoadAgent` is an :class:`~harness.agent_threads.AgentThread` (a plain
class the load test runs as an async Ray actor) that can also run the
synthetic workload until a deadline and replay STATE-Bench conversations as
observations and the transactions that summarize them.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from actors.client.handle import DEFAULT_NAMESPACE, ContextHandle, new_client_id
from harness.agent_threads import AgentThread, check_spec, receipt_fields, submission_record
from harness.loadtest.trajectories import Conversation, slug
from harness.workload import RETRY_CODES, Step, plan_thread, thread_name
from protocol.errors import MorphzError, RequestError
from protocol.forms import Form, Symbol, from_plain
from protocol.tx import AppendField, ContextTx, Derive, Relate, Retire, Revise
from protocol.wire import pack

ROUND_STEPS = 64
"""Steps a synthetic thread plans at a time when it runs for a duration (a new seed
each round). The deadline is checked before each step, so a run ends on time; what a
thread knows (which frames exist, the version it is based on) carries across rounds."""
SUMMARY_CHARS = 160
"""Characters of a message quoted in the frame that summarizes it."""


class TrajectoryThread(BaseModel):
    """One logical thread of a replay: its number, its conversations (indexes), its steps."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    number: int = Field(ge=0)
    conversations: tuple[int, ...]
    steps: int | None = Field(default=None, ge=0)


class TrajectorySpec(BaseModel):
    """What :meth:`LoadAgent.replay` runs against one context.

    Each thread replays its conversations in turn, again from the first when
    it has done them all, until it has taken ``steps`` steps (None: until
    ``seconds`` have passed).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    context: str
    namespace: str = DEFAULT_NAMESPACE
    conversations: tuple[Conversation, ...]
    threads: tuple[TrajectoryThread, ...]
    seconds: float | None = Field(default=None, gt=0.0)
    conflict_rate: float = Field(default=0.1, ge=0.0, le=1.0)
    shared_mode: Literal["replace", "list", "fields"] = "replace"
    max_attempts: int = Field(default=5, ge=1, le=100)
    backoff_ms: float = Field(default=5.0, ge=0.0)
    backoff_max_ms: float = Field(default=200.0, ge=0.0)
    seed: int = 0


def _quote(text: str) -> str:
    return " ".join(text.split())[:SUMMARY_CHARS]


@dataclass
class _Step:
    """One transaction of a replay: write *target*, cite *sources*, maybe retire *retire*."""

    thread: str
    index: int
    kind: str
    target: str
    body: tuple[Form, ...]
    events: tuple[str, ...] = ()
    frame_sources: tuple[str, ...] = ()
    relate: tuple[str, str] | None = None
    retire: str | None = None
    shared: str | None = None
    shared_mode: str = "replace"
    frames: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        wanted = [self.target, *self.frame_sources]
        if self.relate is not None:
            wanted.append(self.relate[1])
        if self.shared is not None:
            wanted.append(self.shared)
        self.frames = list(dict.fromkeys(wanted))

    def intents(self) -> dict[str, list[str]]:
        """What the step means to change, per frame (see :func:`~harness.loadtest.conflict_counts`):
        its own frame as a whole, and the shared frame's ``seen`` list by appending to it
        (however it is written: a ``revise`` of the list in ``list`` mode, an ``append``
        in ``fields`` mode) or as a whole in ``replace`` mode."""
        out = {self.target: ["*"]}
        if self.shared is not None:
            out[self.shared] = ["*"] if self.shared_mode == "replace" else ["append:seen"]
        return out

    def build(
        self,
        known: Mapping[str, bool],
        base: int,
        client_id: str,
        shared_seen: tuple[Form, ...] = (),
    ) -> ContextTx:
        """The step's transaction, given which frames exist (*known*) at version *base*
        and, in ``list`` mode, the shared frame's ``seen`` items as read (*shared_seen*)."""
        S = Symbol
        sources = self.events + tuple(f for f in self.frame_sources if known.get(f, False))
        write: Derive | Revise
        if known.get(self.target, False):
            write = Revise(id=self.target, sources=sources, body=self.body)
        else:
            write = Derive(id=self.target, sources=sources, body=self.body)
        ops: list[Any] = [write]
        if self.relate is not None and known.get(self.relate[1], False):
            ops.append(Relate(subject=self.target, label=self.relate[0], object=self.relate[1]))
        if self.shared is not None:
            note: Form = (S(self.thread), S(self.kind), self.index)
            seen = ((S("seen"), *note),)
            if self.shared_mode != "replace":
                seen = ((S("seen"), *shared_seen, note),)
            exists = known.get(self.shared, False)
            if exists and self.shared_mode == "fields":
                edit = AppendField(
                    id=self.shared, sources=(self.target,), field="seen", values=(note,)
                )
                ops.append(edit)
            elif exists:
                ops.append(Revise(id=self.shared, sources=(self.target,), body=seen))
            else:
                ops.append(Derive(id=self.shared, sources=(self.target,), body=seen))
        if self.retire is not None:
            ops.append(Retire(refs=(self.retire,)))
        return ContextTx(
            base_version=base,
            reason=f"{self.thread} step {self.index} ({self.kind})",
            client_id=client_id,
            ops=tuple(ops),
        )


def _seen_items(frame: Mapping[str, Any] | None) -> tuple[Form, ...]:
    """The items of a shared frame's ``(seen …)`` list, from a ``read_for_update`` entry."""
    if frame is None:
        return ()
    for form in frame.get("body_forms") or ():
        if isinstance(form, list) and form and form[0] == "seen":
            return tuple(from_plain(x, 2) for x in form[1:])
    return ()


def _record(step: _Step, attempt: int, **fields: Any) -> dict[str, Any]:
    return submission_record(step, attempt, **{"source_events": [], **fields})


class LoadAgent(AgentThread):
    """An :class:`~harness.agent_threads.AgentThread` that also runs for a time and replays.

    ``run(spec)`` (inherited) runs a fixed number of synthetic steps;
    :meth:`run_for` runs synthetic steps until a deadline or a step count;
    :meth:`replay` replays conversations. All answer ``pack(records)`` (see
    :data:`harness.agent_threads.RECORD_KEYS`; replay records add ``source_events``).
    :meth:`stop` ends the runs of :meth:`run_for` and :meth:`replay` early:
    each logical thread finishes the step it is in, and the call answers the
    records made so far (an interrupted load test checks what committed).
    """

    def __init__(self) -> None:
        super().__init__()
        self._stopped = False

    async def stop(self) -> None:
        """Stop the running workloads after their current steps (they answer their records)."""
        self._stopped = True

    def stopped(self) -> bool:
        """Whether :meth:`stop` was called."""
        return self._stopped

    async def run_for(
        self, spec: dict[str, Any], seconds: float | None, steps: int | None = None
    ) -> bytes:
        """Run the synthetic workload of *spec* for *seconds* (or *steps* steps per thread),
        in plans of :data:`ROUND_STEPS` steps, until then or until :meth:`stop`.

        Each logical thread plans :data:`ROUND_STEPS` steps at a time (a new
        seed per round) and stops planning at the deadline, after *steps*
        steps, or when stopped; its step numbers run on across rounds.
        ``spec["transactions"]`` is ignored.
        """
        s = check_spec(spec)
        if seconds is None and steps is None:
            raise RequestError("run_for needs seconds or steps", code="bad_spec")
        handle = self._handle(s.context, s.namespace)
        deadline = None if seconds is None else time.monotonic() + float(seconds)

        def more(done: int) -> bool:
            if self._stopped or (steps is not None and done >= steps):
                return False
            return deadline is None or time.monotonic() < deadline

        def planned(number: int) -> Iterator[Step]:
            rounds = 0
            while True:
                plan = s.model_copy(
                    update={"transactions": ROUND_STEPS, "seed": s.seed * 1_000_003 + rounds}
                )
                clock = time.thread_time()
                batch = plan_thread(plan, number)
                self.bookkeeping_s += time.thread_time() - clock
                for step in batch:
                    index = rounds * ROUND_STEPS + step.index
                    if not more(index):
                        return
                    yield replace(step, index=index)
                rounds += 1

        results = await asyncio.gather(
            *(
                self._thread(handle, s, s.first_thread + i, planned(s.first_thread + i))
                for i in range(s.threads)
            )
        )
        return pack([r for records in results for r in records])

    async def replay(self, spec: dict[str, Any]) -> bytes:
        """Replay the conversations of *spec* (a :class:`TrajectorySpec` dict) as observations.

        For each user message: observe it, claim, and derive or revise
        ``t<k>/<conversation>/request`` citing it. For each tool call of an
        assistant turn: observe the result, claim, derive or revise
        ``…/tool/<name>`` citing it (and the request frame, which it relates
        to with ``serves``) and retire the result in the same transaction.
        Then the reply is the action: deliver the request (R19) and derive or
        revise ``…/reply`` citing the request frame, retiring the request,
        which only a delivered request allows. With probability
        ``conflict_rate`` a step also writes ``shared/<domain>``, which every
        thread replaying that domain writes. Conflicts are retried as in
        :class:`~harness.agent_threads.AgentThread`.
        """
        try:
            s = TrajectorySpec.model_validate(spec)
        except ValidationError as e:
            raise RequestError(f"bad trajectory spec: {e.errors()[0]}", code="bad_spec") from e
        handle = self._handle(s.context, s.namespace)
        deadline = None if s.seconds is None else time.monotonic() + s.seconds
        runs = [_Replay(handle, s, t, deadline, self.stopped).run() for t in s.threads]
        results = await asyncio.gather(*runs)
        return pack([r for records in results for r in records])


class _Replay:
    """One logical thread replaying its conversations (see :meth:`LoadAgent.replay`)."""

    def __init__(
        self,
        handle: ContextHandle,
        spec: TrajectorySpec,
        plan: TrajectoryThread,
        deadline: float | None,
        stopped: Callable[[], bool] = lambda: False,
    ) -> None:
        self.stopped = stopped
        self.handle = handle
        self.spec = spec
        self.plan = plan
        self.deadline = deadline
        self.thread = thread_name(plan.number)
        self.rng = random.Random(f"{spec.seed}:{plan.number}:trajectories")
        self.records: list[dict[str, Any]] = []
        self.steps = 0
        self.domain = ""

    def more(self) -> bool:
        """Whether the thread has steps and time left (and was not stopped)."""
        if self.stopped() or (self.plan.steps is not None and self.steps >= self.plan.steps):
            return False
        return self.deadline is None or time.monotonic() < self.deadline

    async def run(self) -> list[dict[str, Any]]:
        """Replay the thread's conversations until its steps or time are spent; its records."""
        passes = 0
        while self.plan.conversations and self.more():
            for number in self.plan.conversations:
                if not self.more():
                    break
                await self.conversation(self.spec.conversations[number], passes)
            passes += 1
        return self.records

    async def conversation(self, conv: Conversation, passes: int) -> None:
        """Replay one conversation: its requests, tool results and replies."""
        S = Symbol
        self.domain = conv.domain
        base = f"{self.thread}/{conv.key}"
        request_frame = f"{base}/request"
        request: str | None = None  # the user message awaiting its reply
        turn = 0
        for msg in conv.turns:
            if not self.more():
                return
            if msg.role == "user":
                turn += 1
                request = await self.observe("user_message", msg.text, base)
                if request is not None:
                    body: tuple[Form, ...] = (
                        (S("request"), (S("pass"), passes), (S("turn"), turn)),
                        (S("text"), _quote(msg.text)),
                    )
                    await self.step("request", request_frame, body, events=(request,))
                continue
            for call in msg.tools:
                if not self.more():
                    return
                ref = await self.observe("tool_result", call.text, base)
                if ref is None:
                    continue
                body = (
                    (S("tool"), call.name, (S("turn"), turn)),
                    (S("result-chars"), len(call.text)),
                    (S("head"), _quote(call.text)),
                )
                target = f"{base}/tool/{slug(call.name)}"
                await self.step(
                    "tool",
                    target,
                    body,
                    events=(ref,),
                    frame_sources=(request_frame,),
                    relate=("serves", request_frame),
                    retire=ref,
                )
            if not self.more():
                return
            delivered = None
            if request is not None:
                try:  # the reply is the action; delivering it lifts the causal protection
                    await asyncio.to_thread(self.handle.deliver, request)
                    delivered = request
                except MorphzError:
                    pass
                request = None
            body = ((S("reply"), (S("turn"), turn)), (S("text"), _quote(msg.text)))
            await self.step(
                "reply",
                f"{base}/reply",
                body,
                frame_sources=(request_frame,),
                relate=("answers", request_frame),
                retire=delivered,
            )

    async def observe(self, kind: str, text: str, session: str) -> str | None:
        """Record and claim an observation; its reference, or None (the step is skipped)."""
        try:
            event = await self.handle.observe_and_claim.aio(kind, text, session=session)
        except MorphzError as e:
            self.records.append(
                _record(_Step(self.thread, self.steps, kind, "x", ()), 0, error_code=e.code)
            )
            self.steps += 1
            return None
        return str(event["ref"])

    async def step(self, kind: str, target: str, body: tuple[Form, ...], **parts: Any) -> None:
        """One step: maybe also write the domain's shared frame; read, build, submit, retry."""
        shared = None
        if self.rng.random() < self.spec.conflict_rate:
            shared = f"shared/{self.domain}"
        mode = self.spec.shared_mode
        step = _Step(
            self.thread, self.steps, kind, target, body, shared=shared, shared_mode=mode, **parts
        )
        self.steps += 1
        spec, handle = self.spec, self.handle
        for attempt in range(1, spec.max_attempts + 1):
            shared_seen: tuple[Form, ...] = ()
            try:
                if mode == "list" and step.shared is not None:
                    # The list is read with the version it is based on, in one read.
                    got = await handle.read_for_update.aio(step.frames)
                    base = int(got.version)
                    known = {f: v is not None for f, v in got.frames.items()}
                    shared_seen = _seen_items(got.frames.get(step.shared))
                else:
                    snap = await handle.snapshot.aio(step.frames)
                    base = int(snap["version"])
                    known = {f: v is not None for f, v in snap["frames"].items()}
            except MorphzError as e:
                self.records.append(_record(step, attempt, error_code=e.code))
                return
            tx = step.build(known, base, new_client_id(), shared_seen)
            reads, writes = tx.footprint()
            fields: dict[str, Any] = {
                "client_id": tx.client_id,
                "base_version": base,
                "footprint": sorted(reads | writes),
                "source_events": sorted(k for k in reads if k.startswith("e:")),
                "intents": step.intents(),
            }
            started = time.perf_counter()
            try:
                receipt = await handle.submit_async(tx)
            except MorphzError as e:
                latency = (time.perf_counter() - started) * 1000
                self.records.append(
                    _record(
                        step,
                        attempt,
                        **fields,
                        outcome="unknown",
                        error_code=e.code,
                        latency_ms=latency,
                    )
                )
                return
            latency = (time.perf_counter() - started) * 1000
            self.records.append(
                _record(step, attempt, **fields, **receipt_fields(receipt, latency))
            )
            if receipt.committed:
                return
            code = receipt.errors[0].code if receipt.errors else None
            if code not in RETRY_CODES or attempt == spec.max_attempts:
                return
            delay = min(spec.backoff_max_ms, spec.backoff_ms * 2 ** (attempt - 1))
            await asyncio.sleep(delay * (0.5 + self.rng.random()) / 1000)
