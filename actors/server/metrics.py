"""The context actors' metrics, exported through Ray's metrics API (``ray.util.metrics``).

Every metric is tagged with the context it measures (``context``, and the Ray
``namespace`` its actor is named in); Ray exports them on the Prometheus
endpoint of the node the actor runs on (its metrics export port), prefixed
``ray_``. :data:`METRICS` lists each one: name, type, tags and meaning
(docs/operations.md is the same table for operators).

:class:`ContextMetrics` is what an actor records through. Outside a Ray
process (the plain actor class of the unit tests, a process that never
initialized Ray) it is a no-op, so the actor works the same without Ray. The
Ray metric objects are made once per process (:func:`_instruments`) and shared
by every context the process serves; Ray is never imported here, only looked up
in ``sys.modules`` (an actor process has imported it already).

Recording is kept off the commit path: what a write or a submission records is
added up in memory (counters by tag, histogram observations in order) and sent
to Ray by :meth:`ContextMetrics.flush`, which the actor's sampler calls every
:data:`SAMPLE_EVERY` seconds, beside the gauges, and which runs at once when
:data:`MAX_PENDING` observations wait; closing the actor flushes too. So Ray
receives the same counts, sums and observations, up to a second later, and a
process killed outright loses at most that second of metrics (never a count of
``stats()``, which is kept at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import threading
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, fields
from typing import Any

log = logging.getLogger("morphz.metrics")

PREFIX = "morphz_"
"""Every metric's name starts with this (Ray adds ``ray_`` in front when exporting)."""
ENV = "MORPHZ_METRICS"
"""Set to ``0`` in an actor's environment to record nothing (for overhead measurements)."""
SAMPLE_EVERY = 1.0
"""Seconds between two samples of the gauges (inbox depth, index lag) and two flushes
of what was recorded in between."""
MAX_PENDING = 4096
"""Most histogram observations kept in memory before they are flushed to Ray at once."""

SECONDS_BOUNDARIES = (
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.5,
    1.0,
    2.0,
    5.0,
    10.0,
)
"""Histogram buckets of the latencies, in seconds."""
BATCH_BOUNDARIES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)
"""Histogram buckets of the group-commit batch size, in transactions."""


@dataclass(frozen=True)
class MetricSpec:
    """One metric: its name (without Ray's ``ray_`` prefix), type, tag keys and meaning."""

    name: str
    kind: str
    tags: tuple[str, ...]
    description: str
    boundaries: tuple[float, ...] = ()


_CTX = ("context", "namespace")

COMMITS = MetricSpec(
    "morphz_commits_total", "counter", _CTX, "Transactions committed (duplicates not counted)."
)
REJECTIONS = MetricSpec(
    "morphz_rejections_total",
    "counter",
    (*_CTX, "code"),
    "Transactions rejected, by the error code of their receipt's first error.",
)
REBASES = MetricSpec(
    "morphz_rebases_total",
    "counter",
    _CTX,
    "Committed transactions that were based on an older version (rebased).",
)
DUPLICATES = MetricSpec(
    "morphz_duplicates_total",
    "counter",
    _CTX,
    "Resubmissions answered with the original receipt (a known client id).",
)
BATCH_SIZE = MetricSpec(
    "morphz_group_commit_size",
    "histogram",
    _CTX,
    "Transactions decided by one durable group-commit write.",
    tuple(float(b) for b in BATCH_BOUNDARIES),
)
COMMIT_LATENCY = MetricSpec(
    "morphz_commit_latency_seconds",
    "histogram",
    _CTX,
    "Seconds from a submission reaching the actor to its durable receipt.",
    SECONDS_BOUNDARIES,
)
WRITE_SECONDS = MetricSpec(
    "morphz_durable_write_seconds",
    "histogram",
    _CTX,
    "Seconds of one group-commit write on the store thread, fsync included.",
    SECONDS_BOUNDARIES,
)
INBOX_DEPTH = MetricSpec(
    "morphz_inbox_depth",
    "gauge",
    _CTX,
    "Submissions waiting for the next group-commit write.",
)
INDEX_LAG = MetricSpec(
    "morphz_index_lag",
    "gauge",
    _CTX,
    "Committed index updates the search index has not applied yet (once searched).",
)
DENIALS = MetricSpec(
    "morphz_audit_denials_total",
    "counter",
    (*_CTX, "op"),
    "Calls refused by the capability guard (each written to the audit log), by operation.",
)

METRICS: tuple[MetricSpec, ...] = (
    COMMITS,
    REJECTIONS,
    REBASES,
    DUPLICATES,
    BATCH_SIZE,
    COMMIT_LATENCY,
    WRITE_SECONDS,
    INBOX_DEPTH,
    INDEX_LAG,
    DENIALS,
)
"""Every metric a context actor exports."""

_made: dict[str, Any] | None = None


def _ray() -> Any:
    """The ``ray`` module if this process imported it and is connected, else None."""
    ray = sys.modules.get("ray")
    if ray is None:
        return None
    try:
        return ray if ray.is_initialized() else None
    except Exception:  # a half-imported or shut-down Ray: no metrics
        return None


def _instruments() -> dict[str, Any] | None:
    """This process's Ray metric objects by name, made on first use; None without Ray."""
    global _made
    if _made is not None:
        return _made
    if _ray() is None or os.environ.get(ENV) == "0":
        return None
    try:
        from ray.util import metrics as rm

        made: dict[str, Any] = {}
        for spec in METRICS:
            if spec.kind == "counter":
                made[spec.name] = rm.Counter(spec.name, spec.description, tag_keys=spec.tags)
            elif spec.kind == "gauge":
                made[spec.name] = rm.Gauge(spec.name, spec.description, tag_keys=spec.tags)
            else:
                made[spec.name] = rm.Histogram(
                    spec.name,
                    spec.description,
                    boundaries=list(spec.boundaries),
                    tag_keys=spec.tags,
                )
    except Exception:
        log.warning("cannot create the Ray metrics; recording nothing", exc_info=True)
        return None
    _made = made
    return made


@dataclass(slots=True)
class ContextStats:
    """Every count one context actor keeps since its process started, in one object.

    Only :class:`ContextMetrics` changes it (each recording method counts here,
    with or without Ray); the actor's ``stats()`` answers :meth:`as_dict` and
    ``describe()`` its ``denials``.
    """

    batches: int = 0
    """LMDB writes that committed submissions."""
    transactions: int = 0
    """Submissions those writes decided."""
    writes: int = 0
    """Group writes of any kind: those of ``batches`` and those that carried only the writes
    of other calls (observations, claims, deliveries)."""
    joined: int = 0
    """Writes of other calls (observations, claims, deliveries) that rode a group write."""
    largest_batch: int = 0
    """The biggest group so far."""
    held: int = 0
    """Conflict rejections held back until the frame they conflicted on changed."""
    wire_rejections: int = 0
    """Payloads that did not decode."""
    governance_passes: int = 0
    """Unattended governance passes that ran to the end."""
    governance_errors: int = 0
    """Unattended governance passes that failed."""
    commits: int = 0
    """Transactions committed (duplicates not counted)."""
    rejections: int = 0
    """Transactions rejected (any code)."""
    rebases: int = 0
    """Committed transactions that were rebased."""
    duplicates: int = 0
    """Resubmissions answered with their original receipt."""
    denials: int = 0
    """Calls refused by the capability guard."""
    index_lag: int | None = None
    """The index lag last sampled; None until the index worker runs."""

    def as_dict(self) -> dict[str, int]:
        """The counts ``stats()`` answers (``index_lag`` once sampled; ``denials`` is
        ``describe()``'s)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        del out["denials"]
        if self.index_lag is None:
            del out["index_lag"]
        return out


class ContextMetrics:
    """What one context's actor records; a no-op when the process runs without Ray.

    *context* and *namespace* are the tags every metric carries; ``record=False``
    makes a recorder that records nothing even under Ray. Each method is
    cheap and never raises: a metric that cannot be recorded is dropped (and
    logged once), never answered to a caller instead of its receipt.
    """

    def __init__(self, context: str, namespace: str | None = None, *, record: bool = True) -> None:
        self.tags = {"context": context, "namespace": namespace or ""}
        made = _instruments() if record else None
        self.enabled = made is not None
        """True when the metrics go to Ray; False for the no-op fallback."""
        self._m: dict[str, Any] = made or {}
        self._by: dict[tuple[str, str], dict[str, str]] = {}
        self._failed = False
        # Recorded, not sent to Ray yet (see the module docstring); the store thread and
        # the event loop both record, so changes and the flush's swap hold the lock.
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str, str], float] = {}  # (metric, tag, value) -> sum
        self._observed: list[tuple[str, float]] = []  # (histogram, value), in order
        self.stats = ContextStats()
        """Every count, kept with or without Ray (the one place an actor counts)."""

    def _tags(self, key: str, value: str) -> dict[str, str]:
        # Tag dicts with an extra key, made once per (key, value): no dict per record.
        tags = self._by.get((key, value))
        if tags is None:
            tags = self._by[(key, value)] = {**self.tags, key: value}
        return tags

    def _record(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception:
            if not self._failed:
                self._failed = True
                log.warning("cannot record a metric of %s", self.tags, exc_info=True)

    def group(self, results: Iterable[Any], write_seconds: float) -> None:
        """One durable group-commit write: *results* are its receipts' dict forms (an
        exception stands for a submission the store refused), *write_seconds* its time."""
        size = commits = rebases = duplicates = 0
        codes: dict[str, int] = {}
        for r in results:
            size += 1
            if not isinstance(r, dict):
                continue
            if r.get("duplicate"):
                duplicates += 1
            elif r.get("status") == "committed":
                commits += 1
                if r.get("rebased"):
                    rebases += 1
            else:
                errors = r.get("errors") or ()
                code = str(errors[0].get("code", "unknown")) if errors else "unknown"
                codes[code] = codes.get(code, 0) + 1
        stats = self.stats
        stats.commits += commits
        stats.rebases += rebases
        stats.duplicates += duplicates
        stats.rejections += sum(codes.values())
        if not self.enabled:
            return
        with self._lock:
            counts = self._counts
            for name, n in ((COMMITS.name, commits), (REBASES.name, rebases)):
                if n:
                    counts[(name, "", "")] = counts.get((name, "", ""), 0) + n
            if duplicates:
                key = (DUPLICATES.name, "", "")
                counts[key] = counts.get(key, 0) + duplicates
            for code, n in codes.items():
                key = (REJECTIONS.name, "code", code)
                counts[key] = counts.get(key, 0) + n
            self._observed.append((BATCH_SIZE.name, size))
            self._observed.append((WRITE_SECONDS.name, write_seconds))
            full = len(self._observed) >= MAX_PENDING
        if full:
            self.flush()

    def wrote(self, n: int, joined: int = 0) -> None:
        """One durable group write committed *n* submissions and *joined* other calls' writes."""
        stats = self.stats
        stats.writes += 1
        stats.joined += joined
        if n:
            stats.batches += 1
            stats.transactions += n
            stats.largest_batch = max(stats.largest_batch, n)

    def held(self) -> None:
        """One conflict rejection held back for a turn on its hot frame."""
        self.stats.held += 1

    def wire_rejected(self) -> None:
        """One payload that did not decode (answered with a ``wire_error`` rejection)."""
        self.stats.wire_rejections += 1
        self.rejected("wire_error")

    def governance_pass(self, ok: bool) -> None:
        """One unattended governance pass ended: ran to the end (*ok*) or failed."""
        if ok:
            self.stats.governance_passes += 1
        else:
            self.stats.governance_errors += 1

    def rejected(self, code: str, n: int = 1) -> None:
        """*n* submissions rejected with *code* outside a group write (e.g. ``wire_error``)."""
        self.stats.rejections += n
        if self.enabled:
            with self._lock:
                key = (REJECTIONS.name, "code", code)
                self._counts[key] = self._counts.get(key, 0) + n

    def latency(self, seconds: float) -> None:
        """One submission's time from arrival to its durable receipt."""
        if self.enabled:
            with self._lock:
                self._observed.append((COMMIT_LATENCY.name, seconds))
                full = len(self._observed) >= MAX_PENDING
            if full:
                self.flush()

    def flush(self) -> None:
        """Send Ray what was recorded since the last flush: each counter's sum by tag, each
        histogram observation (see the module docstring). Never raises."""
        if not self.enabled:
            return
        with self._lock:
            counts, self._counts = self._counts, {}
            observed, self._observed = self._observed, []
        if not counts and not observed:
            return
        m, tags = self._m, self.tags

        def record() -> None:
            for (name, key, tag), n in counts.items():
                m[name].inc(n, self._tags(key, tag) if key else tags)
            for name, value in observed:
                m[name].observe(value, tags)

        self._record(record)

    def inbox_depth(self, n: int) -> None:
        """Submissions waiting now."""
        if self.enabled:
            self._record(lambda: self._m[INBOX_DEPTH.name].set(n, self.tags))

    def index_lag(self, n: int) -> None:
        """Index updates not applied yet."""
        self.stats.index_lag = n
        if self.enabled:
            self._record(lambda: self._m[INDEX_LAG.name].set(n, self.tags))

    def denied(self, op: str) -> None:
        """One call refused by the capability guard for operation *op*."""
        self.stats.denials += 1
        if self.enabled:
            self._record(lambda: self._m[DENIALS.name].inc(1, self._tags("op", op)))

    def totals(self) -> dict[str, int]:
        """The local counts: ``commits``, ``rejections``, ``rebases``, ``duplicates``, and
        ``index_lag`` once sampled (what ``morphz top`` shows beside the actor's stats)."""
        stats = self.stats
        out = {
            "commits": stats.commits,
            "rejections": stats.rejections,
            "rebases": stats.rebases,
            "duplicates": stats.duplicates,
        }
        if stats.index_lag is not None:
            out["index_lag"] = stats.index_lag
        return out

    def start_sampler(
        self, sample: Callable[[], Awaitable[None]], every: float = SAMPLE_EVERY
    ) -> asyncio.Task[None] | None:
        """Run *sample* every *every* seconds on the running event loop (which sets the
        gauges); None without Ray or outside an event loop. Cancel the task to stop."""
        if not self.enabled:
            return None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None

        async def run() -> None:
            while True:
                with contextlib.suppress(Exception):
                    await sample()
                self.flush()
                await asyncio.sleep(every)

        return loop.create_task(run())


NO_METRICS = ContextMetrics("", record=False)
"""A recorder that sends nothing to Ray (its counts are kept, as every recorder's)."""


__all__ = [
    "BATCH_BOUNDARIES",
    "ENV",
    "MAX_PENDING",
    "METRICS",
    "NO_METRICS",
    "PREFIX",
    "SAMPLE_EVERY",
    "SECONDS_BOUNDARIES",
    "ContextMetrics",
    "ContextStats",
    "MetricSpec",
]
