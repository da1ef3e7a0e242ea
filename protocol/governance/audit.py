"""The durable audit log's rules: the shape of an entry and the one append rule.

:func:`audit_entry` builds a record, :func:`audit_template` is the shape every
governance call passes as its ``audit=`` template, and :func:`append_audit` is
the append rule both stores run inside a write: entries of what happened are
each kept; refusals coalesce per window, a flood shares one row, and the
refused rows kept are capped. Time is always passed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol

AUDIT_WINDOW = 60.0
"""Seconds within which identical refused entries coalesce into one row with a count."""
AUDIT_REFUSALS_PER_WINDOW = 100
"""New refused rows one window may add; later refusals of that window share one flood row."""
MAX_AUDIT_REFUSALS = 100_000
"""Refused rows a context keeps; beyond, the oldest refused rows are dropped."""
MAX_AUDIT_TEXT = 512
"""Characters of an audit entry's ``why`` (and of its holder) that are kept."""
EMBEDDED = "embedded"
"""The holder the embedded API (``Context.admit``, ``review``, ``quarantine`` …) audits as."""
WORKER = "runtime:governance-worker"
"""The holder, and the quarantine reviewer, of unattended passes (worker thread or actor task)."""

_FLOOD = "\x00flood"


class AuditRows(Protocol):
    """The audit table as a store offers it inside one write transaction.

    Sequence numbers are positive; the state record keeps the append rule's
    bookkeeping (last number, the current window, counters).
    """

    def get(self, seq: int) -> dict[str, Any] | None:
        """The record numbered *seq*, or None."""

    def put(self, seq: int, record: dict[str, Any]) -> None:
        """Write (or overwrite) the record numbered *seq*."""

    def delete(self, seq: int) -> None:
        """Drop the record numbered *seq*."""

    def after(self, seq: int) -> Iterator[tuple[int, dict[str, Any]]]:
        """Records numbered above *seq*, ascending."""

    def state(self) -> dict[str, Any] | None:
        """The append rule's state record, or None before the first append."""

    def set_state(self, state: dict[str, Any]) -> None:
        """Replace the state record."""


def audit_entry(
    method: str,
    op: str,
    *,
    holder: str | None,
    allowed: bool,
    why: str,
    at: float,
    outcome: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One audit record made at time *at*: who (*holder*, as the capability claims it)
    called *method* (operation *op*), whether it was *allowed*, the *outcome* word
    (``allowed``, ``denied``, ``refused``, ``error``) and *why*; *extra* fields
    (context, tenant, version, decisions …) are kept as given (msgpack types only)."""
    when = float(at)
    return {
        **extra,
        "time": when,
        "last_time": when,
        "count": 1,
        "holder": None if holder is None else str(holder)[:MAX_AUDIT_TEXT],
        "method": str(method),
        "op": str(op),
        "outcome": outcome or ("allowed" if allowed else "denied"),
        "allowed": bool(allowed),
        "why": str(why)[:MAX_AUDIT_TEXT],
    }


def audit_template(
    method: str, *, holder: str | None, context: str | None = None, tenant: str | None = None
) -> dict[str, Any]:
    """The audit template of a governance call (``op`` ``admin``); its decisions fill the rest.

    The one shape every caller passes as ``audit=`` to the governance runs
    (admission, review, quarantine, scan, pass): the embedded API, the context
    actor, the CLI and the workers.
    """
    return {"method": method, "op": "admin", "holder": holder, "context": context, "tenant": tenant}


def append_audit(
    rows: AuditRows,
    records: Iterable[Mapping[str, Any]],
    *,
    now: float,
    window: float = AUDIT_WINDOW,
    per_window: int = AUDIT_REFUSALS_PER_WINDOW,
    keep: int = MAX_AUDIT_REFUSALS,
) -> list[int]:
    """Append *records* (see :func:`audit_entry`); the sequence number each landed on.

    A record without a ``time`` is stamped *now*. Entries of what happened
    (``allowed``) each get a row and are never dropped. Refused entries
    (denials, refusals, errors) can be produced without bound by a caller
    without rights, so:

    * identical ones (holder, method, op, outcome, why) within one *window*
      of seconds share one row, whose ``count`` and ``last_time`` grow;
    * one window adds at most *per_window* refused rows; the rest of its
      refusals are counted in one flood row (holder None, method ``*``);
    * at most *keep* refused rows are kept; the oldest go first.

    So a flood adds at most ``per_window + 1`` rows per window and the table
    never holds more than *keep* refused rows. Sequence numbers are never reused.
    """
    st = _audit_state(rows.state())
    keys: dict[str, int] = st["keys"]
    out: list[int] = []
    for given in records:
        rec = dict(given)
        rec.setdefault("time", now)
        rec.setdefault("last_time", rec["time"])
        rec.setdefault("count", 1)
        rec["allowed"] = bool(rec.get("allowed"))
        rec["why"] = str(rec.get("why", ""))[:MAX_AUDIT_TEXT]
        if rec["allowed"]:
            st["last"] += 1
            rows.put(st["last"], rec)
            out.append(st["last"])
            continue
        at = float(rec["time"])
        if not st["window"] <= at < st["window"] + window:
            st["window"], st["new"] = at, 0
            keys.clear()
        key = "\x00".join(str(rec.get(k)) for k in ("holder", "method", "op", "outcome", "why"))
        if key not in keys and st["new"] >= per_window:
            key = _FLOOD
        seq = keys.get(key)
        old = None if seq is None else rows.get(seq)
        if seq is not None and old is not None:
            old["count"] = int(old.get("count") or 1) + int(rec["count"])
            old["last_time"] = max(float(old.get("last_time") or at), at)
            rows.put(seq, old)
            out.append(seq)
            continue
        if key == _FLOOD:
            rec.update(
                holder=None,
                method="*",
                op="*",
                why=f"more than {per_window} different refusals within {window:g} s;"
                " the rest of the window is counted here",
            )
        else:
            st["new"] += 1
        st["last"] += 1
        rows.put(st["last"], rec)
        keys[key] = st["last"]
        st["refusals"] += 1
        out.append(st["last"])
    if st["refusals"] > keep:
        drop: list[int] = []
        for seq, old in rows.after(st["pruned"]):
            if st["refusals"] - len(drop) <= keep:
                break
            if not old.get("allowed"):
                drop.append(seq)
            st["pruned"] = seq
        for seq in drop:
            rows.delete(seq)
        st["refusals"] -= len(drop)
        gone = set(drop)
        st["keys"] = {k: s for k, s in keys.items() if s not in gone}
    rows.set_state(st)
    return out


def _audit_state(raw: Mapping[str, Any] | None) -> dict[str, Any]:
    st = dict(raw or {})
    return {
        "last": int(st.get("last") or 0),
        "window": float(st.get("window") or 0.0),
        "new": int(st.get("new") or 0),
        "keys": dict(st.get("keys") or {}),
        "refusals": int(st.get("refusals") or 0),
        "pruned": int(st.get("pruned") or 0),
    }
