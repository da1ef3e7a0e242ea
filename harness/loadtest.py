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

   * ``synthetic`` — :mod:`actors.workload`, with ``conflict_rate`` the share
     of steps that write frames other threads also write;
   * ``trajectories`` — the STATE-Bench agent conversations replayed as
     observations (:meth:`LoadAgent.replay`);

4. meanwhile, with ``kill_every_s``, SIGKILL one context actor's process every
   that many seconds (only actors on this machine; Ray restarts them);
5. hold each context's recorded submissions against what it kept
   (:meth:`~actors.client.ContextHandle.export`) with
   :func:`harness.checker.check_history`, and read every acknowledged commit
   back from the store on disk;
6. answer one dict of figures (:data:`REPORT_KEYS`), ``history_ok`` true when
   no check found a violation.

Ray is imported inside the functions that use it, never at module import.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import random
import re
import signal
import socket
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from actors.agent import AgentThread, check_spec, receipt_fields, submission_record
from actors.client import (
    DEFAULT_NAMESPACE,
    ContextHandle,
    RetryPolicy,
    connect,
    new_client_id,
)
from actors.placement import alive_nodes, current_node_id, pinned
from actors.replies import open_reply
from actors.workload import RETRY_CODES, WorkloadSpec, thread_name
from harness.checker import Submission, Verdict, Violation, check_history
from protocol.errors import MorphzError, NotFound, RequestError, StoreError
from protocol.forms import Form, Symbol
from protocol.state import Event, Frame
from protocol.tx import ContextTx, Derive, Relate, Retire, Revise
from protocol.wire import pack, unpack
from storage import LmdbStore

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TRAJECTORIES = REPO.parent / "shared" / "data" / "state-bench" / "train_task_trajectories"
"""Where the STATE-Bench training trajectories are unless told otherwise."""

ROUND_STEPS = 1
"""Steps a synthetic thread plans at a time when it runs for a duration.

One is free: every step reads the frames it touches anyway (``read_every=1``),
and the deadline is checked before each step, so a run ends on time."""
MAX_AGENTS = 8
"""Most agent actors the default spreads the threads over."""
THREADS_PER_AGENT = 16
"""Logical threads per agent actor the default aims at (at least two agents)."""
SUMMARY_CHARS = 160
"""Characters of a message quoted in the frame that summarizes it."""
MAX_VIOLATIONS = 200
"""Violations listed in a report (all are counted)."""
CHECK_RETRY = RetryPolicy(attempts=30, initial=0.05, multiplier=2.0, max_delay=2.0)
"""Patience of the checking phase: a context killed last may still be restarting."""

REPORT_KEYS = (
    "run_id",
    "workload",
    "threads",
    "contexts",
    "agents",
    "conflict_rate",
    "shared_frames",
    "seed",
    "requested",
    "duration_s",
    "steps",
    "submitted",
    "committed",
    "rebased",
    "rejected",
    "retried",
    "unknown",
    "skipped",
    "gave_up",
    "duplicates",
    "throughput_tx_s",
    "latency_ms",
    "kills",
    "kill_log",
    "kill_misses",
    "history_ok",
    "violations",
    "violation_count",
    "checked",
    "per_context",
    "store",
    "namespace",
)
"""Keys of the dict :func:`run_loadtest` answers, in order."""

Progress = Callable[[Mapping[str, Any]], None]
"""Called about twice a second while the load runs (see :func:`run_loadtest`)."""
Tamper = Callable[[str, list[dict[str, Any]]], list[dict[str, Any]]]
"""Given a context's name and its records, the records to check (a test seam)."""


class LoadtestOptions(BaseModel):
    """What to run; exactly one of ``duration_s`` and ``transactions`` bounds it.

    ``transactions`` counts workload steps in all threads together (each step
    is one transaction, submitted again after a conflict). ``conversations``
    limits how many trajectories are replayed. ``shared_frames`` is how many
    frames the synthetic threads share (``shared/release`` and
    ``shared/plan-<i>``); one makes every shared step contend. ``agents`` is the number of
    agent actors (default: one per 16 threads, at least 2, at most 8, at most
    one per thread).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    threads: int = Field(ge=1, le=4096)
    contexts: int = Field(default=1, ge=1, le=256)
    duration_s: float | None = Field(default=None, gt=0.0, le=7 * 86400.0)
    transactions: int | None = Field(default=None, ge=1, le=1_000_000_000)
    conflict_rate: float = Field(default=0.1, ge=0.0, le=1.0)
    shared_frames: int = Field(default=1, ge=1, le=65)
    workload: Literal["synthetic", "trajectories"] = "synthetic"
    trajectories_dir: str | None = None
    conversations: int | None = Field(default=None, ge=1)
    kill_every_s: float | None = Field(default=None, gt=0.0)
    address: str | None = None
    store_dir: str = ".morphz"
    seed: int = 0
    agents: int | None = Field(default=None, ge=1, le=256)
    namespace: str = Field(default=DEFAULT_NAMESPACE, min_length=1)
    keep: bool = False
    run_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_\-]{1,32}$")

    @model_validator(mode="after")
    def _one_bound(self) -> LoadtestOptions:
        if (self.duration_s is None) == (self.transactions is None):
            raise ValueError("give exactly one of duration_s and transactions")
        return self


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


class ToolCall(BaseModel):
    """One tool call of an assistant turn: its name and the text recorded as its result."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    text: str


class Turn(BaseModel):
    """One message of a conversation: a user request, or an assistant reply with tool calls."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Literal["user", "assistant"]
    text: str
    tools: tuple[ToolCall, ...] = ()


class Conversation(BaseModel):
    """One STATE-Bench trajectory: ``key`` is ``<domain>-<task number>``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str
    domain: str
    turns: tuple[Turn, ...]


def _slug(text: str) -> str:
    out = re.sub(r"[^\w.\-]+", "-", text).strip("-_.") or "x"
    return out if out[0].isalpha() else "x" + out


def load_conversations(
    directory: str | os.PathLike[str] | None = None, limit: int | None = None
) -> list[Conversation]:
    """The trajectories under *directory* (``<domain>/<n>-<name>.json``), domains interleaved.

    Ordered by task number, then domain, so the first few span the domains.
    Each file is ``{"conversation": [{"role", "content", "tool_calls"?}, …]}``;
    system messages are skipped, a tool call's result is recorded as the JSON
    of ``{"name", "arguments", "result"}``. :class:`NotFound` if there is none.
    """
    root = Path(directory) if directory is not None else DEFAULT_TRAJECTORIES
    if not root.is_dir():
        raise NotFound(f"no trajectory directory {root}")
    found = []
    for path in root.glob("*/*.json"):
        digits = re.match(r"\d+", path.stem)
        found.append((int(digits.group()) if digits else 0, path.parent.name, path))
    found.sort()
    if limit is not None:
        found = found[:limit]
    if not found:
        raise NotFound(f"no trajectories (<domain>/<task>.json) under {root}")
    out = []
    for number, domain, path in found:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            turns = []
            for msg in doc["conversation"]:
                if msg["role"] not in ("user", "assistant"):
                    continue
                tools = tuple(
                    ToolCall(
                        name=str(call["name"]),
                        text=json.dumps(
                            {
                                "name": call["name"],
                                "arguments": call.get("arguments"),
                                "result": call.get("result"),
                            },
                            ensure_ascii=False,
                            sort_keys=True,
                        ),
                    )
                    for call in msg.get("tool_calls") or ()
                )
                turns.append(
                    Turn(role=msg["role"], text=str(msg.get("content") or ""), tools=tools)
                )
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise RequestError(f"unreadable trajectory {path}: {e}", code="bad_trajectory") from e
        out.append(
            Conversation(key=f"{_slug(domain)}-{number}", domain=_slug(domain), turns=tuple(turns))
        )
    return out


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
    frames: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        wanted = [self.target, *self.frame_sources]
        if self.relate is not None:
            wanted.append(self.relate[1])
        if self.shared is not None:
            wanted.append(self.shared)
        self.frames = list(dict.fromkeys(wanted))

    def build(self, known: Mapping[str, bool], base: int, client_id: str) -> ContextTx:
        S = Symbol
        sources = self.events + tuple(f for f in self.frame_sources if known.get(f, False))
        write: Derive | Revise
        if known.get(self.target, False):
            write = Revise(id=self.target, sources=sources, body=self.body)
        else:
            write = Derive(id=self.target, sources=sources, body=self.body)
        ops: list[Derive | Revise | Relate | Retire] = [write]
        if self.relate is not None and known.get(self.relate[1], False):
            ops.append(Relate(subject=self.target, label=self.relate[0], object=self.relate[1]))
        if self.shared is not None:
            seen = ((S("seen"), S(self.thread), S(self.kind), self.index),)
            if known.get(self.shared, False):
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


def _record(step: _Step, attempt: int, **fields: Any) -> dict[str, Any]:
    return submission_record(step, attempt, **{"source_events": [], **fields})


class LoadAgent(AgentThread):
    """An :class:`~actors.agent.AgentThread` that also runs for a duration and replays trajectories.

    ``run(spec)`` (inherited) runs a fixed number of synthetic steps;
    :meth:`run_for` runs synthetic steps until a deadline; :meth:`replay`
    replays conversations. All answer ``pack(records)`` (see
    :data:`actors.agent.RECORD_KEYS`; replay records add ``source_events``).
    """

    async def run_for(self, spec: dict[str, Any], seconds: float) -> bytes:
        """Run the synthetic workload of *spec* for *seconds*, plans of :data:`ROUND_STEPS` steps.

        Each logical thread plans :data:`ROUND_STEPS` steps at a time (a new
        seed per round) and stops planning at the deadline; its step numbers
        run on across rounds. ``spec["transactions"]`` is ignored.
        """
        s = check_spec(spec)
        handle = self._handle(s.context, s.namespace)
        deadline = time.monotonic() + float(seconds)

        async def loop(number: int) -> list[dict[str, Any]]:
            out: list[dict[str, Any]] = []
            rounds = 0
            while time.monotonic() < deadline:
                plan = s.model_copy(
                    update={"transactions": ROUND_STEPS, "seed": s.seed * 1_000_003 + rounds}
                )
                for r in await self._thread(handle, plan, number):
                    r["step"] += rounds * ROUND_STEPS
                    out.append(r)
                rounds += 1
            return out

        results = await asyncio.gather(*(loop(s.first_thread + i) for i in range(s.threads)))
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
        :class:`~actors.agent.AgentThread`.
        """
        try:
            s = TrajectorySpec.model_validate(spec)
        except ValidationError as e:
            raise RequestError(f"bad trajectory spec: {e.errors()[0]}", code="bad_spec") from e
        handle = self._handle(s.context, s.namespace)
        deadline = None if s.seconds is None else time.monotonic() + s.seconds
        runs = [_Replay(handle, s, t, deadline).run() for t in s.threads]
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
    ) -> None:
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
        """Whether the thread has steps and time left."""
        if self.plan.steps is not None and self.steps >= self.plan.steps:
            return False
        return self.deadline is None or time.monotonic() < self.deadline

    async def run(self) -> list[dict[str, Any]]:
        passes = 0
        while self.plan.conversations and self.more():
            for number in self.plan.conversations:
                if not self.more():
                    break
                await self.conversation(self.spec.conversations[number], passes)
            passes += 1
        return self.records

    async def conversation(self, conv: Conversation, passes: int) -> None:
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
                target = f"{base}/tool/{_slug(call.name)}"
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
            event = await self.handle.observe_async(kind, text, session=session)
            await self.handle.claim_async()
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
        step = _Step(self.thread, self.steps, kind, target, body, shared=shared, **parts)
        self.steps += 1
        spec, handle = self.spec, self.handle
        for attempt in range(1, spec.max_attempts + 1):
            try:
                snap = await handle.snapshot_async(step.frames)
            except MorphzError as e:
                self.records.append(_record(step, attempt, error_code=e.code))
                return
            base = int(snap["version"])
            known = {f: v is not None for f, v in snap["frames"].items()}
            tx = step.build(known, base, new_client_id())
            reads, writes = tx.footprint()
            fields: dict[str, Any] = {
                "client_id": tx.client_id,
                "base_version": base,
                "footprint": sorted(reads | writes),
                "source_events": sorted(k for k in reads if k.startswith("e:")),
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


# --- the history check -------------------------------------------------------

SUBMITTED = ("committed", "rejected", "unknown")
"""Record outcomes of a transaction that reached (or may have reached) the context."""


def submissions_of(records: Sequence[Mapping[str, Any]]) -> list[Submission]:
    """The checker's submissions for agent records; ``skipped`` ones submitted nothing.

    ``source_events`` comes from the record when it has one; the synthetic
    workload cites events only where it also retires them, so none of its
    footprint keys is a source-only event.
    """
    out = []
    for r in records:
        if r.get("client_id") is None or r.get("outcome") not in (
            "committed",
            "rejected",
            "unknown",
        ):
            continue
        out.append(
            Submission(
                client_id=str(r["client_id"]),
                thread=str(r.get("thread", "?")),
                base_version=int(r["base_version"]),
                footprint=tuple(r.get("footprint") or ()),
                outcome=r["outcome"],
                version=None if r["outcome"] == "unknown" else r.get("version"),
                conflicts=tuple((str(c[0]), int(c[1])) for c in r.get("conflicts") or ()),
                error_code=r.get("error_code"),
                duplicate=bool(r.get("duplicate")),
                attempt=max(1, int(r.get("attempt") or 1)),
                source_events=tuple(r.get("source_events") or ()),
            )
        )
    return out


def check_context(records: Sequence[Mapping[str, Any]], export: Mapping[str, Any]) -> Verdict:
    """:func:`harness.checker.check_history` of *records* against a context's *export*.

    *export* is what :meth:`~actors.client.ContextHandle.export` answers.
    """
    return check_history(
        submissions_of(records),
        export["log"],
        events=[Event.from_record(dict(e)) for e in export["events"]],
        final_frames=[Frame.from_record(dict(f)) for f in export["frames"]],
        final_relations=[tuple(r) for r in export["relations"]],
        window=int(export["window"]),
        history_keep=int(export["history_keep"]),
        tenant=export.get("tenant"),
        project=export.get("project"),
    )


def check_on_disk(
    path: str | os.PathLike[str], records: Sequence[Mapping[str, Any]]
) -> list[Violation]:
    """Every acknowledged commit of *records*, read back from the store at *path* (R44).

    Opens the LMDB store read-only (beside a running actor); a committed
    record must be in the transaction log at its version under its client id.
    """
    acked = {
        (str(r["client_id"]), int(r["version"]))
        for r in records
        if r.get("outcome") == "committed" and r.get("version") is not None
    }
    store = LmdbStore.open(path, readonly=True)
    try:
        logged = store.read(lambda v: {n: v.txlog(n) for n in sorted({n for _, n in acked})})
    finally:
        store.close()
    out = []
    for client_id, version in sorted(acked, key=lambda a: a[1]):
        rec = logged.get(version)
        found = None if rec is None else rec.get("client_id")
        if found != client_id:
            out.append(
                Violation(
                    kind="not_on_disk",
                    detail=f"{client_id!r} was acknowledged at v{version}; the store on disk "
                    f"holds {found!r} there",
                )
            )
    return out


# --- figures -------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    """The nearest-rank *p*-th percentile of *values* (0 for none)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return float(ordered[min(rank, len(ordered)) - 1])


def figures(records: Sequence[Mapping[str, Any]], seconds: float) -> dict[str, Any]:
    """Outcome counts, throughput and latency of *records* over *seconds* of load.

    ``retried`` counts submissions rebuilt after a rejection (attempt > 1),
    ``gave_up`` steps whose last submission was rejected, ``latency_ms`` the
    submit round trip of every answered submission (committed or rejected).
    """
    outcomes = Counter(r["outcome"] for r in records)
    last: dict[tuple[str, int], Mapping[str, Any]] = {}
    for r in records:
        last[(str(r["thread"]), int(r["step"]))] = r
    answered = [
        float(r["latency_ms"]) for r in records if r["outcome"] in ("committed", "rejected")
    ]
    committed = outcomes["committed"]
    return {
        "steps": len(last),
        "submitted": sum(1 for r in records if r["client_id"] is not None),
        "committed": committed,
        "rebased": sum(1 for r in records if r["outcome"] == "committed" and r["rebased"]),
        "rejected": outcomes["rejected"],
        "retried": sum(1 for r in records if r["client_id"] is not None and r["attempt"] > 1),
        "unknown": outcomes["unknown"],
        "skipped": outcomes["skipped"],
        "gave_up": sum(1 for r in last.values() if r["outcome"] == "rejected"),
        "duplicates": sum(1 for r in records if r["duplicate"]),
        "throughput_tx_s": round(committed / seconds, 1) if seconds > 0 else 0.0,
        "latency_ms": {
            "p50": round(percentile(answered, 50), 2),
            "p99": round(percentile(answered, 99), 2),
            "max": round(max(answered, default=0.0), 2),
        },
    }


# --- orchestration -------------------------------------------------------------


@dataclass
class _Work:
    """One call of one agent: ``method(*args)`` against context number *context*."""

    agent: int
    context: int
    method: str
    args: tuple[Any, ...]


def default_agents(threads: int) -> int:
    """Agent actors for *threads* logical threads: 1 per 16, at least 2, at most 8 (≤ threads)."""
    return min(threads, max(2, min(MAX_AGENTS, math.ceil(threads / THREADS_PER_AGENT))))


def spread(threads: int, contexts: int, agents: int) -> list[list[tuple[int, list[int]]]]:
    """For each context, ``(agent, thread numbers)``: contiguous ranges, balanced.

    Context *c* gets threads ``t<start_c> …`` (``threads // contexts``, the
    first ``threads % contexts`` one more); its range is cut into at most
    *agents* chunks, chunk *j* going to agent ``(c + j) % agents``.
    """
    out: list[list[tuple[int, list[int]]]] = []
    start = 0
    for c in range(contexts):
        n = threads // contexts + (1 if c < threads % contexts else 0)
        numbers = list(range(start, start + n))
        start += n
        chunks = min(agents, n)
        groups = []
        for j in range(chunks):
            part = numbers[j * n // chunks : (j + 1) * n // chunks]
            if part:
                groups.append(((c + j) % agents, part))
        out.append(groups)
    return out


def _steps_of(number: int, threads: int, total: int | None) -> int | None:
    if total is None:
        return None
    return total // threads + (1 if number < total % threads else 0)


def _runs(values: list[int], key: Callable[[int], Any]) -> list[list[int]]:
    """Consecutive *values* with the same key, grouped."""
    out: list[list[int]] = []
    for v in values:
        if out and key(out[-1][-1]) == key(v) and out[-1][-1] + 1 == v:
            out[-1].append(v)
        else:
            out.append([v])
    return out


class _Killer:
    """SIGKILLs one context actor's process every *every* seconds, round robin, from a thread.

    It stops when told, or *until* seconds after it started (the load's duration).
    """

    def __init__(
        self,
        handles: list[ContextHandle],
        every: float,
        local: set[str],
        seed: int,
        until: float | None = None,
    ) -> None:
        self.handles = handles
        self.every = every
        self.until = until
        self.local = local
        self.kills: list[dict[str, Any]] = []
        self.skipped = 0
        self.errors = 0
        self._stop = threading.Event()
        self._next = random.Random(f"{seed}:killer").randrange(len(handles))
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="morphz-killer", daemon=True)

    def start(self) -> None:
        self._started = time.monotonic()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            if self.until is not None and time.monotonic() - self._started >= self.until:
                return
            handle = self.handles[self._next % len(self.handles)]
            self._next += 1
            try:
                info = handle.describe()  # waits for a restarting actor
            except MorphzError:
                self.errors += 1
                continue
            pid, node = int(info["pid"]), str(info["node_id"])
            if self._stop.is_set():
                return
            if node not in self.local or pid == os.getpid() or not _is_actor_process(pid):
                self.skipped += 1
                continue
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                self.errors += 1
                continue
            self.kills.append(
                {
                    "context": handle.name,
                    "pid": pid,
                    "at_s": round(time.monotonic() - self._started, 3),
                }
            )


def _is_actor_process(pid: int) -> bool:
    """Whether *pid* is a Ray worker process on this machine (its command line says so)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:
        return not os.path.isdir("/proc")  # no procfs: trust the node check alone
    return b"ray::" in cmdline or b"default_worker" in cmdline


def _local_nodes() -> list[str]:
    """The live nodes on this machine (same IP address as this process), this node first."""
    import ray

    here = current_node_id()
    try:
        ip = str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]
    except Exception:  # a client-mode driver has no local node address
        return [here]
    same = [n["node_id"] for n in alive_nodes() if n["address"] == ip]
    if here not in same:
        return same or [here]
    return [here] + [n for n in same if n != here]


def _check_reachable(address: str) -> None:
    """Fail fast on a ``host:port`` nobody listens on (``ray.init`` would wait for minutes)."""
    m = re.fullmatch(r"(?:ray://)?\[?([^\]\s]+?)\]?:(\d+)", address)
    if m is None:  # "auto" and the like: left to Ray
        return
    try:
        socket.create_connection((m.group(1), int(m.group(2))), timeout=5).close()
    except OSError as e:
        raise StoreError(f"cannot reach Ray at {address}: {e}", code="ray_unavailable") from e


def _connect_ray(address: str | None) -> bool:
    """Connect this process to Ray unless it is connected; True if this call connected it."""
    import ray

    if ray.is_initialized():
        return False
    target = address or os.environ.get("RAY_ADDRESS") or "local"
    kwargs: dict[str, Any] = {
        "address": target,
        "log_to_driver": False,
        "logging_level": logging.WARNING,
    }
    if target == "local":
        kwargs["include_dashboard"] = False
    else:
        _check_reachable(target)
    try:
        ray.init(**kwargs)
    except (ConnectionError, ValueError, RuntimeError) as e:
        raise StoreError(f"cannot connect to Ray at {target}: {e}", code="ray_unavailable") from e
    return True


class _Run:
    """One load test: the actors it created, the load, the checks, the report."""

    def __init__(
        self,
        opts: LoadtestOptions,
        conversations: list[Conversation],
        progress: Progress | None,
        tamper: Tamper | None,
    ) -> None:
        self.opts = opts
        self.conversations = conversations
        self.progress = progress
        self.tamper = tamper
        self.run_id = opts.run_id or uuid.uuid4().hex[:8]
        self.store = os.path.abspath(opts.store_dir)
        self.handles: list[ContextHandle] = []
        self.nodes: list[str] = []
        self.agents: list[Any] = []

    def go(self) -> dict[str, Any]:
        import ray

        opts = self.opts
        conversations = self.conversations
        local = _local_nodes()
        everywhere = [n["node_id"] for n in alive_nodes()] or local
        try:
            for i in range(opts.contexts):
                node = local[i % len(local)]
                self.nodes.append(node)
                self.handles.append(
                    connect(
                        f"lt-{self.run_id}-{i}",
                        store_dir=self.store,
                        node_id=node,
                        namespace=opts.namespace,
                    )
                )
            n_agents = opts.agents or default_agents(opts.threads)
            agent_cls = ray.remote(LoadAgent)
            for j in range(n_agents):
                self.agents.append(
                    agent_cls.options(
                        num_cpus=0,
                        max_concurrency=1000,
                        namespace=opts.namespace,
                        scheduling_strategy=pinned(everywhere[j % len(everywhere)]),
                    ).remote()
                )
            ray.get([agent.pid.remote() for agent in self.agents])  # started before timing
            work = self._plan(conversations, n_agents)
            records, elapsed, killer = self._load(work)
            return self._report(records, elapsed, killer, n_agents)
        finally:
            for agent in self.agents:
                ray.kill(agent)
            if not opts.keep:
                for h in self.handles:
                    try:
                        h.shutdown()
                    except Exception:  # already gone: nothing to stop
                        pass

    def _plan(self, conversations: list[Conversation], n_agents: int) -> list[_Work]:
        opts = self.opts
        total = opts.transactions
        work: list[_Work] = []
        for c, groups in enumerate(spread(opts.threads, opts.contexts, n_agents)):
            name = self.handles[c].name
            for agent, numbers in groups:
                if opts.workload == "trajectories":
                    threads, used = self._trajectory_threads(numbers, len(conversations), total)
                    if not threads:
                        continue
                    spec = TrajectorySpec(
                        context=name,
                        namespace=opts.namespace,
                        conversations=tuple(conversations[i] for i in used),
                        threads=threads,
                        seconds=opts.duration_s,
                        conflict_rate=opts.conflict_rate,
                        seed=opts.seed,
                    )
                    work.append(_Work(agent, c, "replay", (spec.model_dump(),)))
                    continue
                for run in _runs(numbers, lambda k: _steps_of(k, opts.threads, total)):
                    steps = _steps_of(run[0], opts.threads, total)
                    if steps == 0:
                        continue
                    spec_doc = WorkloadSpec(
                        context=name,
                        namespace=opts.namespace,
                        threads=len(run),
                        first_thread=run[0],
                        transactions=steps if steps is not None else ROUND_STEPS,
                        conflict_rate=opts.conflict_rate,
                        shared_plans=opts.shared_frames - 1,
                        seed=opts.seed,
                    ).model_dump()
                    if opts.duration_s is None:
                        work.append(_Work(agent, c, "run", (spec_doc,)))
                    else:
                        work.append(_Work(agent, c, "run_for", (spec_doc, opts.duration_s)))
        return work

    def _trajectory_threads(
        self, numbers: list[int], count: int, total: int | None
    ) -> tuple[tuple[TrajectoryThread, ...], list[int]]:
        """The replay plan of *numbers*, with conversation indexes local to the spec."""
        threads = self.opts.threads
        used: list[int] = []
        plans = []
        for k in numbers:
            mine = [j for j in range(count) if j % threads == k] or [k % count]
            steps = _steps_of(k, threads, total)
            if steps == 0:
                continue
            local = []
            for j in mine:
                if j not in used:
                    used.append(j)
                local.append(used.index(j))
            plans.append(TrajectoryThread(number=k, conversations=tuple(local), steps=steps))
        return tuple(plans), used

    def _load(
        self, work: list[_Work]
    ) -> tuple[dict[int, list[dict[str, Any]]], float, _Killer | None]:
        import ray
        from ray.exceptions import RayError, RayTaskError

        opts = self.opts
        killer = None
        if opts.kill_every_s is not None:
            killer = _Killer(
                self.handles,
                opts.kill_every_s,
                set(_local_nodes()),
                opts.seed,
                until=opts.duration_s,
            )
        started = time.monotonic()
        refs = [getattr(self.agents[w.agent], w.method).remote(*w.args) for w in work]
        if killer is not None:
            killer.start()
        versions = [0] * len(self.handles)
        polls: dict[int, Any] = {}
        try:
            waiting = list(refs)
            while waiting:
                _, waiting = ray.wait(waiting, num_returns=len(waiting), timeout=0.5)
                self._poll(polls, versions)
                if self.progress is not None:
                    self.progress(
                        {
                            "elapsed_s": time.monotonic() - started,
                            "duration_s": opts.duration_s,
                            "transactions": opts.transactions,
                            "committed": sum(versions),
                            "kills": 0 if killer is None else len(killer.kills),
                            "done": False,
                        }
                    )
            elapsed = time.monotonic() - started
            raws = ray.get(refs)
        except RayTaskError as e:
            cause = getattr(e, "cause", None)
            if isinstance(cause, MorphzError):
                raise cause from e
            raise StoreError(f"agent thread failed: {cause or e}", code="agent_error") from e
        except RayError as e:
            raise StoreError(f"agent thread failed: {e}", code="agent_error") from e
        finally:
            if killer is not None:
                killer.stop()
        by_context: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for w, raw in zip(work, raws, strict=True):
            records = unpack(raw)
            if not isinstance(records, list):
                raise StoreError("an agent answered no records", code="agent_error")
            by_context[w.context].extend(records)
        if self.progress is not None:
            self.progress(
                {
                    "elapsed_s": elapsed,
                    "duration_s": opts.duration_s,
                    "transactions": opts.transactions,
                    "committed": sum(
                        1 for rs in by_context.values() for r in rs if r["outcome"] == "committed"
                    ),
                    "kills": 0 if killer is None else len(killer.kills),
                    "done": True,
                }
            )
        return by_context, elapsed, killer

    def _poll(self, polls: dict[int, Any], versions: list[int]) -> None:
        """Read the contexts' versions without blocking: collect answers, ask again."""
        import ray

        if polls:
            ready, _ = ray.wait(list(polls.values()), num_returns=len(polls), timeout=0)
            done = {i for i, ref in polls.items() if ref in ready}
            for i in done:
                try:
                    versions[i] = int(open_reply(ray.get(polls.pop(i))))
                except Exception:  # a killed actor: ask again next time
                    polls.pop(i, None)
        for i, h in enumerate(self.handles):
            if i not in polls:
                polls[i] = h.actor.version.remote()

    def _report(
        self,
        by_context: dict[int, list[dict[str, Any]]],
        elapsed: float,
        killer: _Killer | None,
        n_agents: int,
    ) -> dict[str, Any]:
        opts = self.opts
        violations: list[dict[str, str]] = []
        per_context = []
        checked = {"submissions": 0, "log_records": 0, "replayed": 0, "acknowledged_on_disk": 0}
        local = set(_local_nodes())
        all_records: list[dict[str, Any]] = []
        kills_by = Counter(k["context"] for k in (killer.kills if killer else []))
        for c, handle in enumerate(self.handles):
            records = by_context.get(c, [])
            all_records.extend(records)
            if self.tamper is not None:
                records = self.tamper(handle.name, list(records))
            patient = ContextHandle(
                handle.actor, handle.name, namespace=handle.namespace, retry=CHECK_RETRY
            )
            found: list[Violation] = []
            replayed = 0
            version = None
            stats: dict[str, int] = {}
            try:
                export = patient.export()
                version = int(export["version"])
                verdict = check_context(records, export)
                found.extend(verdict.violations)
                replayed = verdict.counts.replayed
                checked["log_records"] += len(export["log"])
                stats = patient.stats()
            except MorphzError as e:
                found.append(Violation(kind="export_failed", detail=f"{e.code}: {e.message}"))
            path = os.path.join(self.store, handle.name)
            if self.nodes[c] in local and os.path.isdir(path):
                try:
                    found.extend(check_on_disk(path, records))
                    checked["acknowledged_on_disk"] += sum(
                        1 for r in records if r["outcome"] == "committed"
                    )
                except MorphzError as e:
                    found.append(Violation(kind="not_on_disk", detail=f"{e.code}: {e.message}"))
            checked["submissions"] += len(submissions_of(records))
            checked["replayed"] += replayed
            violations.extend(
                {"context": handle.name, "kind": v.kind, "detail": v.detail} for v in found
            )
            fig = figures(by_context.get(c, []), elapsed)
            per_context.append(
                {
                    "name": handle.name,
                    "node_id": self.nodes[c],
                    "version": version,
                    "committed": fig["committed"],
                    "rebased": fig["rebased"],
                    "rejected": fig["rejected"],
                    "retried": fig["retried"],
                    "unknown": fig["unknown"],
                    "throughput_tx_s": fig["throughput_tx_s"],
                    "latency_ms": fig["latency_ms"],
                    "kills": kills_by[handle.name],
                    "batches": stats.get("batches"),
                    "largest_batch": stats.get("largest_batch"),
                    "history_ok": not found,
                    "violations": len(found),
                    "replayed": replayed,
                }
            )
        total = figures(all_records, elapsed)
        requested: dict[str, Any] = (
            {"duration_s": opts.duration_s}
            if opts.duration_s is not None
            else {"transactions": opts.transactions}
        )
        if opts.kill_every_s is not None:
            requested["kill_every_s"] = opts.kill_every_s
        if opts.workload == "trajectories":
            requested["conversations"] = opts.conversations
        doc: dict[str, Any] = {
            "run_id": self.run_id,
            "workload": opts.workload,
            "threads": opts.threads,
            "contexts": opts.contexts,
            "agents": n_agents,
            "conflict_rate": opts.conflict_rate,
            "shared_frames": opts.shared_frames,
            "seed": opts.seed,
            "requested": requested,
            "duration_s": round(elapsed, 3),
            **total,
            "kills": 0 if killer is None else len(killer.kills),
            "kill_log": [] if killer is None else killer.kills,
            "kill_misses": {
                "skipped": 0 if killer is None else killer.skipped,
                "errors": 0 if killer is None else killer.errors,
            },
            "history_ok": not violations,
            "violations": violations[:MAX_VIOLATIONS],
            "violation_count": len(violations),
            "checked": checked,
            "per_context": per_context,
            "store": self.store,
            "namespace": opts.namespace,
        }
        assert tuple(doc) == REPORT_KEYS
        return doc


def run_loadtest(
    options: LoadtestOptions | Mapping[str, Any],
    *,
    progress: Progress | None = None,
    tamper: Tamper | None = None,
) -> dict[str, Any]:
    """Run a load test (see the module docstring) and answer its figures and verdict.

    *progress*, if given, is called about twice a second with ``elapsed_s``,
    ``duration_s``, ``transactions``, ``committed`` (the contexts' versions,
    polled), ``kills`` and ``done``, and once more at the end (``done`` true).
    *tamper* lets a test change a context's records before they are checked.
    The contexts are stopped at the end unless ``keep``; their stores stay.
    A process not yet connected to Ray is connected, and disconnected at the end.
    """
    opts = check_options(options)
    conversations = (
        load_conversations(opts.trajectories_dir, opts.conversations)
        if opts.workload == "trajectories"
        else []
    )
    connected = _connect_ray(opts.address)
    try:
        return _Run(opts, conversations, progress, tamper).go()
    finally:
        if connected:
            import ray

            ray.shutdown()
