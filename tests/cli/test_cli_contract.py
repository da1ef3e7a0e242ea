"""The command line's one contract (docs/cli.md), walked command by command.

A table of error paths — missing store, missing context, malformed input, a
locked store, refusals — each run through ``morphz.cli.main`` in this process
(real LMDB stores in a temporary directory), asserting the exit code, the one
JSON error object ``{"error": {"code", "message"}}`` on stdout with ``--json``,
and that nothing was created. ``python -m tests.cli.test_cli_contract`` prints
the table.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from service.store import Store, open_context

TX_OK = "(context-tx (base-version 1) (derive note (from @e1) (seen it)))"
TX_REJECTED = "(context-tx (base-version 1) (retire @e1))"  # an undelivered request
TX_MALFORMED = '(context-tx (base-version 1) (derive x (a "b)'


@dataclass(frozen=True)
class Path_:
    """One error path: *args* (``{tx}`` … are files) on a *setup*, its exit and error code."""

    name: str
    setup: str  # "none" (no store dir), "ready" (context default), "locked" (ready, held)
    args: tuple[str, ...]
    exit: int
    code: str | None  # the JSON error code; None: the command's own document (a receipt)
    stdin: str = ""


def _p(name: str, setup: str, args: str, exit: int, code: str | None, stdin: str = "") -> Path_:
    return Path_(name, setup, tuple(args.split()), exit, code, stdin)


READS = [
    ("state", "state"),
    ("frame", "frame release"),
    ("event", "event @e1"),
    ("history", "history release"),
    ("log", "log 1"),
    ("trace", "trace"),
    ("trace-decision", "trace --decision 1"),
    ("search", "search release"),
    ("reindex", "reindex"),
    ("recall", "recall {recall}"),
    ("graph", "graph release"),
    ("review-list", "review list"),
    ("audit", "audit"),
    ("tx-check", "tx --check {tx_ok}"),
    ("fork-source", "fork copy"),
]
WRITES = [
    ("observe", "observe --kind external --text hello"),
    ("claim", "claim"),
    ("tx", "tx {tx_ok}"),
    ("deliver", "deliver @e1"),
    ("import", "import {jsonl}"),
    ("recall-as-observation", "recall {recall} --as-observation"),
    ("review-accept", "review accept release --reviewer ann"),
    ("review-admit", "review admit"),
    ("review-scan", "review scan"),
    ("drop", "drop {context} --yes"),
]

PATHS: list[Path_] = [
    # Reads never create: a missing store or context is not_found (exit 1).
    *(
        _p(f"no-store/{n}", "none", a.replace("{context}", "default"), 1, "not_found")
        for n, a in READS + WRITES
    ),
    _p("no-store/contexts", "none", "contexts", 1, "not_found"),
    *(
        _p(
            f"no-context/{n}",
            "ready",
            "--context typo " + a.replace("{context}", "typo"),
            1,
            "not_found",
        )
        for n, a in READS + WRITES
    ),
    # Malformed input or a bad command line: exit 2.
    _p("bad-ref", "ready", "event e1", 2, "bad_ref"),
    _p("negative-offset", "ready", "event @e1 --offset -1", 2, "out_of_range"),
    _p("non-int-option", "ready", "event @e1 --offset many", 2, "usage_error"),
    _p("unknown-option", "ready", "state --bogus", 2, "usage_error"),
    _p("unknown-command", "ready", "frobnicate", 2, "usage_error"),
    _p("missing-argument", "ready", "frame", 2, "usage_error"),
    _p("observe-no-kind", "ready", "observe --text x", 2, "usage_error"),
    _p("observe-bad-kind", "ready", "observe --kind gossip --text x", 2, "usage_error"),
    _p(
        "observe-text-and-file",
        "ready",
        "observe --kind external --text x --file {jsonl}",
        2,
        "usage_error",
    ),
    _p("tx-malformed", "ready", "tx {tx_bad}", 2, "parse_error"),
    _p("tx-stdin-malformed", "ready", "tx", 2, "parse_error", stdin=TX_MALFORMED),
    _p("tx-no-such-file", "ready", "tx /nonexistent/tx.scm", 2, "usage_error"),
    _p("tx-check-and-create", "ready", "tx --check --create {tx_ok}", 2, "usage_error"),
    _p("recall-bad-json", "ready", "recall {{bad", 2, "parse_error"),
    _p("recall-unknown-field", "ready", "recall {recall_unknown}", 2, "bad_request"),
    _p("recall-depth", "ready", "recall {recall_deep}", 2, "out_of_range"),
    _p("search-limit", "ready", "search x --limit 0", 2, "usage_error"),
    _p("trace-bad-int", "ready", "trace --decision x", 2, "usage_error"),
    _p("trace-frame-and-call", "ready", "trace --frame a --call 1", 2, "usage_error"),
    _p("log-bad-int", "ready", "log many", 2, "usage_error"),
    _p("review-no-reviewer", "ready", "review accept release", 2, "usage_error"),
    _p("bad-context-name", "ready", "--context ../escape state", 2, "bad_context_name"),
    _p("drop-bad-name", "ready", "drop ../escape --yes", 2, "bad_context_name"),
    _p("fork-bad-name", "ready", "fork ../escape", 2, "bad_context_name"),
    _p("fork-negative-version", "ready", "fork copy --at-version -1", 2, "out_of_range"),
    _p("init-bad-window", "none", "init --window -1", 2, "out_of_range"),
    _p("import-bad-line", "ready", "import {jsonl_bad}", 2, "parse_error"),
    # Well-formed but refused: exit 1.
    _p("unknown-frame", "ready", "frame ghost", 1, "not_found"),
    _p("unknown-event", "ready", "event @e99", 1, "not_found"),
    _p("unknown-version", "ready", "log 99", 1, "not_found"),
    _p("history-unknown", "ready", "history ghost", 1, "not_found"),
    _p("deliver-unknown", "ready", "deliver @e7", 1, "not_found"),
    _p("init-window-fixed", "ready", "init --window 3", 1, "exists"),
    _p("fork-exists", "ready", "fork default", 1, "exists"),
    _p("fork-future-version", "ready", "fork copy --at-version 99", 1, "future_version"),
    _p("trace-future-decision", "ready", "trace --decision 99", 1, "future_version"),
    _p("drop-not-confirmed", "ready", "drop default", 1, "not_confirmed"),
    _p("tx-rejected", "ready", "tx {tx_rejected}", 1, None),
    _p("tx-check-rejected", "ready", "tx --check {tx_rejected}", 1, None),
    # A context actor (here: another writer) holds the store: writes are store_locked.
    *(
        _p(f"locked/{n}", "locked", a.replace("{context}", "default"), 1, "store_locked")
        for n, a in WRITES
    ),
    _p("locked/init", "locked", "init", 1, "store_locked"),
]


def _files(tmp: Path) -> dict[str, str]:
    files = {
        "tx_ok": TX_OK,
        "tx_rejected": TX_REJECTED,
        "tx_bad": TX_MALFORMED,
        "jsonl": json.dumps({"kind": "external", "text": "imported"}) + "\n",
        "jsonl_bad": '{"kind": "gossip", "text": "x"}\n',
    }
    out = {}
    for name, text in files.items():
        path = tmp / f"{name}.txt"
        path.write_text(text, encoding="utf-8")
        out[name] = str(path)
    out["recall"] = json.dumps({"frame_id": "release"})
    out["recall_unknown"] = json.dumps({"frame_id": "release", "bogus": 1})
    out["recall_deep"] = json.dumps({"frame_id": "release", "depth": 99})
    return out


def _seed(store: Path) -> None:
    """Context ``default``: a claimed user request @e1 and the frame ``release`` from it."""
    with open_context(store, "default", create=True) as ctx:
        e = ctx.observe("user_message", "Ship v1 once the tests pass.")
        ctx.claim()
        r = ctx.commit(f"(context-tx (base-version 0) (derive release (from {e.ref}) (goal v1)))")
        assert r.committed


@dataclass
class Result:
    exit: int
    out: str
    err: str

    def error(self) -> dict[str, Any]:
        lines = self.out.strip().splitlines()
        assert len(lines) == 1, f"one JSON object on one line, got {self.out!r} ({self.err!r})"
        doc = json.loads(lines[0])
        assert set(doc) == {"error"}, doc
        assert {"code", "message"} <= set(doc["error"]), doc
        assert isinstance(doc["error"]["message"], str) and doc["error"]["message"], doc
        return dict(doc["error"])


def run(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    store: Path,
    args: list[str],
    stdin: str = "",
) -> Result:
    """``morphz --store STORE ARGS…`` through the real entry point, in this process."""
    from morphz.cli.main import main

    capsys.readouterr()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode("utf-8"))))
    monkeypatch.delenv("MORPHZ_STORE", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    try:
        main(["--store", str(store), *args])
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    captured = capsys.readouterr()
    return Result(code, captured.out, captured.err)


@pytest.fixture
def held(tmp_path: Path) -> Iterator[Path]:
    """A seeded store whose context ``default`` another writer holds open."""
    store = tmp_path / "store"
    _seed(store)
    with Store(store).open("default", create=False):
        yield store


def _contents(store: Path) -> list[str]:
    if not store.exists():
        return []
    return sorted(p.name for p in store.iterdir())


@pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])
def test_every_error_path_keeps_the_contract(
    path: Path_, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store"
    holder = None
    if path.setup in ("ready", "locked"):
        _seed(store)
    if path.setup == "locked":
        holder = Store(store).open("default", create=False)
    files = _files(tmp_path)
    args = [a.format(**files) if "{" in a and "}" in a and "{{" not in a else a for a in path.args]
    args = [a.replace("{{", "{") for a in args]
    before = _contents(store)
    try:
        for as_json in (True, False):
            r = run(capsys, monkeypatch, store, (["--json"] if as_json else []) + args, path.stdin)
            assert r.exit == path.exit, (path.name, as_json, r)
            assert "Traceback" not in r.out + r.err
            if path.code is None:  # a receipt: the command's own document
                if as_json:
                    assert json.loads(r.out)["status"] == "rejected"
                continue
            if as_json:
                err = r.error()
                assert err["code"] == path.code, (path.name, err)
            else:
                assert r.out == "", (path.name, r.out)
                assert path.code in r.err or "Error" in r.err, (path.name, r.err)
    finally:
        if holder is not None:
            holder.close()
    # Nothing was created or removed by a failed command.
    assert _contents(store) == before, path.name
    if path.setup == "ready" and path.code != "not_confirmed":
        assert Store(store).exists("default")


def test_not_found_names_what_exists_and_how_to_create(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store"
    _seed(store)
    with open_context(store, "task3", create=True):
        pass
    err = run(capsys, monkeypatch, store, ["--json", "--context", "typo", "state"]).error()
    assert err["code"] == "not_found"
    assert "'typo'" in err["message"] and "default, task3" in err["message"]
    assert "morphz init --context typo" in err["message"]
    missing = run(capsys, monkeypatch, tmp_path / "nowhere", ["--json", "state"]).error()
    assert "there is no store at" in missing["message"] and "morphz init" in missing["message"]
    assert not (tmp_path / "nowhere").exists()
    assert Store(store).contexts() == ["default", "task3"]


def test_writes_create_only_with_create_or_init(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store"
    observe = ["--json", "observe", "--kind", "external", "--text", "hi"]
    assert run(capsys, monkeypatch, store, observe).exit == 1
    assert not store.exists()
    made = run(capsys, monkeypatch, store, [*observe, "--create"])
    assert made.exit == 0 and json.loads(made.out)["ref"] == "@e1"
    tx = tmp_path / "tx.scm"
    tx.write_text("(context-tx (base-version 0) (derive a (from @e1) (x 1)))", encoding="utf-8")
    assert run(capsys, monkeypatch, store, ["--context", "b", "tx", str(tx)]).exit == 1
    assert run(capsys, monkeypatch, store, ["--context", "b", "tx", str(tx), "--create"]).exit == 1
    assert Store(store).exists("b")  # created, then the transaction rejected (@e1 unknown)
    assert run(capsys, monkeypatch, store, ["--context", "c", "init"]).exit == 0
    assert Store(store).contexts() == ["b", "c", "default"]


def test_global_options_after_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store"
    _seed(store)
    with open_context(store, "other", create=True) as ctx:
        ctx.observe("external", "only in other")
    r = run(capsys, monkeypatch, store, ["state", "--json"])
    assert r.exit == 0 and json.loads(r.out)["version"] == 1
    r = run(
        capsys,
        monkeypatch,
        tmp_path / "elsewhere",
        ["state", "--json", "--context", "other", "--store", str(store)],
    )
    doc = json.loads(r.out)
    assert (doc["context"], [e["ref"] for e in doc["events"]]) == ("other", ["@e1"])
    r = run(capsys, monkeypatch, store, ["review", "list", "--json"])
    assert r.exit == 0 and isinstance(json.loads(r.out), dict)
    r = run(capsys, monkeypatch, store, ["frame", "ghost", "--json"])
    assert r.exit == 1 and r.error()["code"] == "not_found"


def test_contexts_lists_counters_and_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store"
    _seed(store)
    with open_context(store, "empty", create=True, window=3):
        pass
    doc = json.loads(run(capsys, monkeypatch, store, ["contexts", "--json"]).out)
    rows = {c["name"]: c for c in doc["contexts"]}
    assert list(rows) == ["default", "empty"]
    d = rows["default"]
    assert (d["version"], d["tick"], d["frames"], d["events"]) == (1, 1, 1, 1)
    assert d["bytes"] > 0
    assert (rows["empty"]["window"], rows["empty"]["events"]) == (3, 0)
    human = run(capsys, monkeypatch, store, ["contexts"])
    assert human.exit == 0 and human.out.splitlines()[0].split()[:3] == [
        "context",
        "version",
        "tick",
    ]
    (tmp_path / "bare").mkdir()
    assert json.loads(run(capsys, monkeypatch, tmp_path / "bare", ["contexts", "--json"]).out) == {
        "store": str(tmp_path / "bare"),
        "contexts": [],
    }


def test_contexts_works_beside_a_writer(
    held: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    r = run(capsys, monkeypatch, held, ["--json", "contexts"])
    assert r.exit == 0 and [c["name"] for c in json.loads(r.out)["contexts"]] == ["default"]
    # Reads and tx --check stay read-only beside the writer.
    assert run(capsys, monkeypatch, held, ["--json", "state"]).exit == 0
    tx = held.parent / "tx.scm"
    tx.write_text(TX_OK, encoding="utf-8")
    checked = run(capsys, monkeypatch, held, ["--json", "tx", "--check", str(tx)])
    assert checked.exit == 0 and json.loads(checked.out)["status"] == "committed"


def test_drop_asks_and_deletes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store"
    _seed(store)
    with open_context(store, "scratch", create=True):
        pass
    no = run(capsys, monkeypatch, store, ["drop", "scratch"], stdin="n\n")
    assert no.exit == 1 and "not_confirmed" in no.err and Store(store).exists("scratch")
    yes = run(capsys, monkeypatch, store, ["--json", "drop", "scratch"], stdin="y\n")
    assert yes.exit == 0, yes
    assert json.loads(yes.out)["dropped"] == "scratch"
    assert Store(store).contexts() == ["default"]
    assert _contents(store) == ["default"]  # nothing left aside
    gone = run(capsys, monkeypatch, store, ["--json", "drop", "scratch", "--yes"])
    assert gone.exit == 1 and gone.error()["code"] == "not_found"
    scripted = run(capsys, monkeypatch, store, ["drop", "default", "--yes"])
    assert scripted.exit == 0 and Store(store).contexts() == []


def test_tx_check_prints_the_receipt_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store"
    _seed(store)
    data = store / "default" / "data.mdb"
    before = data.read_bytes()
    tx = tmp_path / "tx.scm"
    tx.write_text(TX_OK, encoding="utf-8")
    ok = run(capsys, monkeypatch, store, ["--json", "tx", "--check", str(tx)])
    doc = json.loads(ok.out)
    assert ok.exit == 0 and doc["check"] is True
    assert (doc["status"], doc["version"], doc["base_version"]) == ("committed", 2, 1)
    human = run(capsys, monkeypatch, store, ["tx", "--check", str(tx)])
    assert human.out.startswith("would be committed at version 2 (base 1)")
    assert "nothing written" in human.out
    tx.write_text(TX_REJECTED, encoding="utf-8")
    bad = run(capsys, monkeypatch, store, ["--json", "tx", "--check", str(tx)])
    assert bad.exit == 1 and json.loads(bad.out)["errors"][0]["code"] == "causally_protected"
    assert data.read_bytes() == before
    with open_context(store, "default", readonly=True) as ctx:
        assert ctx.version() == 1 and ctx.state()["frames"][0]["id"] == "release"
    # The real commit then gets the receipt the check announced.
    tx.write_text(TX_OK, encoding="utf-8")
    real = json.loads(run(capsys, monkeypatch, store, ["--json", "tx", str(tx)]).out)
    assert (real["status"], real["version"]) == ("committed", 2)


def test_a_failed_fork_leaves_nothing_behind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store"
    _seed(store)
    failed = run(capsys, monkeypatch, store, ["--json", "fork", "task3", "--at-version", "5"])
    assert failed.exit == 1 and failed.error()["code"] == "future_version"
    assert _contents(store) == ["default"]
    retry = run(capsys, monkeypatch, store, ["--json", "fork", "task3", "--at-version", "1"])
    assert retry.exit == 0, retry
    assert json.loads(retry.out)["context"] == "task3"
    with open_context(store, "task3", readonly=True) as ctx:
        assert ctx.version() == 1 and ctx.frame("release")["body"] == "(goal v1)"


SIGINT_DEFAULT = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)"
"""Python code that gives a child SIGINT as an interactive Python has it (KeyboardInterrupt)."""


def _wait_until_reading_stdin(pid: int) -> None:
    """Until process *pid* sleeps in a read of its stdin (imports done, command running).

    ``/proc/PID/syscall`` names the blocking call and its arguments: ``read`` (0 on
    x86-64) of descriptor 0. A pipe read elsewhere (a helper process an import asks
    something of) is not mistaken for it.
    """
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/syscall", encoding="ascii") as f:
                fields = f.read().split()
        except OSError:
            return
        if len(fields) > 1 and fields[0] == "0" and int(fields[1], 16) == 0:
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} never read its stdin")


def test_sigint_exits_130_with_one_json_error(tmp_path: Path) -> None:
    store = tmp_path / "store"
    _seed(store)
    # `tx` waits on stdin; the interrupt arrives while it reads. A runner started in the
    # background of a shell hands its children SIGINT ignored: the child takes it back.
    p = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"{SIGINT_DEFAULT}; from morphz.cli.main import main; main()",
            "--store",
            str(store),
            "--json",
            "tx",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={k: v for k, v in os.environ.items() if k != "MORPHZ_STORE"},
    )
    try:
        _wait_until_reading_stdin(p.pid)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, (out, err)
    lines = out.decode().strip().splitlines()
    assert len(lines) == 1 and json.loads(lines[0]) == {
        "error": {"code": "interrupted", "message": "interrupted"}
    }
    assert b"Traceback" not in err


def main() -> None:
    """Print the error paths the table-driven test walks."""
    for p in PATHS:
        code = p.code or "(receipt)"
        print(f"{p.name:<36} {p.setup:<7} exit {p.exit}  {code:<18} morphz {' '.join(p.args)}")
    print(f"{len(PATHS)} paths")


if __name__ == "__main__":
    main()


def test_with_json_stdout_holds_the_documents_alone(capsys: pytest.CaptureFixture[str]) -> None:
    """Ray's driver prints its raylets' warnings on ``sys.stdout`` from its own thread; with
    ``--json`` anything a library prints there goes to stderr, the documents to stdout."""
    import threading

    from morphz.cli.console import print_json, results_only_on_stdout

    with results_only_on_stdout(True):
        chatter = threading.Thread(target=print, args=("(raylet) WARNING: workers started",))
        chatter.start()
        chatter.join()
        print_json({"ok": True})
    print("after the command")  # stdout is the real one again
    out, err = capsys.readouterr()
    assert out.splitlines() == ['{"ok": true}', "after the command"]
    assert err == "(raylet) WARNING: workers started\n"
    with results_only_on_stdout(False):  # human output: stdout as it was
        print("plain")
    assert capsys.readouterr().out == "plain\n"
