"""``morphz recall`` and ``morphz graph``: the JSON contract, exit codes and DOT output.

The commands run in-process through click's ``CliRunner`` on ``morphz.cli.cli``;
a fixture registers them on the group if the CLI does not (yet) do so.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from morphz.cli import cli
from morphz.cli.recall import graph_cmd, graph_dot, recall_cmd
from service.store import Store

SEED_REQUEST = """{
  "frame_id": "release-procedure",
  "depth": 2,
  "direction": "ancestors",
  "include_bodies": true,
  "include_events": false,
  "max_nodes": 8
}"""


@pytest.fixture(autouse=True)
def registered() -> Iterator[None]:
    added = [c for c in (recall_cmd, graph_cmd) if c.name not in cli.commands]
    for command in added:
        cli.add_command(command)
    yield
    for command in added:
        cli.commands.pop(str(command.name), None)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A store whose default context holds the seed's consolidated release procedure."""
    path = tmp_path / "store"
    with Store(path).open(sync=False) as ctx:
        run_a, run_b = ctx.observe_many(
            [
                ("tool_result", "npm test: 412 passed; npm run build: dist/", "main"),
                ("tool_result", "pnpm --filter web build: apps/web/dist/", "main"),
            ]
        )
        ctx.claim()
        for text in (
            f'(derive release-case-a (from {run_a.ref}) (test "npm test"))'
            f'(derive release-case-b (from {run_b.ref}) (test "pnpm --filter web test"))',
            '(derive release-procedure (from release-case-a release-case-b) (steps "test, build"))'
            "(relate release-procedure supersedes release-case-a)"
            "(relate release-procedure supersedes release-case-b)"
            "(retire release-case-a release-case-b)",
        ):
            receipt = ctx.commit(f"(context-tx (base-version {ctx.version()}) {text})")
            assert receipt.status == "committed", receipt.errors
    return path


def run(store: Path, *args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(cli, ["--store", str(store), *args], input=stdin)


def doc(result: Result) -> Any:
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, result.stdout
    return json.loads(lines[0])


# -- recall --------------------------------------------------------------------------


def test_recall_prints_the_page_as_one_json_document(store: Path) -> None:
    result = run(store, "--json", "recall", SEED_REQUEST)

    assert result.exit_code == 0, result.output
    page = doc(result)
    assert list(page) == ["nodes", "edges", "next_cursor", "version"]
    assert [n["id"] for n in page["nodes"]] == [
        "release-procedure",
        "release-case-a",
        "release-case-b",
        "@e1",
        "@e2",
    ]
    assert page["nodes"][1]["lifecycle"] == "retired"
    assert page["nodes"][3]["preview"].startswith("npm test")
    assert {"from": "release-procedure", "to": "release-case-a", "label": "supersedes"} in page[
        "edges"
    ]
    assert page["next_cursor"] is None
    assert page["version"] == 2


def test_recall_pages_with_the_cursor(store: Path) -> None:
    request = json.dumps({"frame_id": "release-procedure", "max_nodes": 2})
    first = doc(run(store, "--json", "recall", request))
    assert first["next_cursor"]
    second = run(store, "--json", "recall", request, "--cursor", first["next_cursor"])
    assert second.exit_code == 0, second.output
    ids = [n["id"] for n in first["nodes"] + doc(second)["nodes"]]
    assert ids[:4] == ["release-procedure", "release-case-a", "release-case-b", "@e1"]


def test_recall_reads_the_request_from_stdin(store: Path) -> None:
    result = run(store, "--json", "recall", "-", stdin=SEED_REQUEST)
    assert result.exit_code == 0, result.output
    assert len(doc(result)["nodes"]) == 5


def test_recall_prints_a_readable_page_without_json(store: Path) -> None:
    result = run(store, "recall", SEED_REQUEST)
    assert result.exit_code == 0, result.output
    assert "release-procedure  r1  active" in result.stdout
    assert "release-case-a  r1  retired" in result.stdout
    assert "release-procedure -supersedes-> release-case-a" in result.stdout


def test_recall_as_observation_records_a_recall_result(store: Path) -> None:
    result = run(store, "--json", "recall", SEED_REQUEST, "--as-observation")

    assert result.exit_code == 0, result.output
    page = doc(result)
    ref = page["observation"]["ref"]
    with Store(store).open() as ctx:
        event = ctx.event(ref)
        text = ctx.read_event(ref)["text"]
        assert ctx.frame("release-case-a")["lifecycle"] == "retired"  # unchanged
        assert ctx.version() == page["version"]
    assert event["kind"] == "recall_result"
    assert json.loads(text)["nodes"] == page["nodes"]


@pytest.mark.parametrize(
    "request_json, exit, code",
    [
        ('{"frame_id": "nope"}', 1, "not_found"),
        # Malformed requests are bad input: exit 2 (docs/cli.md; they were 1 before).
        ('{"frame_id": "release-procedure", "depth": 5}', 2, "out_of_range"),
        ('{"frame_id": "release-procedure", "max_nodes": 129}', 2, "out_of_range"),
        ('{"frame_id": "release-procedure", "max_bytes": 0}', 2, "out_of_range"),
        ('{"frame_id": "release-procedure", "colour": "red"}', 2, "bad_request"),
        ('["release-procedure"]', 2, "bad_request"),
    ],
)
def test_refused_and_malformed_requests(
    store: Path, request_json: str, exit: int, code: str
) -> None:
    result = run(store, "--json", "recall", request_json)
    assert result.exit_code == exit
    assert doc(result)["error"]["code"] == code


def test_refused_request_without_json_goes_to_stderr(store: Path) -> None:
    result = run(store, "recall", '{"frame_id": "nope"}')
    assert result.exit_code == 1
    assert result.stdout == ""
    assert "not_found" in result.stderr


def test_bad_and_stale_cursors_exit_1(store: Path) -> None:
    request = json.dumps({"frame_id": "release-procedure", "max_nodes": 2})
    assert (
        doc(run(store, "--json", "recall", request, "--cursor", "xyz"))["error"]["code"]
        == "bad_cursor"
    )
    cursor = doc(run(store, "--json", "recall", request))["next_cursor"]
    other = json.dumps({"frame_id": "release-procedure", "max_nodes": 3})
    mismatch = run(store, "--json", "recall", other, "--cursor", cursor)
    assert (mismatch.exit_code, doc(mismatch)["error"]["code"]) == (1, "cursor_mismatch")
    with Store(store).open() as ctx:
        ctx.commit(f"(context-tx (base-version {ctx.version()}) (derive later (n 1)))")
    stale = run(store, "--json", "recall", request, "--cursor", cursor)
    assert (stale.exit_code, doc(stale)["error"]["code"]) == (1, "stale_cursor")


@pytest.mark.parametrize("text", ["{bad json", '{"frame_id": "x",}', ""])
def test_unparsable_json_exits_2(store: Path, text: str) -> None:
    result = run(store, "--json", "recall", text)
    assert result.exit_code == 2
    assert doc(result)["error"]["code"] == "parse_error"


# -- graph ---------------------------------------------------------------------------


def test_graph_prints_dot_with_nodes_and_edges(store: Path) -> None:
    result = run(store, "graph", "release-procedure", "--format", "dot")

    assert result.exit_code == 0, result.output
    dot = result.stdout
    assert dot.startswith('digraph "release-procedure" {')
    assert dot.rstrip().endswith("}")
    assert (
        '"release-procedure" [shape=box, style="bold", label="release-procedure\\nr1 active"];'
        in dot
    )
    assert (
        '"release-case-a" [shape=box, style="dashed", label="release-case-a\\nr1 retired"];' in dot
    )
    assert '"@e1" [shape=ellipse, label="@e1\\ntool_result active"];' in dot
    assert '"release-procedure" -> "release-case-a" [label="supersedes"];' in dot
    assert '"release-procedure" -> "release-case-b" [label="source"];' in dot
    assert '"release-case-b" -> "@e2" [label="source"];' in dot


def test_graph_depth_and_direction(store: Path) -> None:
    one = run(store, "graph", "release-procedure", "--depth", "1").stdout
    assert '"@e1"' not in one and '"release-case-a"' in one
    down = run(store, "graph", "release-case-a", "--direction", "descendants").stdout
    assert '"release-procedure" -> "release-case-a" [label="source"];' in down
    bad = run(store, "--json", "graph", "release-procedure", "--depth", "9")
    assert (bad.exit_code, doc(bad)["error"]["code"]) == (2, "out_of_range")
    missing = run(store, "--json", "graph", "nope")
    assert (missing.exit_code, doc(missing)["error"]["code"]) == (1, "not_found")


def test_graph_writes_to_a_file(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "g.dot"
    result = run(store, "--json", "graph", "release-procedure", "--output", str(out))
    assert result.exit_code == 0, result.output
    summary = doc(result)
    assert summary["nodes"] == 5 and summary["edges"] == 6 and summary["output"] == str(out)
    assert out.read_text(encoding="utf-8").startswith("digraph")


def test_graph_json_without_output_carries_the_text(store: Path) -> None:
    summary = doc(run(store, "--json", "graph", "release-procedure"))
    assert summary["format"] == "dot" and summary["text"].startswith("digraph")


def test_svg_without_graphviz_is_a_clear_refusal(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("morphz.cli.recall.shutil.which", lambda name: None)
    result = run(store, "graph", "release-procedure", "--format", "svg")
    assert result.exit_code == 1
    assert "graphviz_missing" in result.stderr and "Graphviz" in result.stderr
    assert "--format dot" in result.stderr


def test_svg_pipes_dot_text_to_graphviz(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "dot"
    seen = tmp_path / "seen.dot"
    fake.write_text(f'#!/bin/sh\ncat > "{seen}"\necho "<svg>$1</svg>"\n', encoding="utf-8")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr("morphz.cli.recall.shutil.which", lambda name: str(fake))

    result = run(store, "graph", "release-procedure", "--format", "svg")

    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "<svg>-Tsvg</svg>"
    assert seen.read_text(encoding="utf-8").startswith('digraph "release-procedure"')


def test_failing_graphviz_is_reported(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "dot"
    fake.write_text("#!/bin/sh\necho 'syntax error' >&2\nexit 3\n", encoding="utf-8")
    os.chmod(fake, 0o755)
    monkeypatch.setattr("morphz.cli.recall.shutil.which", lambda name: str(fake))
    result = run(store, "--json", "graph", "release-procedure", "--format", "svg")
    assert result.exit_code == 1
    assert doc(result)["error"]["code"] == "graphviz_failed"


def test_dot_quoting_of_awkward_ids() -> None:
    dot = graph_dot(
        [{"id": 'a"b\\c', "type": "frame", "depth": 0, "lifecycle": "active", "revision": 1}],
        [{"from": 'a"b\\c', "to": 'a"b\\c', "label": "self"}],
    )
    assert '"a\\"b\\\\c" [shape=box' in dot
    assert '"a\\"b\\\\c" -> "a\\"b\\\\c" [label="self"];' in dot
