"""``morphz review`` and ``morphz audit`` on the store: JSON contract, exit codes, audit trail.

In-process through click's ``CliRunner``; the path through a context actor
(``--address``) is tested with Ray in tests/actors/test_governance_actor.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from morphz.cli import cli
from service.governance import run_quarantine_scan
from service.store import Store
from storage import LmdbStore

ROOT = Path(__file__).resolve().parents[2]


def tx(ctx: Any, text: str) -> None:
    assert ctx.commit(f"(context-tx (base-version {ctx.version()}) {text})").committed


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A context with a held candidate, an admissible one, a leak and a quarantined frame."""
    path = tmp_path / "store"
    with Store(path).open(sync=False) as ctx:
        tx(ctx, "(derive risky (drop table users))")
        tx(ctx, "(envelope risky (trust candidate) (risk high))")
        tx(ctx, "(derive fine (deploy region cn-shanghai))")
        tx(ctx, "(envelope fine (trust candidate))")
        tx(ctx, '(derive leak (contact "alice@example.com"))')
        tx(ctx, "(envelope leak (trust candidate))")
        tx(ctx, "(derive old-fact (region cn-beijing))")
        tx(ctx, "(derive new-fact (region cn-shanghai))")
        tx(ctx, "(relate new-fact contradicts old-fact)")
        run_quarantine_scan(ctx.backend)  # no audit template: the audit log starts empty
    return path


def run(store: Path, *args: str, json_out: bool = True, context: str = "default") -> Result:
    base = ["--store", str(store), "--context", context] + (["--json"] if json_out else [])
    return CliRunner().invoke(cli, [*base, *args])


def version(store: Path) -> int:
    with Store(store).open(readonly=True) as ctx:
        return int(ctx.version())


def test_list_shows_what_awaits_a_human_without_writing(store: Path) -> None:
    before = version(store)
    r = run(store, "review", "list")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["via"] == "store" and doc["version"] == before
    items = {i["frame"]: i for i in doc["items"]}
    assert list(items) == ["risky", "fine", "leak", "old-fact"]
    assert items["risky"]["awaits"] == "human" and "high risk" in items["risky"]["reasons"][0]
    assert items["old-fact"]["trust"] == "quarantined"
    assert items["old-fact"]["reasons"] == ["contradicted: new-fact contradicts old-fact"]
    assert items["leak"]["verdict"] == "reject" and items["fine"]["verdict"] == "accept"
    human = run(store, "review", json_out=False)  # no subcommand: the list
    assert human.exit_code == 0
    assert "2 await a human, 2 await admission" in human.output
    assert "- contradicted: new-fact contradicts old-fact" in human.output
    assert version(store) == before
    assert json.loads(run(store, "audit").output)["entries"] == []


def test_accept_reject_admit_and_scan_are_decided_and_audited(store: Path) -> None:
    v = version(store)
    r = run(store, "review", "accept", "old-fact", "--reviewer", "carol")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["decision"]["reviewer"] == "human:carol" and doc["version"] == v + 1
    r = run(store, "review", "reject", "risky", "--reviewer", "bob", "--reason", "not in prod")
    assert r.exit_code == 0 and json.loads(r.output)["decision"]["verdict"] == "reject"
    r = run(store, "review", "admit", json_out=False)
    assert r.exit_code == 0
    assert "accept  fine" in r.output and "reject  leak" in r.output
    assert f"committed at version {v + 3}" in r.output
    with Store(store).open() as ctx:
        tx(ctx, "(derive newer (region cn-hangzhou))")
        tx(ctx, "(relate newer contradicts new-fact)")
    r = run(store, "review", "scan")
    assert r.exit_code == 0, r.output
    scan = json.loads(r.output)
    assert scan["quarantined"] == ["new-fact"] and scan["spared"] == ["old-fact"]
    with Store(store).open(readonly=True) as ctx:
        env = ctx.frame("risky")["envelope"]
        assert env["review_reasons"] == ["human review of a candidate frame", "not in prod"]
    entries = json.loads(run(store, "audit").output)["entries"]
    assert [e["method"] for e in entries] == ["review", "review", "admit", "quarantine_scan"]
    assert all(e["holder"].startswith("cli") and e["allowed"] for e in entries)
    page = json.loads(run(store, "audit", "default", "--after", "1", "--limit", "2").output)
    assert [e["seq"] for e in page["entries"]] == [2, 3] and page["next_after"] == 3
    human = run(store, "audit", json_out=False)
    assert human.exit_code == 0 and "#1 " in human.output and "accept old-fact" in human.output


@pytest.mark.parametrize(
    "args, code, error",
    [
        (["review", "accept", "nope", "--reviewer", "carol"], 1, "not_found"),
        (["review", "accept", "new-fact", "--reviewer", "carol"], 1, "not_reviewable"),
        (["review", "reject", "old-fact", "--reviewer", ""], 2, "bad_reviewer"),
        (["review", "admit", "nope"], 1, "not_found"),
        (["review", "admit", "new-fact"], 1, "not_candidate"),
        (["review", "scan", "--failed-uses", "0"], 2, "out_of_range"),
        (["audit", "--limit", "5000"], 2, "out_of_range"),
        (["audit", "no-such-context"], 1, "not_found"),
        (["audit", "../escape"], 2, "bad_context_name"),
    ],
)
def test_bad_input_is_a_typed_error_and_changes_nothing(
    store: Path, args: list[str], code: int, error: str
) -> None:
    v = version(store)
    r = run(store, *args)
    assert r.exit_code == code, r.output
    assert json.loads(r.output)["error"]["code"] == error
    assert version(store) == v
    assert json.loads(run(store, "audit").output)["entries"] == []


def test_missing_reviewer_and_bad_context_names(store: Path) -> None:
    r = run(store, "review", "accept", "old-fact")
    assert r.exit_code == 2 and "--reviewer" in r.output
    r = run(store, "review", "list", context="bad/name", json_out=False)
    assert r.exit_code == 2 and "bad_context_name" in r.output
    r = run(store, "review", "list", context="missing")
    assert r.exit_code == 1 and json.loads(r.output)["error"]["code"] == "not_found"
    assert not Store(store).exists("missing")  # a listing never creates a context


def test_a_held_store_is_read_but_decided_only_through_its_actor(store: Path) -> None:
    writer = LmdbStore.open(Store(store).context_path("default"))  # stands in for an actor
    try:
        assert run(store, "review", "list").exit_code == 0
        assert run(store, "audit").exit_code == 0
        r = run(store, "review", "accept", "old-fact", "--reviewer", "carol", json_out=False)
        assert r.exit_code == 1
        assert "store_locked" in r.output and "--address" in r.output
    finally:
        writer.close()
    assert version(store) == 10


def test_the_store_path_does_not_import_ray(store: Path) -> None:
    code = (
        "import sys\n"
        "from morphz.cli import main\n"
        f"sys.argv = ['morphz', '--store', {str(store)!r}, '--json', 'review', 'list']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('RAY' if any(m == 'ray' or m.startswith('ray.') for m in sys.modules) else 'NO')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "NO"
