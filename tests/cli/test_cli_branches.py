"""``morphz diff``, ``merge``, ``pick``, ``tag``, ``revert`` and ``state --at``, run as the
real executable: exit codes (0 merged, 1 refused with nothing written, 2 bad input),
``--json`` documents and the human output."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.test_cli import Cli


@pytest.fixture
def forked(tmp_path: Path) -> Cli:
    """``main`` with a plan and notes, forked into ``alt``; each side then edits ``plan``'s
    status differently and ``alt`` adds a frame citing a new observation."""
    c = Cli(tmp_path / "store", tmp_path)
    c.ok("--context", "main", "init")
    ref = c.ok("--context", "main", "observe", "--kind", "tool_result", "--text", "reviewed")["ref"]
    c.ok("--context", "main", "claim")
    c.ok(
        "--context",
        "main",
        "tx",
        "-",
        stdin=f"(context-tx (base-version 0) (derive plan (from {ref})"
        ' (status draft) (owner ann)) (derive notes "n"))',
    )
    c.ok("--context", "main", "fork", "alt")
    seen = c.ok("--context", "alt", "observe", "--kind", "tool_result", "--text", "cache helps")
    c.ok("--context", "alt", "claim")
    c.ok(
        "--context",
        "alt",
        "tx",
        "-",
        stdin=f"(context-tx (base-version 1) (set plan (status ready))"
        f" (derive idea (from {seen['ref']} plan) (use cache)) (relate idea refines plan))",
    )
    c.ok(
        "--context",
        "main",
        "tx",
        "-",
        stdin="(context-tx (base-version 1) (set plan (status hold)))",
    )
    return c


def test_diff_then_a_refused_merge_then_a_resolved_one(forked: Cli) -> None:
    d = forked.ok("--context", "main", "diff", "alt")
    assert {f["id"]: f["status"] for f in d["frames"]} == {"idea": "added", "plan": "conflict"}
    assert d["relations"]["added"] == [["idea", "refines", "plan"]] and len(d["events"]) == 1
    human = forked.human("--context", "main", "diff", "alt")
    assert "status: base draft | ours hold | theirs ready" in human

    refused = forked("--context", "main", "merge", "alt")
    assert refused.code == 1 and refused.json()["status"] == "refused"
    assert forked.ok("--context", "main", "state")["version"] == 2  # nothing written
    text = forked("--context", "main", "merge", "alt", as_json=False)
    assert text.code == 1 and "nothing written" in text.out

    dry = forked.ok("--context", "main", "merge", "alt", "--dry-run", "--resolve", "plan=theirs")
    assert dry["status"] == "dry_run" and forked.ok("--context", "main", "state")["version"] == 2
    done = forked.ok("--context", "main", "merge", "alt", "--resolve", "plan=theirs")
    assert done["status"] == "merged" and done["applied"] == ["idea", "plan"]
    frame = forked.ok("--context", "main", "frame", "plan")
    assert frame["body"] == "(status ready) (owner ann)"
    assert forked.ok("--context", "main", "merge", "alt")["status"] == "nothing"
    history = forked.human("--context", "main", "history", "plan")
    assert "v3" in history


def test_strategy_pick_tag_state_at_and_revert(forked: Cli) -> None:
    ours = forked.ok("--context", "main", "pick", "alt", "--frames", "plan", "--strategy", "ours")
    assert ours["status"] == "nothing" and ours["unresolved"] == ["plan"]
    picked = forked.ok("--context", "main", "pick", "alt", "--query", "cache")
    assert picked["applied"] == ["idea"] and len(picked["copied"]) == 1
    assert forked.ok("--context", "main", "tag", "picked") == {"name": "picked", "version": 3}
    assert forked.ok("--context", "main", "tag")["tags"] == [{"name": "picked", "version": 3}]
    before = forked.ok("--context", "main", "state", "--at", "2")
    assert [f["id"] for f in before["frames"]] == ["notes", "plan"]
    reverted = forked.ok("--context", "main", "revert", "3", "3")
    assert reverted["status"] == "merged" and reverted["applied"] == ["idea"]
    at_tag = forked.ok("--context", "main", "state", "--at", "picked")
    assert "idea" in [f["id"] for f in at_tag["frames"]]
    since = forked.ok("--context", "main", "diff", "--from", "picked")
    assert [(f["id"], f["status"]) for f in since["frames"]] == [("idea", "retired")]
    assert "versions 3..4" in forked.human("--context", "main", "diff", "--from", "3", "--to", "4")


def test_bad_input_exits_2_and_writes_nothing(forked: Cli) -> None:
    for args in (
        ("merge", "alt", "--strategy", "maybe"),
        ("merge", "alt", "--resolve", "plan"),
        ("tag", "9lives"),
        ("revert", "5", "2"),
        ("state", "--at", "-1"),
        ("diff",),
        ("diff", "alt", "--from", "1"),
    ):
        r = forked("--context", "main", *args)
        assert r.code == 2, (args, r.code, r.out, r.err)
        assert "Traceback" not in r.err + r.out
    missing = forked("--context", "main", "merge", "nowhere")
    assert missing.code == 1 and missing.json()["error"]["code"] == "not_found"
    unrelated = forked("--context", "alt", "diff", "alt")
    assert unrelated.code != 0
    assert forked.ok("--context", "main", "state")["version"] == 2
