"""``morphz forget`` and ``morphz compact``: output, exit codes, the audit trail, bad input.

In-process through click's ``CliRunner``; the path through a context actor
(``--address``) is tested with Ray in tests/actors/test_forget_actor.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from morphz.cli import cli
from service.store import Store

SECRET = "sk-live-ZEBRAQUOKKA42"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A context with the key in an observation and in a frame citing it."""
    path = tmp_path / "store"
    with Store(path).open(sync=False) as ctx:
        report = ctx.observe("tool_result", f"deploy log: key {SECRET} accepted")
        ctx.claim()
        ctx.commit(
            f"(context-tx (base-version {ctx.version()})"
            f' (derive cfg (from {report.ref}) (key "{SECRET}")))'
        )
    return path


def run(store: Path, *args: str, json_out: bool = True, context: str = "default") -> Result:
    base = ["--store", str(store), "--context", context] + (["--json"] if json_out else [])
    return CliRunner().invoke(cli, [*base, *args])


def test_forget_then_compact_erases_the_text(store: Path) -> None:
    r = run(store, "forget", "@e1", "--reason", "leaked key")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["target"] == "@e1" and doc["kind"] == "event" and doc["via"] == "store"
    assert doc["digest"].startswith("hmac-sha256:") and doc["by"].startswith("cli")
    shown = run(store, "frame", "cfg", json_out=False).output
    assert "from: @e1 (forgotten)" in shown  # the citing frame keeps the reference
    r = run(store, "forget", "cfg", "--reason", "leaked key", "--by", "alice", json_out=False)
    assert r.exit_code == 0, r.output
    assert "forgot cfg (frame)" in r.output and "morphz compact" in r.output
    # Again: idempotent, exit 0, nothing written.
    r = run(store, "forget", "cfg", "--reason", "again")
    assert r.exit_code == 0 and json.loads(r.output)["duplicate"] is True
    for args in (["event", "@e1"], ["frame", "cfg"], ["history", "cfg"], ["state"]):
        r = run(store, *args)
        assert r.exit_code == 0, (args, r.output)
        assert SECRET not in r.output, args
    r = run(store, "audit")
    rows = [row for row in json.loads(r.output)["entries"] if row["method"] == "forget"]
    assert [(row["target"], row["why"]) for row in rows] == [
        ("@e1", "leaked key"),
        ("cfg", "leaked key"),
    ]
    assert rows[1]["by"] == "alice"
    r = run(store, "compact")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["context"] == "default" and doc["after"] <= doc["before"]
    data = (store / "default" / "data.mdb").read_bytes()
    assert SECRET.encode() not in data
    r = run(store, "compact", json_out=False)
    assert r.exit_code == 0 and r.output.startswith("compacted context default: data.mdb")


@pytest.mark.parametrize(
    ("args", "code", "exit_code"),
    [
        (["forget", "@e1"], "missing_reason", 2),
        (["forget", "@e1", "--reason", "  "], "missing_reason", 2),
        (["forget", "@e1", "--reason", "x" * 600], "bad_argument", 2),
        (["forget", "@e1", "--reason", "leak", "--by", ""], "bad_argument", 2),
        (["forget", "@e9", "--reason", "leak"], "not_found", 1),
        (["forget", "nosuch", "--reason", "leak"], "not_found", 1),
    ],
)
def test_bad_input_exits_with_a_typed_error_and_changes_nothing(
    store: Path, args: list[str], code: str, exit_code: int
) -> None:
    before = (store / "default" / "data.mdb").read_bytes()
    r = run(store, *args)
    assert r.exit_code == exit_code, r.output
    assert json.loads(r.output)["error"] == code or json.loads(r.output)["error"]["code"] == code
    assert (store / "default" / "data.mdb").read_bytes() == before


def test_a_missing_context_is_not_found_and_not_created(store: Path) -> None:
    for args in (["forget", "@e1", "--reason", "leak"], ["compact"]):
        r = run(store, *args, context="typo")
        assert r.exit_code == 1, (args, r.output)
        assert not (store / "typo" / "data.mdb").exists()


def test_forget_and_compact_refuse_while_a_writer_holds_the_store(store: Path) -> None:
    with Store(store).open():
        r = run(store, "forget", "@e1", "--reason", "leak")
        assert r.exit_code == 1 and "store_locked" in r.output
        r = run(store, "compact")
        assert r.exit_code == 1 and "store_locked" in r.output
    with Store(store).open(readonly=True) as ctx:
        assert SECRET in ctx.read_event("@e1")["text"]
