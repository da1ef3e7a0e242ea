"""The context actor's write queues: the group-commit inbox and the audit buffer.

Both run on the actor's event loop and do their writes on its store thread (the
one-thread executor every store access of the actor goes through). What arrives
while a write is in progress forms the next write, so concurrent callers share
durable writes. A caller is answered only after the write holding its request
returned: an acknowledged commit or audit entry is durable (R44).

Turns on a hot frame: when a transaction is rejected with ``conflict`` on a
frame (its receipt carries the frame as it stands, ``current``), the rejected
writer is told at once and holds that frame's *turn*: it is expected to
rebuild from the receipt and retry. Another writer rejected on the same frame
while the turn is held is not answered yet: its submission waits, and when a
commit writes the frame (or the turn lapses after *hold* seconds) it is
decided again, so its rejection carries the frame as it stands after that
commit, and it takes the turn. Writers on one frame therefore retry one after
the other on fresh state instead of all at once on the same stale state,
where all but one would be rejected again (docs/actors.md). A held
submission is only ever decided again, never answered from an old decision.

Gathering: callers that wait for their answer before sending again (an agent
thread, a process writing one update at a time) come back a moment after a
write answers them. Starting the next write at once with whatever else is
pending splits them into cohorts that alternate between writes (at 8 such
callers, writes of 2-3 transactions each). So after a write, the inbox waits
for as many arrivals as the write answered, at most *gather* seconds from the
answer, before it starts the next write: the callers it answered join the same
write as those that arrived during the previous one. A lone caller is never
kept waiting (its own arrival is the one expected), and a full write
(*max_batch*) starts at once. Once a gathering is waited out (callers that
did not come back in time: they stopped, or think between transactions), the
next one waits no longer than the write itself took, until a gathering ends
by the callers' return again: callers that come back slower than a write
takes (a fast disk, a loaded machine) are still waited for, and callers that
come back rarely cost a write the full bound at most once in a row.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeGuard

from actors.server.metrics import ContextMetrics
from protocol.errors import MorphzError
from protocol.receipts import Receipt
from protocol.tx import ContextTx, FieldOp
from protocol.txwire import SubmittedTx

log = logging.getLogger("morphz.context_actor")

Submission = ContextTx | SubmittedTx
"""What the inbox commits: a transaction, with the text it was parsed from when there is one."""

Step = Callable[[Any], Any]
"""Another call's write riding the group (:data:`service.transactions.WriteStep`): an
observation, a claim, a delivery."""

_Item = tuple["SubmittedTx | Step", "asyncio.Future[Any]"]

MAX_BATCH = 256
"""Most transactions one group commit decides in one LMDB write."""
HOLD_SECONDS = 0.1
"""How long a conflicting writer's turn on a frame lasts at most: the others rejected on
that frame are decided again when it commits its retry, or after this long if it does not."""
GATHER_SECONDS = 0.010
"""How long after a write's answers the inbox waits, at most, for the callers it answered
to come back before it starts the next write (see the module docstring)."""
MAX_HELD_PER_FRAME = 64
"""Most writers held waiting for one frame's turn; one more is answered its rejection at once
(it retries on its own), so a crowd on one frame cannot pin unbounded waiters in memory."""
MAX_AUDIT_BATCH = 1024
"""Most audit entries one durable audit write carries (denials are group-committed)."""
DURABLE_DENIALS = 8
"""Denials of one (holder, method) per window written durably before they are answered."""
DENIAL_WINDOW = 10.0
"""Seconds of that window."""
DEFER_SECONDS = 0.5
"""How long the further denials of a window wait in memory before their batch is written."""
MAX_DENIAL_KEYS = 4096
"""Most (holder, method) pairs whose denials are counted at once (the oldest is forgotten)."""


class Inbox:
    """Submitted transactions, committed in groups of at most *max_batch* per durable write.

    *commit_group* runs on the store thread and decides a list of items in one
    write (:func:`service.transactions.commit_group`): transactions, and the writes
    of other calls (:meth:`write`: observations, claims, deliveries) that ride the
    same durable write instead of paying one of their own, each answered its own
    reply or typed error. A group that fails as a whole (nothing written) is
    decided again one item at a time, so one item the store refuses cannot take
    the others down.
    *metrics* records each write, the commit latency and the inbox depth.
    *hold* is the longest turn on a hot frame (see the module docstring); 0
    answers every rejection at once. At most *max_held* writers wait for one
    frame's turn; the next is answered at once. *gather* is the longest wait for the
    callers a write answered before the next write starts (0: never wait).
    """

    def __init__(
        self,
        executor: Executor,
        commit_group: Callable[[list[Any]], list[Any]],
        max_batch: int = MAX_BATCH,
        metrics: ContextMetrics | None = None,
        *,
        hold: float = HOLD_SECONDS,
        max_held: int = MAX_HELD_PER_FRAME,
        gather: float = GATHER_SECONDS,
    ) -> None:
        self._executor = executor
        self._commit_group = commit_group
        self.metrics = metrics if metrics is not None else ContextMetrics("", record=False)
        """Where every count of this inbox goes (``metrics.stats``)."""
        self._metrics = self.metrics
        self.max_batch = max(1, min(int(max_batch), 4096))
        self.hold = max(0.0, min(float(hold), 10.0))
        self.max_held = max(0, int(max_held))
        self.gather = max(0.0, min(float(gather), 1.0))
        self._pending: list[_Item] = []
        self._returning = 0  # callers the last write answered that have not come back yet
        self._gather_until = 0.0  # how long the next write waits for them (loop time)
        self._gathered: asyncio.Future[bool] | None = None  # True: they are all back
        self._came_back = True  # the last gathering ended by its callers' return
        self._flusher: asyncio.Task[None] | None = None
        self._turn: dict[str, asyncio.Future[Any]] = {}  # frame -> the writer whose turn it is
        self._held: dict[str, deque[_Item]] = {}  # frame -> writers waiting for the turn
        self._released: set[asyncio.Future[Any]] = set()  # held, now being decided again
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self.lapsed = 0
        """Turns that ended by lapsing (their writer never retried) rather than by a commit."""
        self.waited_out = 0
        """Gatherings that ended by their time bound rather than by the callers' return."""

    @property
    def pending(self) -> int:
        """Submissions waiting for a write now."""
        return len(self._pending)

    async def submit(self, tx: SubmittedTx) -> dict[str, Any] | MorphzError:
        """Decide *tx* in the next group; its receipt's dict form once durable, or the
        typed error that refused it. Other exceptions propagate."""
        started = time.perf_counter()
        result: dict[str, Any] | MorphzError = await self._enqueue(tx)
        self._metrics.latency(time.perf_counter() - started)
        return result

    async def write(self, step: Step) -> Any:
        """Run *step* (``step(view) -> reply``) in the next group's durable write; its reply
        once durable, or the typed error it raised (it wrote nothing then, and the group's
        other items are kept). Other exceptions propagate."""
        return await self._enqueue(step)

    def _enqueue(self, item: SubmittedTx | Step) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._pending.append((item, future))
        if self._returning:
            self._returning -= 1
            if not self._returning and self._gathered is not None and not self._gathered.done():
                self._gathered.set_result(True)
        self._wake(loop)
        return future

    async def _flush(self) -> None:
        # Runs while anything is pending; what arrives during a write forms the next batch.
        loop = asyncio.get_running_loop()
        while self._pending:
            await self._gather(loop)
            batch = self._pending[: self.max_batch]
            del self._pending[: self.max_batch]
            txs = [tx for tx, _ in batch]
            started = loop.time()
            try:
                results = await loop.run_in_executor(self._executor, self._commit, txs)
            except Exception as e:  # the executor itself failed: answer every waiter
                results = [e] * len(batch)
            answered = 0
            for (item, future), result in zip(batch, results, strict=True):
                if (
                    self.hold
                    and _is_tx(item)
                    and isinstance(result, dict)
                    and self._route(item, future, result)
                ):
                    continue  # held: decided again when its frame changes
                self._released.discard(future)
                if future.done():  # the caller went away; its transaction is decided anyway
                    continue
                if isinstance(result, BaseException) and not isinstance(result, MorphzError):
                    future.set_exception(result)
                else:
                    future.set_result(result)
                answered += 1
            now = loop.time()
            self._returning = answered
            bound = self.gather if self._came_back else min(self.gather, now - started)
            self._gather_until = now + bound

    async def _gather(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wait (boundedly) for the callers the last write answered, unless the next write
        is full already or they are back (see the module docstring)."""
        wait = self._gather_until - loop.time()
        if not self._returning or wait <= 0 or len(self._pending) >= self.max_batch:
            self._returning = 0
            return
        self._gathered = gathered = loop.create_future()
        timer = loop.call_later(wait, _settle, gathered)
        try:
            self._came_back = await gathered
            if not self._came_back:
                self.waited_out += 1
        finally:
            timer.cancel()
            self._gathered = None
            self._returning = 0

    def _wake(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._flusher is None or self._flusher.done():
            self._flusher = loop.create_task(self._flush())

    # -- turns on a hot frame -------------------------------------------------

    def _route(self, tx: SubmittedTx, future: asyncio.Future[Any], result: dict[str, Any]) -> bool:
        """Keep the turns up to date with one decided submission; True if it is held.

        Every turn has a timer, so a turn whose writer never retries lapses.
        """
        was_held = future in self._released
        self._released.discard(future)
        if result.get("status") == "committed":
            if self._turn:
                for written in _frames_written(tx.tx):
                    if written in self._turn:
                        self._pass_turn(written)
            return False
        frame = _hot_frame(result)
        if frame is None or future.done():
            return False  # a turn it holds lapses
        owner = self._turn.get(frame)
        if owner is None or owner is future:
            self._start_turn(frame, future)
            return False
        queue = self._held.setdefault(frame, deque())
        if not was_held and len(queue) >= self.max_held:
            return False  # the line is full: answered now, it retries on its own
        self._metrics.held()
        if was_held:
            queue.appendleft((tx, future))  # it waited already: first in line again
        else:
            queue.append((tx, future))
        return True

    def _start_turn(self, frame: str, future: asyncio.Future[Any]) -> None:
        self._turn[frame] = future
        old = self._timers.pop(frame, None)
        if old is not None:
            old.cancel()
        loop = asyncio.get_running_loop()
        self._timers[frame] = loop.call_later(self.hold, self._lapse, frame, future)

    def _lapse(self, frame: str, future: asyncio.Future[Any]) -> None:
        if self._turn.get(frame) is not future:
            return
        self._timers.pop(frame, None)
        if future in self._released:  # still being decided again: give it its time
            self._start_turn(frame, future)
        else:
            self.lapsed += 1
            self._pass_turn(frame)

    def _pass_turn(self, frame: str) -> None:
        """The turn on *frame* ends: the first writer waiting for it is decided again."""
        if self._turn.get(frame) in self._released:
            return  # the next writer is being decided again already: it will see this commit
        timer = self._timers.pop(frame, None)
        if timer is not None:
            timer.cancel()
        queue = self._held.get(frame)
        while queue:
            tx, future = queue.popleft()
            if future.done():
                continue
            self._start_turn(frame, future)
            self._released.add(future)
            self._pending.insert(0, (tx, future))
            self._wake(asyncio.get_running_loop())
            return
        self._held.pop(frame, None)
        self._turn.pop(frame, None)

    def _commit(self, items: list[SubmittedTx | Step]) -> list[Any]:
        """On the store thread: one durable write for *items*; for each, its receipt's dict
        form, its step's reply, or an exception."""
        started = time.perf_counter()
        try:
            done = [_answer(r) for r in self._commit_group(items)]
        except Exception as e:
            if len(items) == 1:
                self._count(items, [e], time.perf_counter() - started, wrote=False)
                return [e]
        else:
            self._count(items, done, time.perf_counter() - started, wrote=True)
            return done
        out: list[Any] = []
        for item in items:
            started = time.perf_counter()
            try:
                out.append(_answer(self._commit_group([item])[0]))
                wrote = True
            except Exception as e:
                out.append(e)
                wrote = False
            self._count([item], out[-1:], time.perf_counter() - started, wrote=wrote)
        return out

    def _count(self, items: list[Any], results: list[Any], seconds: float, *, wrote: bool) -> None:
        """Record one durable write of *items* (*wrote*: it committed) in the metrics: the
        transactions' outcomes, and how many other calls' writes rode it."""
        txs = [r for item, r in zip(items, results, strict=True) if _is_tx(item)]
        steps = len(items) - len(txs)
        if wrote:
            self._metrics.wrote(len(txs), steps)
        if txs:
            self._metrics.group(txs, seconds)


def _is_tx(item: SubmittedTx | Step) -> TypeGuard[SubmittedTx]:
    """A transaction, not another call's write (those are callables)."""
    return not callable(item)


def _answer(result: Any) -> Any:
    """What a caller is answered: a receipt as its dict form, anything else as it is."""
    return result.to_dict() if isinstance(result, Receipt) else result


def _settle(future: asyncio.Future[bool]) -> None:
    """The gathering's time bound: False, unless the callers came back first."""
    if not future.done():
        future.set_result(False)


def _frames_written(tx: ContextTx) -> set[str]:
    """The frames a committed *tx* changed: the targets of its frame operations, field
    edits included (they write no whole-frame footprint key, yet commit the frame)."""
    frames = {key[2:] for key in tx.footprint()[1] if key.startswith("f:")}
    frames.update(op.id for op in tx.ops if isinstance(op, FieldOp))
    return frames


def _hot_frame(result: dict[str, Any]) -> str | None:
    """The frame a ``conflict`` rejection's writer will retry on: the first one it carries."""
    current = result.get("current")
    if not current or not any(e.get("code") == "conflict" for e in result.get("errors", ())):
        return None
    frame = current[0].get("id")
    return frame if isinstance(frame, str) else None


class AuditBuffer:
    """Audit entries appended durably; concurrent appends share one write.

    *write* runs on the store thread and appends its entries in one durable
    write; *available* says whether there is a store to write to at all (a
    context that failed to open has none: its denials are not recorded).

    Denials are rate-limited in memory (:meth:`deny`): the first
    :data:`DURABLE_DENIALS` of one (holder, method) in a :data:`DENIAL_WINDOW`
    are durable before they are answered; the rest are answered at once and
    written together, every :data:`DEFER_SECONDS`, at most
    :data:`MAX_AUDIT_BATCH` of them (past that, one entry says how many more
    were refused). A flood of refused calls costs a handful of writes, not an
    fsync each. ``writes`` counts the durable writes.
    """

    def __init__(
        self,
        executor: Executor,
        write: Callable[[list[dict[str, Any]]], None],
        available: Callable[[], bool],
        max_batch: int = MAX_AUDIT_BATCH,
    ) -> None:
        self._executor = executor
        self._write = write
        self._available = available
        self._max_batch = max(1, max_batch)
        self._queue: list[tuple[list[dict[str, Any]], asyncio.Future[None]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self.writes = 0
        self._windows: dict[tuple[Any, ...], tuple[float, int]] = {}
        self._deferred: list[dict[str, Any]] = []
        self._dropped = 0
        self._deferring: asyncio.Task[None] | None = None

    async def append(self, entries: list[dict[str, Any]]) -> None:
        """Append *entries*; returns once they are durable, raises what the write raised."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._queue.append((entries, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = loop.create_task(self._flush())
        await future

    async def _flush(self) -> None:
        loop = asyncio.get_running_loop()
        while self._queue:
            batch: list[tuple[list[dict[str, Any]], asyncio.Future[None]]] = []
            size = 0
            while self._queue and (not batch or size < self._max_batch):
                batch.append(self._queue.pop(0))
                size += len(batch[-1][0])
            entries = [e for es, _ in batch for e in es]
            error: BaseException | None = None
            try:
                self.writes += 1
                await loop.run_in_executor(self._executor, self._write, entries)
            except Exception as e:
                error = e
            for _, future in batch:
                if future.done():
                    continue
                if error is None:
                    future.set_result(None)
                else:
                    future.set_exception(error)

    async def append_quietly(self, entry: dict[str, Any]) -> None:
        """Append *entry*; a store that cannot write it is logged, never answered instead."""
        if not self._available():
            return
        try:
            await self.append([entry])
        except Exception:
            log.exception("cannot write the audit entry of %s", entry.get("method"))

    async def deny(self, entry: dict[str, Any]) -> None:
        """Record a denial's *entry*: durable before returning while its (holder, method)
        is within its window's allowance, else deferred to the next batch (see the class)."""
        if not self._available():
            return
        key = (entry.get("holder"), entry.get("claimed"), entry.get("method"))
        now = time.monotonic()
        start, count = self._windows.pop(key, (now, 0))
        if now - start > DENIAL_WINDOW:
            start, count = now, 0
        self._windows[key] = (start, count + 1)  # re-inserted: the dict is oldest-first
        if len(self._windows) > MAX_DENIAL_KEYS:
            self._windows.pop(next(iter(self._windows)))
        if count < DURABLE_DENIALS:
            await self.append_quietly(entry)
            return
        if len(self._deferred) < MAX_AUDIT_BATCH:
            self._deferred.append(entry)
        else:
            self._dropped += 1
        if self._deferring is None or self._deferring.done():
            self._deferring = asyncio.get_running_loop().create_task(self._write_deferred())

    async def _write_deferred(self) -> None:
        await asyncio.sleep(DEFER_SECONDS)
        entries = self._take_deferred()
        if not entries or not self._available():
            return
        try:
            await self.append(entries)
        except Exception:
            log.exception("cannot write %d deferred denial entries", len(entries))

    def _take_deferred(self) -> list[dict[str, Any]]:
        entries, self._deferred = self._deferred, []
        if self._dropped:
            # past the batch's room: one more entry, counting the rest of this kind
            entries.append({**entries[-1], "count": self._dropped, "dropped": True})
            self._dropped = 0
        return entries

    def drain(self) -> None:
        """Write the deferred denials now (on close, before the store thread stops)."""
        entries = self._take_deferred()
        if entries and self._available():
            try:
                self.writes += 1
                self._executor.submit(self._write, entries).result()
            except Exception:
                log.exception("cannot write %d deferred denial entries", len(entries))

    def append_blocking(self, entry: dict[str, Any]) -> None:
        """:meth:`append_quietly` for synchronous callers (not on the event loop)."""
        if not self._available():
            return
        try:
            self._executor.submit(self._write, [entry]).result()
        except Exception:
            log.exception("cannot write the audit entry of %s", entry.get("method"))
