"""The audit of the HTTP edge's refusals: every 421, 403, 401 and 413 accounted for, cheaply.

A refusal at the edge (:mod:`servers.edge`) never reaches a context, so it cannot go
to a context's audit log; it goes to the edge's own: :class:`EdgeAudit` makes one
entry per refusal — when, the status and code, the client's address, the method,
the path and the ``Host`` (each cut to 200 characters, control characters escaped,
so a hostile header cannot forge a line) — and hands the entries to its *sink* in
batches, at most every :data:`FLUSH_EVERY` seconds, never on the request's path.

Rate-limited: one client (its address) and one code get :data:`PER_WINDOW`
entries of their own per :data:`WINDOW` seconds; past that, refusals are counted
and written as one ``coalesced`` entry (``count``, first and last time) at the next
flush, so a flood of refused requests costs a counter increment each, not a line
each. The default sink writes each entry as one JSON line to the ``morphz.edge``
logger (the server's log). :class:`ChainedSink` — what ``morphz serve`` uses — also
writes every batch into a **tamper-evident log**: the audit log of the store
``<store>/.edge-audit`` (context ``edge``), chained under the audit key exactly as a
context's (:func:`service.governance.record_audit`), on a thread of its own, so
``morphz --store <store>/.edge-audit audit edge --verify`` checks it (exit 0 intact,
1 naming the first edited, removed or reordered entry).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from protocol.errors import StoreLocked
from protocol.governance import audit_entry, printable

log = logging.getLogger("morphz.edge")

WINDOW = 10.0
"""Seconds over which one client and one code get :data:`PER_WINDOW` entries of their own."""
PER_WINDOW = 8
FLUSH_EVERY = 0.5
"""Most seconds an entry waits before its batch is handed to the sink."""
MAX_FIELD = 200
MAX_KEYS = 10_000
"""Most (client, code) pairs tracked at once (the oldest window is forgotten past it)."""

Sink = Callable[[list[dict[str, Any]]], None]


def log_sink(entries: list[dict[str, Any]]) -> None:
    """Write each entry as one JSON line to the ``morphz.edge`` logger."""
    for entry in entries:
        log.warning("edge refusal %s", json.dumps(entry, sort_keys=True))


def _field(value: Any) -> str:
    return printable(str(value)[:MAX_FIELD])


class EdgeAudit:
    """Rate-limited, batched entries of the edge's refusals (see the module doc)."""

    def __init__(self, sink: Sink = log_sink, *, clock: Callable[[], float] = time.time) -> None:
        self.sink = sink
        self._clock = clock
        self._windows: dict[tuple[str, str], tuple[float, int]] = {}
        self._coalesced: dict[tuple[str, str], dict[str, Any]] = {}
        self._pending: list[dict[str, Any]] = []
        self._flush_at: asyncio.TimerHandle | None = None

    def refused(self, status: int, code: str, scope: Any, host: str) -> None:
        """Account for one refusal of the request *scope* (an ASGI scope)."""
        now = self._clock()
        client = scope.get("client") or ("", 0)
        who = _field(client[0] if client else "")
        key = (who, code)
        started, seen = self._windows.get(key, (now, 0))
        if now - started >= WINDOW:
            started, seen = now, 0
        if len(self._windows) >= MAX_KEYS and key not in self._windows:
            self._windows.pop(next(iter(self._windows)))
        self._windows[key] = (started, seen + 1)
        if seen < PER_WINDOW:
            self._pending.append(
                {
                    "at": now,
                    "status": status,
                    "code": code,
                    "client": who,
                    "method": _field(scope.get("method", "")),
                    "path": _field(scope.get("path", "")),
                    "host": _field(host),
                }
            )
        else:
            entry = self._coalesced.setdefault(
                key,
                {"coalesced": True, "code": code, "status": status, "client": who,
                 "count": 0, "first": now},
            )  # fmt: skip
            entry["count"] += 1
            entry["last"] = now
        self._schedule()

    def _schedule(self) -> None:
        if self._flush_at is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not on an event loop: hand them over now
            self.flush()
            return
        self._flush_at = loop.call_later(FLUSH_EVERY, self.flush)

    def flush(self) -> None:
        """Hand every entry made since the last flush to the sink, in one batch."""
        self._flush_at = None
        batch, self._pending = self._pending, []
        batch += list(self._coalesced.values())
        self._coalesced.clear()
        if not batch:
            return
        try:
            self.sink(batch)
        except Exception:  # the audit never fails a request; the loss itself is logged
            log.exception("edge audit: %d entries not written", len(batch))


EDGE_LOG = ".edge-audit"
"""The store (under the served store root) whose audit log chains the edge's refusals."""
EDGE_CONTEXT = "edge"
LOCK_WAIT = 5.0
"""Seconds a write waits for another process (another replica) writing the edge log."""


def edge_log_dir(store_dir: str | os.PathLike[str]) -> Path:
    """Where the edge of the store *store_dir* chains its refusals."""
    return Path(store_dir) / EDGE_LOG


def audit_record(entry: dict[str, Any]) -> dict[str, Any]:
    """The audit-log record of one edge entry (a refusal, or a coalesced count of them)."""
    status, code, client = entry["status"], entry["code"], entry["client"]
    if entry.get("coalesced"):
        rec = audit_entry(
            "*", "edge", holder=None, allowed=False, at=entry["first"], outcome="refused",
            why=f"{status} {code} from {client}: {entry['count']} more in the window",
            status=status, code=code, client=client,
        )  # fmt: skip
        rec["count"], rec["last_time"] = entry["count"], entry["last"]
        return rec
    return audit_entry(
        entry["method"], "edge", holder=None, allowed=False, at=entry["at"], outcome="refused",
        why=f"{status} {code} from {client}", status=status, code=code, client=client,
        path=entry["path"], host=entry["host"],
    )  # fmt: skip


class ChainedSink:
    """A sink that logs each batch (:func:`log_sink`) and chains it into the audit log of
    ``<store>/.edge-audit`` (see the module doc), on one thread of its own. A batch that
    cannot be written (the store unwritable, another writer holding it past
    :data:`LOCK_WAIT`) is logged as lost, never raised into a request."""

    def __init__(self, store_dir: str | os.PathLike[str]) -> None:
        self.root = edge_log_dir(store_dir)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="edge-audit")

    def __call__(self, entries: list[dict[str, Any]]) -> None:
        log_sink(entries)
        self._executor.submit(self.write, [audit_record(e) for e in entries])

    def write(self, records: list[dict[str, Any]]) -> None:
        """Append *records* to the chained log now (opened for this write only, so several
        server processes can share it)."""
        from service.governance import record_audit
        from service.store import open_context

        deadline = time.monotonic() + LOCK_WAIT
        try:
            while True:
                try:
                    ctx = open_context(self.root, EDGE_CONTEXT, create=True)
                    break
                except StoreLocked:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            try:
                record_audit(ctx.backend, records)
            finally:
                ctx.close()
        except Exception:
            log.exception("edge audit: %d entries not written to %s", len(records), self.root)

    def drain(self) -> None:
        """Wait until every batch handed over so far is written."""
        self._executor.submit(lambda: None).result()


__all__ = [
    "EDGE_CONTEXT",
    "EDGE_LOG",
    "FLUSH_EVERY",
    "PER_WINDOW",
    "WINDOW",
    "ChainedSink",
    "EdgeAudit",
    "audit_record",
    "edge_log_dir",
    "log_sink",
]
