"""The context actor's write queues: the group-commit inbox and the audit buffer.

Both run on the actor's event loop and do their writes on its store thread (the
one-thread executor every store access of the actor goes through). What arrives
while a write is in progress forms the next write, so concurrent callers share
durable writes. A caller is answered only after the write holding its request
returned: an acknowledged commit or audit entry is durable (R44).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from actors.metrics import NO_METRICS, ContextMetrics
from protocol.errors import MorphzError
from protocol.receipts import Receipt
from protocol.tx import ContextTx
from protocol.wire import SubmittedTx

log = logging.getLogger("morphz.context_actor")

Submission = ContextTx | SubmittedTx
"""What the inbox commits: a transaction, with the text it was parsed from when there is one."""

MAX_BATCH = 256
"""Most transactions one group commit decides in one LMDB write."""
MAX_AUDIT_BATCH = 1024
"""Most audit entries one durable audit write carries (denials are group-committed)."""


class Inbox:
    """Submitted transactions, committed in groups of at most *max_batch* per durable write.

    *commit_many* runs on the store thread and decides a list of transactions
    in one write (:meth:`service.context.Context.commit_many`). A group that
    fails as a whole (nothing written) is decided again one transaction at a
    time, so one transaction the store refuses cannot take the others down.
    *metrics* records each write, the commit latency and the inbox depth.
    """

    def __init__(
        self,
        executor: Executor,
        commit_many: Callable[[list[SubmittedTx]], list[Receipt]],
        max_batch: int = MAX_BATCH,
        metrics: ContextMetrics = NO_METRICS,
    ) -> None:
        self._executor = executor
        self._commit_many = commit_many
        self._metrics = metrics
        self.max_batch = max(1, min(int(max_batch), 4096))
        self._pending: list[tuple[SubmittedTx, asyncio.Future[Any]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self.batches = 0
        """LMDB writes that committed submissions."""
        self.transactions = 0
        """Submissions those writes decided."""
        self.largest = 0
        """The biggest group so far."""

    @property
    def pending(self) -> int:
        """Submissions waiting for a write now."""
        return len(self._pending)

    async def submit(self, tx: SubmittedTx) -> dict[str, Any] | MorphzError:
        """Decide *tx* in the next group; its receipt's dict form once durable, or the
        typed error that refused it. Other exceptions propagate."""
        started = time.perf_counter()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._pending.append((tx, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = loop.create_task(self._flush())
        result: dict[str, Any] | MorphzError = await future
        self._metrics.latency(time.perf_counter() - started)
        return result

    async def _flush(self) -> None:
        # Runs while anything is pending; what arrives during a write forms the next batch.
        loop = asyncio.get_running_loop()
        while self._pending:
            batch = self._pending[: self.max_batch]
            del self._pending[: self.max_batch]
            self._metrics.inbox_depth(len(self._pending))
            txs = [tx for tx, _ in batch]
            try:
                results = await loop.run_in_executor(self._executor, self._commit, txs)
            except Exception as e:  # the executor itself failed: answer every waiter
                results = [e] * len(batch)
            for (_, future), result in zip(batch, results, strict=True):
                if future.done():  # the caller went away; its transaction is decided anyway
                    continue
                if isinstance(result, BaseException) and not isinstance(result, MorphzError):
                    future.set_exception(result)
                else:
                    future.set_result(result)

    def _commit(self, txs: list[SubmittedTx]) -> list[Any]:
        """On the store thread: one durable write for *txs*; receipt dicts or exceptions."""
        started = time.perf_counter()
        try:
            receipts = self._commit_many(txs)
        except Exception as e:
            if len(txs) == 1:
                self._metrics.group([e], time.perf_counter() - started)
                return [e]
        else:
            seconds = time.perf_counter() - started
            self._count(len(txs))
            done = [r.to_dict() for r in receipts]
            self._metrics.group(done, seconds)
            return done
        out: list[Any] = []
        for tx in txs:
            started = time.perf_counter()
            try:
                out.append(self._commit_many([tx])[0].to_dict())
                self._count(1)
            except Exception as e:
                out.append(e)
            self._metrics.group(out[-1:], time.perf_counter() - started)
        return out

    def _count(self, n: int) -> None:
        self.batches += 1
        self.transactions += n
        self.largest = max(self.largest, n)


class AuditBuffer:
    """Audit entries appended durably; concurrent appends share one write.

    *write* runs on the store thread and appends its entries in one durable
    write; *available* says whether there is a store to write to at all (a
    context that failed to open has none: its denials are not recorded).
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

    def append_blocking(self, entry: dict[str, Any]) -> None:
        """:meth:`append_quietly` for synchronous callers (not on the event loop)."""
        if not self._available():
            return
        try:
            self._executor.submit(self._write, [entry]).result()
        except Exception:
            log.exception("cannot write the audit entry of %s", entry.get("method"))
