"""The ``morphz`` command line, run as a real executable against a temporary store.

Every test starts the installed ``morphz`` script (or ``python -m morphz.cli``)
in a subprocess, so exit codes, stdout/stderr separation and imports are the
ones a user sees.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

_SCRIPT = Path(sys.executable).with_name("morphz")
MORPHZ = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "morphz.cli"]
TIMEOUT = 60

REQUEST = "Ship v1 once the regression tests pass."
REPORT = "regression suite: 412 passed, 0 failed\n" * 200

RELEASE_TX = """(context-tx
  (base-version {base})
  (reason "Incorporate the test result and prepare the release")
  (derive test-result (from {report}) (tests passed))
  (revise release (goal ship-v1) (stage packaging))
  (relate test-result supports release)
  (retire {report}))
"""


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "MORPHZ_STORE"}
    env.update(extra)
    return env


@dataclass
class Run:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        assert self.out.strip(), f"no stdout (exit {self.code}); stderr: {self.err}"
        lines = self.out.strip().splitlines()
        assert len(lines) == 1, f"--json must print one JSON document on one line: {self.out!r}"
        return json.loads(lines[0])


class Cli:
    """Runs ``morphz --store <store> [--json] ARGS…`` in *cwd*."""

    def __init__(self, store: Path, cwd: Path) -> None:
        self.store = store
        self.cwd = cwd

    def raw(
        self,
        *args: str,
        stdin: str | bytes | None = None,
        env: dict[str, str] | None = None,
    ) -> Run:
        data = stdin.encode() if isinstance(stdin, str) else stdin
        p = subprocess.run(
            [*MORPHZ, *args],
            input=data if data is not None else b"",
            capture_output=True,
            cwd=self.cwd,
            env=env if env is not None else _clean_env(),
            timeout=TIMEOUT,
        )
        return Run(p.returncode, p.stdout.decode("utf-8"), p.stderr.decode("utf-8"))

    def __call__(self, *args: str, stdin: str | bytes | None = None, as_json: bool = True) -> Run:
        opts = ["--store", str(self.store)] + (["--json"] if as_json else [])
        return self.raw(*opts, *args, stdin=stdin)

    def ok(self, *args: str, stdin: str | bytes | None = None) -> Any:
        r = self(*args, stdin=stdin)
        assert r.code == 0, f"morphz {' '.join(args)} exited {r.code}: {r.out} {r.err}"
        return r.json()

    def human(self, *args: str, stdin: str | bytes | None = None) -> str:
        r = self(*args, stdin=stdin, as_json=False)
        assert r.code == 0, f"morphz {' '.join(args)} exited {r.code}: {r.out} {r.err}"
        return r.out

    def version(self) -> int:
        return int(self.ok("state")["version"])


@pytest.fixture
def bare(tmp_path: Path) -> Cli:
    """A store path with nothing there yet: reads and writes never create it."""
    return Cli(tmp_path / "store", tmp_path)


@pytest.fixture
def cli(bare: Cli) -> Cli:
    """A store whose context ``default`` exists (made as ``morphz init`` makes it)."""
    from service.store import open_context

    with open_context(bare.store, "default", create=True):
        pass
    return bare


def _assert_clean_error(r: Run, code: int, *needles: str) -> None:
    """One line on stderr, no traceback, the expected exit code."""
    assert r.code == code, (r.code, r.out, r.err)
    assert "Traceback" not in r.err + r.out, r.err
    lines = r.err.strip().splitlines()
    assert len(lines) == 1, f"expected a one-line error, got {r.err!r}"
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


# -- the seed release story -------------------------------------------------


def test_release_story_through_the_cli(bare: Cli, tmp_path: Path) -> None:
    cli = bare
    created = cli.ok("init", "--window", "8")
    assert created["created"] is True
    assert (created["window"], created["version"], created["tick"]) == (8, 0, 0)
    again = cli.ok("init")
    assert again["created"] is False and again["window"] == 8

    request = cli.ok("observe", "--kind", "user_message", "--session", "chat", "--text", REQUEST)
    assert request["ref"] == "@e1"
    assert request["id"].startswith("ev:")
    assert request["kind"] == "user_message"
    assert request["session"] == "chat"

    # A transaction from a file.
    first = tmp_path / "first.tx"
    first.write_text(
        "(context-tx (base-version 0)\n"
        "  (derive release (from @e1) (goal ship-v1) (stage awaiting-tests)))\n",
        encoding="utf-8",
    )
    r1 = cli.ok("tx", str(first))
    assert (r1["status"], r1["version"], r1["base_version"], r1["rebased"]) == (
        "committed",
        1,
        0,
        False,
    )
    assert r1["errors"] == [] and r1["conflicts"] == []
    for key in ("retired_now", "retiring", "retirement_cancelled", "relief_now", "relief_pending"):
        assert key in r1

    report_file = tmp_path / "report.txt"
    report_file.write_text(REPORT, encoding="utf-8")
    report = cli.ok("observe", "--kind", "tool_result", "--file", str(report_file))
    assert (report["ref"], report["kind"], report["size"]) == ("@e2", "tool_result", len(REPORT))
    assert report["id"] != request["id"]

    waiting = cli.ok("state")
    assert waiting["waiting"] == ["@e1", "@e2"]
    claimed = cli.ok("claim")
    assert claimed["tick"] == 1
    assert claimed["claimed"] == ["@e1", "@e2"]
    assert claimed["finalized"] == []

    before = cli.ok("frame", "release")
    assert before["id"] == "release"
    assert before["revision"] == 1
    assert before["body"] == "(goal ship-v1) (stage awaiting-tests)"
    assert before["sources"] == ["@e1"]
    assert before["lifecycle"] == "active"
    assert before["protected"] is False
    assert "due_tick" not in before

    # The seed transaction, from stdin.
    r2 = cli.ok("tx", "-", stdin=RELEASE_TX.format(base=1, report="@e2"))
    assert (r2["status"], r2["version"], r2["base_version"]) == ("committed", 2, 1)
    assert r2["retired_now"] == ["@e2"]
    assert r2["relief_now"]["events"] == ["@e2"]
    assert r2["relief_now"]["tokens"] > 0
    assert r2["retiring"] == [] and r2["retirement_cancelled"] == []

    test_result = cli.ok("frame", "test-result")
    assert (test_result["revision"], test_result["body"]) == (1, "(tests passed)")
    assert test_result["sources"] == ["@e2"]
    assert ["test-result", "supports", "release"] in test_result["relations_out"]
    release = cli.ok("frame", "release")
    assert (release["revision"], release["body"]) == (2, "(goal ship-v1) (stage packaging)")
    assert release["sources"] == ["@e1"]

    state = cli.ok("state")
    assert (state["version"], state["tick"]) == (2, 1)
    assert {"id": "release", "revision": 2, "lifecycle": "active"} in state["frames"]
    assert {"id": "test-result", "revision": 1, "lifecycle": "active"} in state["frames"]
    events = {e["ref"]: e["lifecycle"] for e in state["events"]}
    assert events == {"@e1": "active", "@e2": "retired"}
    assert state["relations"] == [["test-result", "supports", "release"]]

    # The retired report stays readable, in chunks.
    head = cli.ok("event", "@e2", "--offset", "0", "--length", "18")
    assert head["text"] == "regression suite: "
    assert (head["offset"], head["length"], head["more"]) == (0, 18, True)
    assert head["size"] == len(REPORT)
    assert head["lifecycle"] == "retired"
    middle = cli.ok("event", "@e2", "--offset", "45", "--length", "30")
    assert middle["text"] == REPORT[45:75]
    tail = cli.ok("event", "@e2", "--offset", str(len(REPORT) - 7))
    assert (tail["text"], tail["more"]) == ("failed\n", False)
    past = cli.ok("event", "@e2", "--offset", str(len(REPORT) + 10))
    assert (past["text"], past["length"], past["more"]) == ("", 0, False)
    assert cli.human("event", "@e2", "--offset", "19", "--length", "10") == REPORT[19:29] + "\n"

    # The undelivered request cannot be retired; once delivered it can.
    refused = cli("tx", stdin="(context-tx (base-version 2) (retire @e1))")
    assert refused.code == 1
    receipt = refused.json()
    assert receipt["status"] == "rejected"
    assert [(e["op"], e["code"]) for e in receipt["errors"]] == [(0, "causally_protected")]
    assert cli.version() == 2

    assert cli.ok("deliver", "@e1") == {"ref": "@e1", "id": request["id"], "delivered": True}
    assert cli.ok("event", "@e1")["delivered"] is True
    r3 = cli.ok("tx", stdin="(context-tx (base-version 2) (retire @e1 release))")
    assert r3["version"] == 3
    assert r3["retired_now"] == ["@e1"]
    assert r3["retiring"] == [{"id": "release", "due_tick": 9}]
    assert r3["relief_pending"]["frames"] == ["release"]
    retiring = cli.ok("frame", "release")
    assert (retiring["lifecycle"], retiring["due_tick"]) == ("retiring", 9)
    assert {"id": "release", "revision": 2, "lifecycle": "retiring", "due_tick": 9} in cli.ok(
        "state"
    )["frames"]

    r4 = cli.ok("tx", stdin="(context-tx (base-version 3) (revise release (stage shipped)))")
    assert r4["retirement_cancelled"] == ["release"]
    assert cli.ok("frame", "release")["lifecycle"] == "active"

    hist = cli.ok("history", "release")
    assert hist["id"] == "release"
    writes = [(w["version"], w["op"], w.get("revision"), w.get("body")) for w in hist["writes"]]
    assert writes == [
        (1, "derive", 1, "(goal ship-v1) (stage awaiting-tests)"),
        (2, "revise", 2, "(goal ship-v1) (stage packaging)"),
        (3, "lifecycle", None, None),
        (4, "revise", 3, "(stage shipped)"),
    ]

    log = cli.ok("log", "2")
    assert (log["version"], log["base_version"]) == (2, 1)
    assert log["reason"] == "Incorporate the test result and prepare the release"
    assert "(derive test-result (from @e2) (tests passed))" in log["text"]
    assert log["receipt"]["version"] == 2
    assert log["receipt"]["retired_now"] == ["@e2"]
    head, _, body = cli.human("log", "1").partition("\n")
    # the stable id of each event reference first, as a comment (docs/cli.md, log | tx)
    assert head.startswith("; logged in context default at version 1; @e1 is ev:")
    assert body == first.read_text(encoding="utf-8") + "\n"


# -- exit codes ----------------------------------------------------------------


def test_rejected_transaction_exits_1_with_the_failing_op(cli: Cli) -> None:
    cli.ok("tx", stdin="(context-tx (base-version 0) (derive release (stage testing)))")
    r = cli("tx", stdin="(context-tx (base-version 1) (derive notes (x 1)) (revise nope (x 2)))")
    assert r.code == 1
    receipt = r.json()
    assert receipt["status"] == "rejected"
    assert receipt["version"] == 1
    assert [(e["op"], e["code"]) for e in receipt["errors"]] == [(1, "unknown_ref")]
    assert "nope" in receipt["errors"][0]["message"]

    dup = cli("tx", stdin="(context-tx (base-version 1) (derive release (stage other)))")
    assert dup.code == 1
    assert [(e["op"], e["code"]) for e in dup.json()["errors"]] == [(0, "frame_exists")]

    stale = cli("tx", stdin="(context-tx (base-version 0) (revise release (stage other)))")
    assert stale.code == 1
    body = stale.json()
    assert [(e["op"], e["code"]) for e in body["errors"]] == [(None, "conflict")]
    assert body["conflicts"] == [{"id": "release", "version": 1}]
    assert body["rebased"] is False  # a rejection applied nothing: it is never "rebased"
    assert (
        "rebased"
        not in cli(
            "tx", stdin="(context-tx (base-version 0) (revise release (stage x)))", as_json=False
        ).out
    )

    human = cli("tx", stdin="(context-tx (base-version 1) (revise nope (x 2)))", as_json=False)
    assert human.code == 1
    assert "rejected at version 1" in human.out
    assert "error (op 0) unknown_ref" in human.out

    state = cli.ok("state")
    assert state["version"] == 1
    assert [f["id"] for f in state["frames"]] == ["release"]


def test_unknown_frame_event_and_version_exit_1(cli: Cli) -> None:
    cli.ok("observe", "--kind", "external", "--text", "it rained")
    r = cli("frame", "no-such-frame")
    assert r.code == 1
    assert r.json()["error"]["code"] == "not_found"
    assert "no-such-frame" in r.json()["error"]["message"]
    human = cli("frame", "no-such-frame", as_json=False)
    _assert_clean_error(human, 1, "not_found", "no-such-frame")

    e = cli("event", "@e99")
    assert e.code == 1
    assert e.json()["error"]["code"] == "not_found"
    # A malformed reference is bad input (exit 2, bad_ref); it was exit 1 not_found before.
    e = cli("event", "bogus-ref")
    assert e.code == 2
    assert e.json()["error"]["code"] == "bad_ref"
    _assert_clean_error(cli("deliver", "@e7", as_json=False), 1, "not_found")
    _assert_clean_error(cli("history", "ghost", as_json=False), 1, "not_found")
    _assert_clean_error(cli("log", "5", as_json=False), 1, "not_found")
    # Delivering something that is not a user request is refused, not a usage error.
    assert cli("deliver", "@e1").code == 1


def test_parse_error_exits_2_with_line_and_column(bare: Cli) -> None:
    cli = bare
    bad = '(context-tx\n  (base-version 0)\n  (derive x (a "b)\n'
    r = cli("tx", stdin=bad)
    assert r.code == 2
    err = r.json()["error"]
    assert err["code"] == "parse_error"
    assert (err["line"], err["column"]) == (3, 16)
    assert err["message"].startswith("3:16: ")
    _assert_clean_error(cli("tx", stdin=bad, as_json=False), 2, "parse_error", "3:16:")
    # A parse error exits before the store is touched.
    assert not (cli.store / "default").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["observe", "--text", "no kind"],
        ["observe", "--kind", "gossip", "--text", "bad kind"],
        ["observe", "--kind", "external", "--text", "a", "--file", "-"],
        ["observe", "--kind", "external"],
        ["frobnicate"],
        ["event", "@e1", "--offset", "many"],
    ],
    ids=["missing-kind", "bad-kind", "text-and-file", "neither", "unknown-command", "bad-int"],
)
def test_usage_errors_exit_2(bare: Cli, args: list[str]) -> None:
    cli = bare
    r = cli(*args, stdin="x", as_json=False)
    assert r.code == 2, (r.out, r.err)
    assert "Traceback" not in r.err
    assert "Error" in r.err or "error" in r.err
    # With --json the usage error is one JSON object on stdout.
    j = cli(*args, stdin="x")
    assert j.code == 2 and j.json()["error"]["code"] in ("usage_error", "bad_file"), j
    assert not (cli.store / "default").exists()


def test_bad_offset_and_context_name_are_bad_input(cli: Cli) -> None:
    cli.ok("observe", "--kind", "external", "--text", "abc")
    # Bad input exits 2 (the contract of docs/cli.md; these were 1 before).
    r = cli("event", "@e1", "--offset", "-1")
    assert r.code == 2
    assert r.json()["error"]["code"] == "out_of_range"
    bad = cli.raw("--store", str(cli.store), "--json", "--context", "../escape", "state")
    assert bad.code == 2
    assert bad.json()["error"]["code"] == "bad_context_name"
    assert not (cli.store.parent / "escape").exists()


# -- store selection -----------------------------------------------------------


def test_store_from_env_default_dir_and_contexts(cli: Cli, tmp_path: Path) -> None:
    env_store = tmp_path / "from-env"
    r = cli.raw(
        "--json",
        "observe",
        "--kind",
        "external",
        "--text",
        "via env",
        "--create",
        env=_clean_env(MORPHZ_STORE=str(env_store)),
    )
    assert r.code == 0, r.err
    assert r.json()["ref"] == "@e1"
    assert (env_store / "default" / "data.mdb").is_file()
    seen = Cli(env_store, tmp_path).ok("event", "@e1")
    assert seen["text"] == "via env"
    # --store wins over the environment.
    r = cli.raw(
        "--store", str(cli.store), "--json", "state", env=_clean_env(MORPHZ_STORE=str(env_store))
    )
    assert r.json()["events"] == []

    # Without either, the store is ./.morphz.
    r = cli.raw("--json", "observe", "--kind", "external", "--text", "local", "--create")
    assert r.code == 0, r.err
    assert (tmp_path / ".morphz" / "default" / "data.mdb").is_file()

    # Contexts are separate.
    a = cli.raw(
        "--store",
        str(cli.store),
        "--context",
        "alpha",
        "--json",
        "observe",
        "--kind",
        "external",
        "--text",
        "only in alpha",
        "--create",
    )
    assert a.code == 0
    beta = cli.raw("--store", str(cli.store), "--context", "beta", "--json", "state")
    assert beta.code == 1 and beta.json()["error"]["code"] == "not_found"  # never created
    assert not (cli.store / "beta").exists()
    alpha = cli.raw("--store", str(cli.store), "--context", "alpha", "--json", "state").json()
    assert [e["ref"] for e in alpha["events"]] == ["@e1"]


def test_tx_parses_the_text_once_and_logs_it_as_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In process: the command parses the text (to refuse a bad one before the store
    opens), the service commits that parsed form, and the log keeps the text."""
    from click.testing import CliRunner

    import protocol.txlang as txlang
    from morphz.cli import cli as morphz_cli

    parsed: list[str] = []
    real = txlang.parse_tx

    def counting(text: str) -> Any:
        parsed.append(text)
        return real(text)

    monkeypatch.setattr(txlang, "parse_tx", counting)
    text = "(context-tx  (base-version 0)\n    (derive note   (v 1)))\n"
    args = ["--store", str(tmp_path / "store"), "--json"]
    done = CliRunner().invoke(
        morphz_cli, [*args, "tx", "--create", "--client-id", "c-1", "-"], input=text
    )
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["status"] == "committed"
    assert parsed == [text]
    logged = CliRunner().invoke(morphz_cli, [*args, "log", "1"])
    assert (json.loads(logged.output)["text"], json.loads(logged.output)["client_id"]) == (
        text,
        "c-1",
    )


# -- exactly once --------------------------------------------------------------


def test_client_id_retry_returns_duplicate_receipt(cli: Cli, tmp_path: Path) -> None:
    src = tmp_path / "y.tx"
    src.write_text("(context-tx (base-version 0) (derive y (a 1)))", encoding="utf-8")
    first = cli.ok("tx", str(src), "--client-id", "agent-7")
    assert (first["status"], first["version"], first["client_id"]) == ("committed", 1, "agent-7")
    assert first["duplicate"] is False

    retry = cli.ok("tx", str(src), "--client-id", "agent-7")
    assert retry["duplicate"] is True
    assert {k: v for k, v in retry.items() if k != "duplicate"} == {
        k: v for k, v in first.items() if k != "duplicate"
    }
    assert "duplicate" in cli.human("tx", str(src), "--client-id", "agent-7")
    assert cli.version() == 1
    assert cli.ok("log", "1")["client_id"] == "agent-7"

    reused = cli(
        "tx", "--client-id", "agent-7", stdin="(context-tx (base-version 1) (derive z (a 2)))"
    )
    assert reused.code == 1
    assert [e["code"] for e in reused.json()["errors"]] == ["client_id_reused"]
    assert cli.version() == 1


# -- human output --------------------------------------------------------------


def test_human_output_carries_the_key_facts(bare: Cli, tmp_path: Path) -> None:
    cli = bare
    assert cli.human("init", "--window", "4").strip() == (
        "context default: window 4 ticks, version 0, tick 0 (created)"
    )
    out = cli.human("observe", "--kind", "user_message", "--text", "deploy to eu")
    assert out.startswith("@e1  user_message  (12 chars)  ev:")
    cli.human("observe", "--kind", "tool_result", "--text", "region=eu-west-1")
    assert cli.human("claim").strip() == "tick 1: claimed @e1 @e2"

    receipt = cli.human(
        "tx",
        stdin="(context-tx (base-version 0) (derive target (from @e1 @e2) (region eu))"
        " (retire @e2))",
    )
    assert receipt.splitlines()[0] == "committed at version 1 (base 0)"
    assert "retired now: @e2" in receipt
    assert "relief:" in receipt and "tokens now" in receipt

    retire = cli.human("tx", stdin="(context-tx (base-version 1) (retire target))")
    assert "retiring: target due at tick 5" in retire

    frame = cli.human("frame", "target")
    assert frame.splitlines()[0] == "target  r1  retiring  (due at tick 5)"
    assert "  body: (region eu)" in frame
    assert "  from: @e1 @e2" in frame

    state = cli.human("state")
    assert "context default: version 2, tick 1, window 4" in state
    assert "  target  r1  retiring due 5" in state
    assert "  @e2  tool_result  retired" in state
    assert "  @e1  user_message  active" in state

    assert cli.human("deliver", "@e1").strip() == "@e1 delivered"
    hist = cli.human("history", "target").splitlines()
    assert hist == ["v1 (base 0) derive r1: (region eu)", "v2 (base 1) lifecycle"]

    err = cli("frame", "nope", as_json=False)
    assert err.out == ""
    _assert_clean_error(err, 1, "morphz: not_found:")


# -- the writer lock -------------------------------------------------------------

HOLDER = textwrap.dedent(
    """
    import sys, time
    from service.store import Store
    ctx = Store(sys.argv[1]).open("default")
    print("READY", flush=True)
    time.sleep(120)
    """
)


def test_second_writer_gets_store_locked(cli: Cli) -> None:
    cli.ok("init")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(cli.store)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_clean_env(),
    )
    try:
        assert holder.stdout is not None
        line = holder.stdout.readline()
        assert line.strip() == "READY", holder.stderr.read() if holder.stderr else line
        r = cli("observe", "--kind", "external", "--text", "blocked")
        assert r.code == 1, (r.out, r.err)
        assert r.json()["error"]["code"] == "store_locked"
        _assert_clean_error(
            cli("tx", stdin="(context-tx (base-version 0) (derive a (x 1)))", as_json=False),
            1,
            "store_locked",
        )
    finally:
        holder.kill()
        holder.wait(timeout=TIMEOUT)
        for stream in (holder.stdout, holder.stderr):
            if stream is not None:
                stream.close()
    # Once the holder is gone, the context is writable again and nothing was written.
    after = cli.ok("observe", "--kind", "external", "--text", "free")
    assert after["ref"] == "@e1"


# -- no Ray on the command line ----------------------------------------------------


def _imported(*args: str, cwd: Path) -> set[str]:
    p = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "morphz.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=_clean_env(),
        timeout=TIMEOUT,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    names = set()
    for line in p.stderr.splitlines():
        if not line.startswith("import time:"):
            continue
        name = line.rsplit("|", 1)[-1].strip()
        if name != "imported package":
            names.add(name)
    return names


@pytest.mark.parametrize(
    "args", [["--help"], ["--json", "--store", "s", "state"]], ids=["help", "state"]
)
def test_cli_does_not_import_ray(tmp_path: Path, args: list[str]) -> None:
    if "state" in args:
        _imported("--store", "s", "init", cwd=tmp_path)
    names = _imported(*args, cwd=tmp_path)
    assert "click" in names  # the parse worked: it sees what the CLI does import
    if "state" in args:
        assert "lmdb" in names
    top = {n.split(".", 1)[0] for n in names}
    assert "ray" not in top, sorted(n for n in names if n.split(".")[0] == "ray")[:10]


# -- hostile input -------------------------------------------------------------------


def _seeded(cli: Cli) -> dict[str, Any]:
    cli.ok("tx", stdin="(context-tx (base-version 0) (derive keep (x 1)))")
    return dict(cli.ok("state"))


HOSTILE_TEXT = {
    "nul-in-atom": "(context-tx (base-version 1) (derive x (a\x00b)))",
    "nul-in-string": '(context-tx (base-version 1) (derive x (a "b\x00c")))',
    "nested-parens": "(context-tx (base-version 1) (derive x " + "(" * 10_000 + ")" * 10_000 + "))",
    "only-parens": "(" * 10_000,
}


@pytest.mark.parametrize("name", sorted(HOSTILE_TEXT))
def test_hostile_tx_text_exits_2_cleanly(cli: Cli, name: str) -> None:
    before = _seeded(cli)
    text = HOSTILE_TEXT[name]
    _assert_clean_error(cli("tx", stdin=text, as_json=False), 2, "morphz: parse_error: 1:")
    r = cli("tx", stdin=text)
    assert r.code == 2
    assert r.json()["error"]["code"] == "parse_error"
    assert cli.ok("state") == before


@pytest.mark.parametrize("via", ["file", "stdin"])
def test_invalid_utf8_tx_exits_2_cleanly(cli: Cli, tmp_path: Path, via: str) -> None:
    before = _seeded(cli)
    raw = b'(context-tx (base-version 1) (derive x (a "\xff\xfe caf\xc3")))'
    if via == "file":
        bad = tmp_path / "bad.tx"
        bad.write_bytes(raw)
        r = cli("tx", str(bad), as_json=False)
    else:
        r = cli("tx", "-", stdin=raw, as_json=False)
    _assert_clean_error(r, 2)
    assert cli.ok("state") == before


def test_invalid_utf8_observation_file_exits_2_cleanly(cli: Cli, tmp_path: Path) -> None:
    before = _seeded(cli)
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"tool output \xff\xfe\x80 end")
    r = cli("observe", "--kind", "tool_result", "--file", str(bad), as_json=False)
    _assert_clean_error(r, 2)
    assert cli.ok("state") == before
