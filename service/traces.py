"""Model-call traces (R39) and what influenced a decision (R42).

A trace records which frames and observations were in one model call's input,
what it retrieved and cited, and the transactions it committed. The functions
here read and append them through a context's store; the rules of who took part
and how are :mod:`protocol.usage`'s.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from protocol.errors import NotFound, OutOfRange, RequestError
from protocol.usage import influence as usage_influence
from protocol.usage import roles, tx_citations, tx_writes
from protocol.view import Changeset
from service.reads import logged_tx

if TYPE_CHECKING:
    from service.context import Context

MAX_TRACE_PAGE = 100_000
"""Most traces one :func:`traces` page returns."""


def record_trace(ctx: Context, trace: dict[str, Any]) -> None:
    """Append a model-call trace: which frames and observations were in its input (R39).

    *trace* is a JSON-like map, stamped with the time and written in one durable
    write; by convention it holds ``session``, ``version``, ``tick``,
    ``frames_present``, ``events_present``, the ``action`` taken and the
    ``committed`` versions of its transactions.
    """
    record = {"time": time.time(), **trace}
    ctx.backend.transact(lambda w: w.apply(Changeset(trace=record)))


def traces(
    ctx: Context, *, frame: str | None = None, after: int = 0, limit: int = 1000
) -> list[dict[str, Any]]:
    """Traces numbered above *after* (at most *limit*), each with its ``call`` number;
    with *frame*, only the calls it took part in, each with its ``roles``."""
    rows = ctx.backend.read(lambda v: v.traces(after, limit))
    out = [{"call": n, **t} for n, t in rows]
    if frame is not None:
        out = [{**t, "roles": r} for t in out if (r := roles(t, frame))]
    return out


def influence(
    ctx: Context, *, version: int | None = None, call: int | None = None
) -> dict[str, Any]:
    """What influenced the decision committed at *version*, or everything call *call* did.

    From the usage trace with ``"traced": True``; a version no traced call
    committed answers from the log alone (what it cited), ``"traced": False``.
    """
    if (version is None) == (call is None):
        raise RequestError("name exactly one of a version or a call", code="bad_argument")
    if call is not None:
        if call < 1:
            raise OutOfRange(f"calls are numbered from 1, not {call}")
        rows = traces(ctx, after=call - 1, limit=1)
        if not rows or rows[0]["call"] != call:
            raise NotFound(f"no traced call {call}")
        return {**usage_influence(rows[0]), "traced": True}
    assert version is not None
    current = ctx.version()
    if not 1 <= version <= current:
        code = "future_version" if version > current else None  # not yet committed: refused
        raise OutOfRange(f"version must be between 1 and {current}, not {version}", code=code)
    after = 0
    while rows := traces(ctx, after=after, limit=1000):
        for t in rows:
            if any(d.get("version") == version for d in t.get("decisions") or ()):
                return {**usage_influence(t, version), "traced": True}
        after = rows[-1]["call"]
    record = ctx.txlog(version)
    kind = str(record.get("kind", "model"))
    tx = logged_tx(record) if kind == "model" else None
    decision = {
        "version": version,
        "kind": kind,
        "writes": tx_writes(tx) if tx is not None else [],
        "cited": tx_citations(tx) if tx is not None else [],
    }
    return {**usage_influence({"decisions": [decision]}, version), "traced": False}
