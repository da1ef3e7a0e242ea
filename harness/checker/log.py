"""Reading a context's transaction log for the history checker: versions, transactions, changes."""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from harness.checker.verdicts import LOG_GAP, REPLAY_DIVERGED, Violation
from protocol.errors import MorphzError
from protocol.tx import ContextTx
from protocol.txlang import parse_tx
from protocol.txwire import tx_from_dict


def checked_keys(tx: ContextTx) -> frozenset[str]:
    """The keys of *tx* the engine's conflict check looks at: all but event sources."""
    reads, writes = tx.footprint()
    return writes | {k for k in reads if not k.startswith("e:")}


def int_or_none(value: Any) -> int | None:
    """*value* if it is an int (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def index_log(
    log: list[Mapping[str, Any]], out: list[Violation]
) -> tuple[dict[int, Mapping[str, Any]], bool]:
    """The records by version, and whether the versions are exactly 1..N."""
    records: dict[int, Mapping[str, Any]] = {}
    complete = True
    for position, rec in enumerate(log):
        version = int_or_none(rec.get("version")) if isinstance(rec, Mapping) else None
        if version is None or version < 1:
            out.append(Violation(kind=LOG_GAP, detail=f"log record #{position} has no version"))
            complete = False
            continue
        if version in records:
            out.append(Violation(kind=LOG_GAP, detail=f"two log records at v{version}"))
            complete = False
            continue
        records[version] = rec
    missing = sorted(set(range(1, max(records, default=0) + 1)) - records.keys())
    if missing:
        shown = ", ".join(f"v{v}" for v in missing[:5]) + (" …" if len(missing) > 5 else "")
        out.append(
            Violation(
                kind=LOG_GAP,
                detail=f"the log misses {len(missing)} version(s): {shown}; replay skipped",
            )
        )
        complete = False
    return dict(sorted(records.items())), complete


def logged_txs(
    records: Mapping[int, Mapping[str, Any]], out: list[Violation]
) -> dict[int, ContextTx]:
    """The transaction of every model record, with the record's client id attached.

    A transaction committed with a client id given apart from its text is
    logged with that text, so the client id comes from the record.
    """
    txs: dict[int, ContextTx] = {}
    for version, rec in records.items():
        if rec.get("kind") != "model":
            continue
        try:
            if rec.get("text") is not None:
                tx = parse_tx(rec["text"], legacy=True)
            else:
                tx = tx_from_dict(rec.get("tx"))
        except (MorphzError, TypeError, ValueError) as e:
            out.append(
                Violation(kind=REPLAY_DIVERGED, detail=f"v{version}: unreadable transaction: {e}")
            )
            continue
        client_id = rec.get("client_id")
        if tx.client_id is None and isinstance(client_id, str) and client_id:
            tx = tx.model_copy(update={"client_id": client_id})
        if tx.client_id != client_id or tx.base_version != rec.get("base_version"):
            out.append(
                Violation(
                    kind=REPLAY_DIVERGED,
                    detail=f"v{version}: the logged transaction (base v{tx.base_version}, "
                    f"client id {tx.client_id!r}) disagrees with its record "
                    f"(base v{rec.get('base_version')}, client id {client_id!r})",
                )
            )
        txs[version] = tx
    return txs


def changes_of(rec: Mapping[str, Any]) -> list[str]:
    """The ids (display form) a log record says it changed; [] if it says nothing readable."""
    changes = rec.get("changes")
    if not isinstance(changes, (list, tuple)):
        return []
    return [c for c in changes if isinstance(c, str)]


def change_index(records: Mapping[int, Mapping[str, Any]]) -> dict[str, list[int]]:
    """For each changed id (display form), the versions that changed it, ascending."""
    index: dict[str, list[int]] = defaultdict(list)
    for version, rec in records.items():  # records are sorted by version
        for key in dict.fromkeys(changes_of(rec)):
            index[key].append(version)
    return index


def changed_between(versions: list[int], after: int, before: int) -> int | None:
    """The first version strictly between *after* and *before*, if any."""
    i = bisect.bisect_right(versions, after)
    if i < len(versions) and versions[i] < before:
        return versions[i]
    return None
