"""The audit append rule (pure): refusals coalesce per window, a flood is counted, a cap holds."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from protocol.errors import OutOfRange, RequestError
from protocol.governance import append_audit, audit_entry, check_page

NOW = 5000.0
"""The writer's clock: it stamps only records that carry no time of their own."""


class Rows:
    """A dict-backed AuditRows."""

    def __init__(self) -> None:
        self.rows: dict[int, dict[str, Any]] = {}
        self.st: dict[str, Any] | None = None

    def get(self, seq: int) -> dict[str, Any] | None:
        row = self.rows.get(seq)
        return None if row is None else dict(row)

    def put(self, seq: int, record: dict[str, Any]) -> None:
        self.rows[seq] = dict(record)

    def delete(self, seq: int) -> None:
        del self.rows[seq]

    def after(self, seq: int) -> Iterator[tuple[int, dict[str, Any]]]:
        for n in sorted(self.rows):
            if n > seq:
                yield n, dict(self.rows[n])

    def state(self) -> dict[str, Any] | None:
        return self.st

    def set_state(self, state: dict[str, Any]) -> None:
        self.st = dict(state)


def denial(holder: str = "mallory", method: str = "frame", at: float = 1000.0) -> dict[str, Any]:
    return audit_entry(method, "read", holder=holder, allowed=False, why="no grant", at=at)


def allowed(at: float = 1000.0) -> dict[str, Any]:
    return audit_entry("export_frame", "read", holder="curator", allowed=True, why="ok", at=at)


def test_identical_denials_coalesce_within_a_window() -> None:
    rows = Rows()
    seqs = append_audit(rows, [denial(at=1000 + i) for i in range(50)], now=NOW)
    assert set(seqs) == {1}
    assert rows.rows[1]["count"] == 50 and rows.rows[1]["last_time"] == 1049
    assert append_audit(rows, [denial(method="state", at=1050)], now=NOW) == [2]
    assert append_audit(rows, [denial(at=1070)], now=NOW) == [3]  # a new window: a new row
    # allowed entries are never coalesced
    assert append_audit(rows, [allowed(at=1071), allowed(at=1071)], now=NOW) == [4, 5]


def test_a_flood_of_different_denials_adds_a_bounded_number_of_rows() -> None:
    rows = Rows()
    flood = [denial(holder=f"h{i}", at=1000.0) for i in range(1000)]
    append_audit(rows, flood, per_window=10, now=NOW)
    assert len(rows.rows) == 11
    last = rows.rows[11]
    assert last["method"] == "*" and last["holder"] is None and last["count"] == 990
    assert sum(r["count"] for r in rows.rows.values()) == 1000


def test_refused_rows_are_capped_oldest_first_and_allowed_rows_kept() -> None:
    rows = Rows()
    append_audit(rows, [allowed(at=1.0)], now=NOW)
    for i in range(30):  # one window each: thirty distinct rows
        append_audit(rows, [denial(at=1000.0 + 100 * i)], keep=5, now=NOW)
        append_audit(rows, [allowed(at=1000.0 + 100 * i)], keep=5, now=NOW)
    refused = [n for n, r in rows.rows.items() if not r["allowed"]]
    kept = [n for n, r in rows.rows.items() if r["method"] == "export_frame"]
    checkpoints = [r for r in rows.rows.values() if r["method"] == "audit_checkpoint"]
    assert len(refused) <= 5 and len(kept) == 31  # the newest refusals stay, allowed ones all
    assert refused == sorted(refused)[-len(refused) :] and max(refused) > max(kept) - 3
    # each prune is one checkpoint naming what went, down to 9/10 of keep
    assert sum(r["pruned_count"] for r in checkpoints) == 30 - len(refused)
    last = max(rows.rows)
    assert append_audit(rows, [allowed(at=9e9)], keep=5, now=NOW) == [last + 1]  # never reused


def test_a_record_without_a_time_is_stamped_with_the_writers_clock() -> None:
    rows = Rows()
    entry = {k: v for k, v in denial().items() if k not in ("time", "last_time")}
    assert append_audit(rows, [entry, denial(at=1.0)], now=NOW) == [1, 2]
    assert rows.rows[1]["time"] == rows.rows[1]["last_time"] == NOW
    assert rows.rows[2]["time"] == 1.0


def test_entries_are_bounded_in_size() -> None:
    e = audit_entry("m", "read", holder="x" * 10_000, allowed=False, why="y" * 10_000, at=0)
    assert len(e["holder"]) == 512 and len(e["why"]) == 512
    assert e["outcome"] == "denied" and e["count"] == 1


@pytest.mark.parametrize(
    "after, limit, error",
    [(-1, 10, OutOfRange), (0, 0, OutOfRange), (0, 1001, OutOfRange), ("0", 10, RequestError)],
)
def test_bad_pages_are_typed_errors(after: Any, limit: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        check_page(after, limit)
