"""What a new user meets in the first hour, in-process through click's ``CliRunner`` on a
real LMDB store: suggestions for mistyped names, rejections that never read "rebased",
``python -m morphz``, the words after ``history ok`` and ``top``'s hint on an empty cluster.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from morphz.cli.main import cli
from protocol.suggest import MAX_NAME_CHARS, close_names, did_you_mean
from service.store import open_context


def morphz(store: Path, *args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(cli, ["--store", str(store), *args], input=stdin)


def error(result: Result) -> dict[str, Any]:
    doc = json.loads(result.output.strip().splitlines()[-1])
    assert isinstance(doc, dict) and "error" in doc, result.output
    return dict(doc["error"])


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store"
    with open_context(path, "default", create=True) as ctx:
        ctx.commit("(context-tx (base-version 0) (derive release (stage one)))")
    with open_context(path, "research", create=True):
        pass
    return path


def test_a_mistyped_context_is_answered_with_the_name_meant(store: Path) -> None:
    r = morphz(store, "--json", "--context", "defualt", "state")
    assert r.exit_code == 1
    err = error(r)
    assert err["code"] == "not_found"
    assert "did you mean 'default'?" in err["message"]
    assert "morphz init --context defualt" in err["message"]  # creating it is still offered
    far = error(morphz(store, "--json", "--context", "zzz", "state"))
    assert "did you mean" not in far["message"]


def test_a_mistyped_frame_id_is_answered_with_the_id_meant(store: Path) -> None:
    for args in (["frame", "relase"], ["history", "relaese"]):
        r = morphz(store, "--json", *args)
        assert r.exit_code == 1, r.output
        err = error(r)
        assert err["code"] == "not_found" and "did you mean 'release'?" in err["message"], err
    assert "did you mean" not in error(morphz(store, "--json", "frame", "ghost"))["message"]


def test_suggestions_are_bounded_for_hostile_names() -> None:
    assert close_names("x" * (MAX_NAME_CHARS + 1), ["x" * (MAX_NAME_CHARS + 1)]) == []
    assert close_names("", ["a"]) == []
    assert did_you_mean("default", ["default"]) == ""  # an exact name is not a typo
    many = (f"frame-{i}" for i in range(10**9))  # consumed only up to the bound
    assert close_names("frame-7x", many)[0] == "frame-7"


def test_a_rejection_never_reads_rebased(store: Path) -> None:
    with open_context(store, "default") as ctx:
        ctx.commit("(context-tx (base-version 1) (revise release (stage two)))")
    stale = "(context-tx (base-version 1) (revise release (stage three)))"
    human = morphz(store, "tx", stdin=stale)
    assert human.exit_code == 1
    assert human.output.splitlines()[0] == "rejected at version 2 (base 1)"
    doc = json.loads(morphz(store, "--json", "tx", stdin=stale).output)
    assert doc["status"] == "rejected" and doc["rebased"] is False
    ok = json.loads(
        morphz(store, "--json", "tx", stdin="(context-tx (base-version 1) (derive b (x)))").output
    )
    assert ok["status"] == "committed" and ok["rebased"] is True


def test_history_ok_says_what_was_checked() -> None:
    from morphz.cli.loadtest import checked_text

    text = checked_text(
        {"submissions": 40, "log_records": 31, "replayed": 31, "acknowledged_on_disk": 30}
    )
    assert "40 submissions" in text and "31 log records" in text
    assert "31 of them replayed" in text and "30 acknowledged commits read back" in text


def test_top_with_no_actors_prints_a_hint() -> None:
    from morphz.cli.top import NO_ACTORS_HINT, _render

    out = _render({"interval": 1.0, "contexts": []})
    assert "no context actors on this cluster" in out
    assert "morphz actors" in NO_ACTORS_HINT
    busy = _render(
        {"interval": 1.0, "contexts": [{"namespace": "n", "context": "c", "error": {"code": "x"}}]}
    )
    assert "no context actors" not in busy


def test_cli_search_leaves_recorded_searches_out_unless_asked(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with open_context(store, "default", create=True) as ctx:
        ctx.observe("tool_result", "the deployment region is eu-west-3")
        ctx.claim()
        ctx.search({"query": "deployment region"})  # recorded as a recall_result
    plain = json.loads(morphz(store, "--json", "search", "deployment region").output)
    assert [h["kind"] for h in plain["hits"]] == ["tool_result"]
    asked = json.loads(
        morphz(store, "--json", "search", "deployment region", "--include-recalls").output
    )
    assert sorted(h["kind"] for h in asked["hits"]) == ["recall_result", "tool_result"]


def test_a_fork_at_the_current_version_keeps_what_was_recorded_but_not_claimed(
    tmp_path: Path,
) -> None:
    from service.store import Store

    store = tmp_path / "store"
    with open_context(store, "default", create=True) as ctx:
        ctx.commit("(context-tx (base-version 0) (derive release (stage one)))")
        ctx.observe("tool_result", "claimed after the last commit")
        ctx.claim()
        ctx.observe("user_message", "still waiting to be claimed")
        source = ctx.state()
    r = morphz(store, "--json", "fork", "copy")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["waiting"] == 1
    with Store(store).open("copy", readonly=True) as fork:
        copy = fork.state()
    assert [e["ref"] for e in copy.events] == [e["ref"] for e in source.events] == ["@e1", "@e2"]
    assert copy.waiting == source.waiting == ["@e2"]
    assert (copy.version, copy.tick) == (source.version, source.tick)
    with Store(store).open("copy") as fork:  # the waiting input is claimed in the fork
        assert fork.claim().claimed == ["@e2"]


def test_log_piped_into_tx_across_contexts_refuses_references_that_mean_something_else(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    with open_context(store, "default", create=True) as ctx:
        ctx.observe("user_message", "ship v1")
        ctx.claim()
        ctx.commit("(context-tx (base-version 0) (derive release (from @e1) (goal v1)))")
    assert morphz(store, "fork", "copy").exit_code == 0
    with open_context(store, "copy") as ctx:
        b = ctx.observe("tool_result", "tests passed in the fork")  # @e2 in copy
        ctx.claim()
        ctx.commit("(context-tx (base-version 1) (derive tests (from @e2) (passed)))")
        ctx.commit("(context-tx (base-version 2) (derive again (from @e1) (goal v1)))")
    with open_context(store, "default") as ctx:
        other = ctx.observe("tool_result", "tests FAILED here")  # @e2 in default
        ctx.claim()
    logged = morphz(store, "--context", "copy", "log", "2")
    assert logged.exit_code == 0
    head = logged.output.splitlines()[0]
    assert head == f"; logged in context copy at version 2; @e2 is {b.id}"
    assert json.loads(morphz(store, "--json", "--context", "copy", "log", "2").output)[
        "event_ids"
    ] == {"@e2": b.id}
    text = logged.output
    for args in (["--json", "tx"], ["--json", "tx", "--check"]):
        r = morphz(store, *args, stdin=text)
        assert r.exit_code == 1, r.output
        err = error(r)
        assert err["code"] == "ref_mismatch"
        assert b.id in err["message"] and other.id in err["message"]
        assert "not in this context" in err["message"]
    with open_context(store, "default", readonly=True) as ctx:
        assert ctx.version() == 1  # nothing written
    # a reference that means the same observation in both contexts goes through
    same = morphz(store, "--context", "copy", "log", "3").output
    assert same.startswith("; logged in context copy at version 3; @e1 is ")
    r = morphz(store, "--json", "tx", stdin=same.replace("(base-version 2)", "(base-version 1)"))
    assert r.exit_code == 0, r.output
