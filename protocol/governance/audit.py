"""The durable audit log's rules: the shape of an entry and the one append rule.

:func:`audit_entry` builds a record, :func:`audit_template` is the shape every
governance call passes as its ``audit=`` template, and :func:`append_audit` is
the append rule both stores run inside a write: entries of what happened are
each kept; refusals coalesce per window, a flood shares one row, and the
refused rows kept are capped. Time is always passed in.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import struct
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
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
CHECKPOINT = "audit_checkpoint"
"""The method of the entry that commits to refused rows pruned from the log."""
GENESIS = b"morphz-audit-chain-v1"
"""What the first chained entry links to (rows before it predate the chain)."""
_CHAINED = ("mac", "kid")


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
        "holder": None if holder is None else printable(str(holder)[:MAX_AUDIT_TEXT]),
        "method": printable(str(method)),
        "op": str(op),
        "outcome": outcome or ("allowed" if allowed else "denied"),
        "allowed": bool(allowed),
        "why": printable(str(why)[:MAX_AUDIT_TEXT]),
    }


REJECTED = "rejected"
"""The outcome of the audit entry a rejected transaction leaves (method ``submit``)."""
MAX_REJECTION_FRAMES = 20
"""Conflicting frame ids a rejection's audit entry names at most."""


def rejection_entry(
    receipt: Any, *, client_id: str | None, agent: str | None, at: float
) -> dict[str, Any]:
    """The audit entry of a rejected transaction's *receipt* (a ``Receipt``).

    It keeps what an operator needs to see why writers are refused — the error
    codes, the first message, the base and current versions, the frames that
    collided — and never the transaction's text (content that ``forget`` could not
    reach in the audit log). *agent* is who submitted it, as its capability claims;
    refusals of one kind coalesce per window as every refusal does.
    """
    errors = list(receipt.errors)
    codes = sorted({e.code for e in errors}) or ["rejected"]
    first = errors[0].message if errors else "rejected"
    frames = sorted({c.id for c in receipt.conflicts})[:MAX_REJECTION_FRAMES]
    return audit_entry(
        "submit",
        "commit",
        holder=agent,
        allowed=False,
        outcome=REJECTED,
        why=f"{codes[0]}: {first}",
        at=at,
        code=codes[0],
        codes=codes,
        base_version=int(receipt.base_version),
        version=int(receipt.version),
        client_id=None if client_id is None else printable(client_id[:MAX_AUDIT_TEXT]),
        frames=[printable(f) for f in frames],
    )


def printable(text: str) -> str:
    """*text* with every character that is not printable (line breaks, escape sequences,
    other control and separator characters) escaped as Python writes it (``\\n``,
    ``\\x1b``), so an entry is one line and a claimed name cannot forge another entry."""
    if text.isprintable():
        return text
    return "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text
    )


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
    key: bytes | None = None,
) -> list[int]:
    """Append *records* (see :func:`audit_entry`); the sequence number each landed on.

    A record without a ``time`` is stamped *now*. Entries of what happened
    (``allowed``) each get a row and are never dropped. Refused entries
    (denials, refusals, errors) can be produced without bound by a caller
    without rights, so:

    * identical ones (holder, method, op, outcome, why) within one *window*
      of seconds share one row: within one append its ``count`` grows; a later
      append within the window adds a new row that ``coalesces`` the first one
      (its ``count`` is the number added), so no row is ever rewritten;
    * one window adds at most *per_window* refused rows; the rest of its
      refusals are counted in one flood row (holder None, method ``*``);
    * at most *keep* refused rows are kept: past it, the oldest refused rows
      are pruned down to nine tenths of *keep*, behind one checkpoint entry
      (method :data:`CHECKPOINT`) naming the pruned numbers and committing to
      their MACs.

    With *key* every row is chained (:func:`chain_mac`): it carries ``kid``
    (which key) and ``mac``, an HMAC over the previous row's MAC, its number
    and its content, so an edited, removed or reordered row is found by
    :func:`verify_chain`; the state keeps the head. Sequence numbers are never reused.
    """
    st = _audit_state(rows.state())
    keys: dict[str, int] = st["keys"]
    out: list[int] = []
    fresh: dict[int, dict[str, Any]] = {}  # rows of this call, chained at the end
    for given in records:
        rec = dict(given)
        for name in _CHAINED:
            rec.pop(name, None)
        rec.setdefault("time", now)
        rec.setdefault("last_time", rec["time"])
        rec.setdefault("count", 1)
        rec["allowed"] = bool(rec.get("allowed"))
        rec["why"] = printable(str(rec.get("why", ""))[:MAX_AUDIT_TEXT])
        if rec["allowed"]:
            st["last"] += 1
            fresh[st["last"]] = rec
            out.append(st["last"])
            continue
        at = float(rec["time"])
        if not st["window"] <= at < st["window"] + window:
            st["window"], st["new"] = at, 0
            keys.clear()
        key_ = "\x00".join(str(rec.get(k)) for k in ("holder", "method", "op", "outcome", "why"))
        if key_ not in keys and st["new"] >= per_window:
            key_ = _FLOOD
        seq = keys.get(key_)
        if seq is not None and seq in fresh:  # coalesced within this append: not yet written
            old = fresh[seq]
            old["count"] = int(old.get("count") or 1) + int(rec["count"])
            old["last_time"] = max(float(old.get("last_time") or at), at)
            out.append(seq)
            continue
        if key_ == _FLOOD:
            rec.update(
                holder=None,
                method="*",
                op="*",
                why=f"more than {per_window} different refusals within {window:g} s;"
                " the rest of the window is counted here",
            )
        if seq is not None:
            rec["coalesces"] = seq  # counted on top of an earlier row of this window
        elif key_ != _FLOOD:
            st["new"] += 1
        st["last"] += 1
        fresh[st["last"]] = rec
        if seq is None:
            keys[key_] = st["last"]
        st["refusals"] += 1
        out.append(st["last"])
    if st["refusals"] > keep:
        _prune(rows, st, fresh, keep, now)
    _chain(rows, st, fresh, key)
    rows.set_state(st)
    return out


def _prune(
    rows: AuditRows, st: dict[str, Any], fresh: dict[int, dict[str, Any]], keep: int, now: float
) -> None:
    """Drop the oldest refused rows down to 9/10 of *keep*, behind a checkpoint entry."""
    target = keep - keep // 10
    drop: list[tuple[int, str]] = []
    for seq, old in rows.after(st["pruned"]):
        if st["refusals"] - len(drop) <= target:
            break
        if not old.get("allowed"):
            drop.append((seq, str(old.get("mac") or "")))
        st["pruned"] = seq
    if not drop:
        return
    for seq, _ in drop:
        rows.delete(seq)
    st["refusals"] -= len(drop)
    gone = {seq for seq, _ in drop}
    st["keys"] = {k: s for k, s in st["keys"].items() if s not in gone}
    ranges: list[list[Any]] = []
    for seq, mac in drop:
        if ranges and ranges[-1][1] == seq - 1:
            ranges[-1][1], ranges[-1][2] = seq, mac
        else:
            ranges.append([seq, seq, mac])
    digest = hashlib.sha256("".join(m for _, m in drop).encode("ascii")).hexdigest()
    st["last"] += 1
    fresh[st["last"]] = audit_entry(
        CHECKPOINT,
        "admin",
        holder=None,
        allowed=True,
        why=f"pruned {len(drop)} refused rows (the oldest) to keep at most {keep}",
        at=now,
        pruned=ranges,
        pruned_count=len(drop),
        pruned_digest=digest,
    )


def _chain(
    rows: AuditRows, st: dict[str, Any], fresh: dict[int, dict[str, Any]], key: bytes | None
) -> None:
    """Write the rows of this call, each chained to the one before under *key* (if any)."""
    prev = bytes.fromhex(st["head"]) if st["head"] else GENESIS
    kid = key_id(key) if key is not None else None
    for seq in sorted(fresh):
        rec = fresh[seq]
        if key is not None and kid is not None:
            mac = chain_mac(key, prev, seq, rec)
            rec["kid"], rec["mac"] = kid, mac.hex()
            prev = mac
        rows.put(seq, rec)
    if key is not None and fresh:
        st["head"], st["head_seq"] = prev.hex(), max(fresh)


def key_id(key: bytes) -> str:
    """A short public name of an audit key (the first 8 bytes of its SHA-256, hex)."""
    return hashlib.sha256(b"morphz-audit-key-id\0" + key).hexdigest()[:16]


def canonical(record: Mapping[str, Any]) -> bytes:
    """The bytes a row's MAC covers: its fields but ``mac`` and ``kid``, as sorted JSON."""
    body = {k: v for k, v in record.items() if k not in _CHAINED}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr)
    return text.encode("utf-8", "surrogatepass")


def chain_mac(key: bytes, prev: bytes, seq: int, record: Mapping[str, Any]) -> bytes:
    """HMAC-SHA256 under *key* of the previous row's MAC, this row's number and content."""
    msg = prev + struct.pack(">Q", seq) + canonical(record)
    return hmac.new(key, msg, hashlib.sha256).digest()


@dataclass(frozen=True, slots=True)
class ChainReport:
    """What :func:`verify_chain` found: ``ok``; the first bad row (``bad``, None when ok) and
    ``why``; how many rows were ``checked``, how many predate the chain (``legacy``) and were
    pruned behind checkpoints (``pruned``); the last row's number and MAC (``head_seq``,
    ``head``: what to anchor outside the store)."""

    ok: bool
    bad: int | None
    why: str
    checked: int
    legacy: int
    pruned: int
    head_seq: int
    head: str

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {
            "ok": self.ok,
            "bad": self.bad,
            "why": self.why,
            "checked": self.checked,
            "legacy": self.legacy,
            "pruned": self.pruned,
            "head_seq": self.head_seq,
            "head": self.head,
        }


def verify_chain(
    rows: Iterable[tuple[int, Mapping[str, Any]]],
    keys: Iterable[bytes],
    *,
    state_head: tuple[int, str] | None = None,
    anchor: tuple[int, str] | None = None,
) -> ChainReport:
    """Check the audit rows (ascending) against the audit *keys*.

    Every chained row's MAC must match the previous row's MAC (or, across a
    gap, the last MAC a checkpoint recorded for the pruned range; the first
    chained row links to :data:`GENESIS`); rows before the first chained one are
    counted as ``legacy`` (written before the chain existed), a row without a
    MAC after it is bad. *state_head* (the store's own record of the head) and
    *anchor* (a ``(seq, mac)`` exported earlier and kept outside the store) must
    be found in the chain: a head or anchor the rows do not reach means rows
    were removed at the end.
    """
    by_kid = {key_id(k): k for k in keys}
    listed = list(rows)
    gaps: dict[int, tuple[int, str]] = {}  # last pruned number -> (first pruned, its MAC)
    for _, rec in listed:
        if rec.get("method") == CHECKPOINT and rec.get("allowed"):
            for item in rec.get("pruned") or ():
                try:
                    lo, hi, last_mac = int(item[0]), int(item[1]), str(item[2])
                except (TypeError, ValueError, IndexError):
                    continue
                gaps[hi] = (lo, last_mac)
    prev: bytes | None = None
    prev_seq = 0
    legacy = checked = pruned = 0
    macs: dict[int, str] = {}

    def bad(seq: int, why: str) -> ChainReport:
        return ChainReport(False, seq, why, checked, legacy, pruned, prev_seq, _hex(prev))

    for seq, rec in listed:
        mac_hex = rec.get("mac")
        if not isinstance(mac_hex, str):
            if prev is not None:
                return bad(seq, f"row {seq} carries no MAC after the chain began")
            legacy += 1
            prev_seq = seq
            continue
        gap = gaps.get(seq - 1)
        if gap is not None and gap[0] == prev_seq + 1:  # pruned behind a checkpoint
            try:
                link = bytes.fromhex(gap[1]) or GENESIS
            except ValueError:
                return bad(seq, f"the checkpoint of rows {gap[0]} to {seq - 1} is malformed")
            pruned += seq - gap[0]
        elif seq != prev_seq + 1 and prev is not None:  # (gaps before the chain are legacy)
            gone = (
                f"row {seq - 1} is"
                if seq - 1 == prev_seq + 1
                else f"rows {prev_seq + 1} to {seq - 1} are"
            )
            return bad(prev_seq + 1, f"{gone} missing (removed, and no checkpoint covers it)")
        else:
            link = GENESIS if prev is None else prev
        key = by_kid.get(str(rec.get("kid")))
        if key is None:
            return bad(seq, f"row {seq} was chained under key {rec.get('kid')!r}, not given")
        mac = chain_mac(key, link, seq, rec)
        if not hmac.compare_digest(mac.hex(), mac_hex):
            return bad(seq, f"row {seq} was edited, removed or reordered (its MAC does not match)")
        prev, prev_seq = mac, seq
        macs[seq] = mac_hex
        checked += 1
    for what, head in (("the store's head", state_head), ("the anchored head", anchor)):
        if head is None:
            continue
        seq, mac_hex = head
        if macs.get(seq) != mac_hex:
            at = seq if seq <= prev_seq else prev_seq + 1
            return bad(at, f"{what} (row {seq}) is not in the chain: rows were removed or edited")
    return ChainReport(True, None, "intact", checked, legacy, pruned, prev_seq, _hex(prev))


def _hex(mac: bytes | None) -> str:
    return "" if mac is None else mac.hex()


def _audit_state(raw: Mapping[str, Any] | None) -> dict[str, Any]:
    st = dict(raw or {})
    return {
        "last": int(st.get("last") or 0),
        "window": float(st.get("window") or 0.0),
        "new": int(st.get("new") or 0),
        "keys": dict(st.get("keys") or {}),
        "refusals": int(st.get("refusals") or 0),
        "pruned": int(st.get("pruned") or 0),
        "head": str(st.get("head") or ""),
        "head_seq": int(st.get("head_seq") or 0),
    }
