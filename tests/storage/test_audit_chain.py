"""A tamper-evident audit log, on real LMDB files: every row chained to the one before under
an audit key kept apart from the store, coalesced counts as new rows, pruning behind a
checkpoint, and ``morphz audit --verify`` exiting 0 on an intact chain and 1 naming the first
bad row when one was edited, removed or reordered, or when the head does not match an anchor.
On main before this change rows were rewritten in place and nothing chained them (every
verification below would have nothing to check)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lmdb
import pytest
from click.testing import CliRunner

from morphz.cli import cli as morphz_cli
from protocol.governance import audit_entry, verify_chain
from service.governance import record_audit
from storage import LmdbStore
from storage.keys import AUDIT_KEY_ENV, audit_key
from storage.lmdb.records import _pack, _u64, _unpack


@pytest.fixture()
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(AUDIT_KEY_ENV, str(tmp_path / "keys" / "audit.key"))
    root = tmp_path / "stores"
    s = LmdbStore.open(root / "ctx")
    try:
        record_audit(s, [entry("read", f"agent-{i}", allowed=True) for i in range(3)])
        record_audit(s, [entry("frame", "mallory", allowed=False)])
        record_audit(s, [entry("frame", "mallory", allowed=False)])  # coalesced: a new row
        record_audit(s, [entry("admit", "ops", allowed=True)])
    finally:
        s.close()
    return root


def entry(method: str, holder: str, *, allowed: bool) -> dict[str, Any]:
    return audit_entry(method, "read", holder=holder, allowed=allowed, why="test", at=1000.0)


def verify(root: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    done = CliRunner().invoke(
        morphz_cli, ["--store", str(root), "--json", "audit", "ctx", "--verify", *extra]
    )
    return done.exit_code, json.loads(done.output)


def raw(root: Path, fn: Any) -> None:
    env = lmdb.open(str(root / "ctx"), max_dbs=32, subdir=True)
    try:
        with env.begin(write=True) as txn:
            fn(txn, env.open_db(b"audit", txn=txn))
    finally:
        env.close()


def test_an_intact_chain_verifies_and_exports_its_head(store: Path) -> None:
    code, doc = verify(store)
    assert code == 0 and doc["ok"] and doc["checked"] == 6 and doc["bad"] is None
    assert doc["head_seq"] == 6 and len(doc["head"]) == 64
    s = LmdbStore.open(store / "ctx", readonly=True)
    try:
        rows = s.audit_read(0, 100)
    finally:
        s.close()
    assert [r.get("coalesces") for _, r in rows] == [None, None, None, None, 4, None]
    assert all(r["kid"] and len(r["mac"]) == 64 for _, r in rows)
    code, doc = verify(store, "--anchor", f"{doc['head_seq']}:{doc['head']}")
    assert code == 0


@pytest.mark.parametrize("tamper", ["edit", "remove", "reorder", "strip_mac"])
def test_a_tampered_row_is_named(store: Path, tamper: str) -> None:
    def edit(txn: Any, db: Any) -> None:
        if tamper == "edit":
            rec = _unpack(txn.get(_u64(4), db=db))
            rec["holder"] = "alice"  # the denial blamed on someone else
            txn.put(_u64(4), _pack(rec), db=db)
        elif tamper == "remove":
            txn.delete(_u64(4), db=db)
        elif tamper == "reorder":
            a, b = txn.get(_u64(2), db=db), txn.get(_u64(3), db=db)
            txn.put(_u64(2), b, db=db)
            txn.put(_u64(3), a, db=db)
        else:
            rec = _unpack(txn.get(_u64(5), db=db))
            del rec["mac"]
            txn.put(_u64(5), _pack(rec), db=db)

    raw(store, edit)
    code, doc = verify(store)
    assert code == 1 and not doc["ok"]
    assert doc["bad"] == {"edit": 4, "remove": 4, "reorder": 2, "strip_mac": 5}[tamper]
    assert str(doc["bad"]) in doc["why"]


def test_a_truncated_log_is_caught_by_the_anchor(store: Path) -> None:
    _, head = verify(store)
    raw(store, lambda txn, db: txn.delete(_u64(6), db=db))
    code, doc = verify(store)
    assert code == 0  # the rows left still chain: only an anchor kept outside can tell
    code, doc = verify(store, "--anchor", f"{head['head_seq']}:{head['head']}")
    assert code == 1 and doc["bad"] == 6 and "anchored head" in doc["why"]


def test_another_key_does_not_verify(store: Path, tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv(AUDIT_KEY_ENV, str(tmp_path / "other" / "audit.key"))
    code, doc = verify(store)
    assert code == 1 and doc["bad"] == 1 and "key" in doc["why"]


def test_pruned_rows_stay_verifiable_behind_a_checkpoint(tmp_path: Path, monkeypatch: Any) -> None:
    from protocol.governance import append_audit
    from tests.protocol.test_audit_rule import Rows

    monkeypatch.setenv(AUDIT_KEY_ENV, str(tmp_path / "audit.key"))
    key = audit_key()
    rows = Rows()
    for i in range(40):  # one window each: distinct refused rows, and allowed ones between
        append_audit(
            rows,
            [entry("frame", "m", allowed=False) | {"time": 100.0 * i}],
            now=0,
            keep=10,
            key=key,
        )
        append_audit(rows, [entry("read", "a", allowed=True)], now=0, keep=10, key=key)
    checkpoints = [r for r in rows.rows.values() if r["method"] == "audit_checkpoint"]
    assert checkpoints and all(r["pruned_count"] > 0 for r in checkpoints)
    assert sum(1 for r in rows.rows.values() if not r["allowed"]) <= 10
    report = verify_chain(sorted(rows.rows.items()), [key])
    assert report.ok and report.pruned == sum(r["pruned_count"] for r in checkpoints)
    first = min(rows.rows)
    rows.rows[first]["why"] = "edited"
    assert verify_chain(sorted(rows.rows.items()), [key]).bad == first


def test_control_characters_and_claimed_holders_cannot_forge_lines() -> None:
    e = audit_entry(
        "frame", "read", holder="eve\n#9 admin ok", allowed=False, why="a\x1b[2Jb", at=1.0
    )
    assert "\n" not in e["holder"] and "\x1b" not in e["why"]
    assert e["holder"] == "eve\\n#9 admin ok"
