"""The CLI contract of ``morphz search``, ``morphz reindex`` and ``morphz import``.

The commands live in :mod:`morphz.cli.search`; a fixture registers them on
:data:`morphz.cli.cli` when the CLI module does not do it yet, and the tests
drive the group in-process with click's runner.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from morphz.cli import cli
from morphz.cli import search as cli_search
from service.store import Store


@pytest.fixture(scope="module", autouse=True)
def registered() -> Iterator[None]:
    added = [c for c in cli_search.COMMANDS if c.name not in cli.commands]
    for command in added:
        cli.add_command(command)
    yield
    for command in added:
        assert command.name is not None
        cli.commands.pop(command.name, None)


class Cli:
    def __init__(self, store: Path) -> None:
        self.store = store
        self.runner = CliRunner()

    def run(self, *args: str, input: str | None = None) -> click.testing.Result:
        return self.runner.invoke(
            cli, ["--store", str(self.store), "--json", *args], input=input, catch_exceptions=False
        )

    def json(self, *args: str, input: str | None = None) -> Any:
        result = self.run(*args, input=input)
        assert result.exit_code == 0, result.output
        return json.loads(result.output)


@pytest.fixture
def c(tmp_path: Path) -> Cli:
    cli_ = Cli(tmp_path / "store")
    assert cli_.run("init").exit_code == 0  # reads and writes never create it
    return cli_


def write_lines(path: Path, records: list[Any]) -> Path:
    path.write_text(
        "\n".join(r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) for r in records)
        + "\n",
        encoding="utf-8",
    )
    return path


def test_import_records_in_line_order_and_search_finds_them(c: Cli, tmp_path: Path) -> None:
    records = [
        {
            "kind": "tool_result",
            "text": "生产配置确认部署地区为上海 cn-shanghai",
            "time": "2026-01-02T03:04:05Z",
        },
        {"kind": "user_message", "text": "deploy to the right region please", "session": "s1"},
        {"kind": "external", "text": "ภาษาไทยง่ายนิดเดียว", "time": 1_700_000_000},
    ]
    doc = c.json("import", str(write_lines(tmp_path / "in.jsonl", records)))
    assert doc == {"imported": 3, "refs": ["@e1", "@e2", "@e3"]}

    found = c.json("search", "部署地区")
    assert set(found) >= {"hits", "version", "indexed_version", "lag"}
    assert found["lag"] == 0 and found["indexed_version"] == found["version"] == 0
    (hit,) = found["hits"][:1]
    assert hit["id"] == "@e1" and hit["type"] == "event" and hit["kind"] == "tool_result"
    assert hit["lifecycle"] == "active" and hit["score"] > 0 and "«部署»" in hit["snippet"]
    assert c.json("search", "ภาษาไทย")["hits"][0]["id"] == "@e3"
    # Times from ISO-8601 and epoch seconds are both kept.
    t1 = c.json("search", "上海")["hits"][0]["time"]
    assert t1 == pytest.approx(1767323045.0)
    since = c.json("search", "上海 ภาษาไทย", "--since", "2026-01-01T00:00:00")
    assert [h["id"] for h in since["hits"]] == ["@e1"]
    until = c.json("search", "上海 ภาษาไทย", "--until", "1700000000")
    assert [h["id"] for h in until["hits"]] == ["@e3"]
    only = c.json("search", "上海 region ภาษาไทย", "--kind", "user_message", "--kind", "external")
    assert {h["id"] for h in only["hits"]} == {"@e2", "@e3"}
    assert c.json("search", "region", "--prefix", "@e2")["hits"][0]["id"] == "@e2"
    assert c.json("search", "region", "--lifecycle", "retired")["hits"] == []


def test_search_lag_and_catch_up(c: Cli, tmp_path: Path) -> None:
    c.json(
        "import",
        str(write_lines(tmp_path / "a.jsonl", [{"kind": "tool_result", "text": "alpha build"}])),
    )
    c.json("search", "alpha")
    c.json(
        "import",
        str(write_lines(tmp_path / "b.jsonl", [{"kind": "tool_result", "text": "alpha deploy"}])),
    )
    stale = c.json("search", "alpha", "--no-catch-up")
    assert stale["lag"] == 1 and [h["id"] for h in stale["hits"]] == ["@e1"]
    fresh = c.json("search", "alpha")
    assert fresh["lag"] == 0 and {h["id"] for h in fresh["hits"]} == {"@e1", "@e2"}


def test_search_sees_frames_and_commits(c: Cli, tmp_path: Path) -> None:
    with Store(c.store).open("default") as ctx:
        ctx.observe("tool_result", "current production configuration confirms cn-shanghai")
        ctx.claim()
        receipt = ctx.commit(
            "(context-tx (base-version 0) (derive deployment/target-v2 (from @e1) (fact (region cn-shanghai))))"
        )
        assert receipt.committed
    doc = c.json("search", "cn-shanghai", "--kind", "frame")
    assert [h["id"] for h in doc["hits"]] == ["deployment/target-v2"]
    assert doc["hits"][0]["type"] == "frame" and doc["version"] == doc["indexed_version"] == 1


def test_reindex(c: Cli, tmp_path: Path) -> None:
    c.json(
        "import",
        str(
            write_lines(
                tmp_path / "a.jsonl",
                [{"kind": "tool_result", "text": f"item {i}"} for i in range(20)],
            )
        ),
    )
    before = c.json("search", "item", "--limit", "50")
    doc = c.json("reindex")
    assert set(doc) == {"indexed_version", "documents", "seconds"}
    assert doc["documents"] == 20 and doc["indexed_version"] == 0 and doc["seconds"] >= 0
    assert c.json("search", "item", "--limit", "50", "--no-catch-up")["hits"] == before["hits"]


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("{not json", "invalid JSON"),
        (json.dumps({"kind": "memo", "text": "x"}), "unknown kind"),
        (json.dumps({"kind": "tool_result"}), "missing text"),
        (json.dumps({"kind": "tool_result", "text": "x", "time": "yesterday"}), "ISO-8601"),
        (json.dumps(["kind", "text"]), "JSON object"),
        # These escaped as ValueError and RecursionError (a traceback, exit 1) before the
        # lines were read by protocol.wire.json_document; a duplicate key kept the last.
        ('{"kind": "tool_result", "text": "x", "time": ' + "9" * 5000 + "}", "invalid JSON"),
        ("[" * 100_000, "invalid JSON"),
        ('{"kind": "tool_result", "text": "x", "text": "y"}', "duplicate key"),
        ('{"kind": "tool_result", "text": "x", "time": NaN}', "invalid JSON"),
    ],
)
def test_import_bad_line_exits_2_and_imports_nothing(
    c: Cli, tmp_path: Path, line: str, why: str
) -> None:
    good = json.dumps({"kind": "tool_result", "text": "fine"})
    path = write_lines(tmp_path / "bad.jsonl", [good, good, line, good])
    result = c.run("import", str(path))
    assert result.exit_code == 2
    err = json.loads(result.output)["error"]
    assert "line 3" in err["message"] and why in err["message"]
    with Store(c.store).open("default") as ctx:
        assert ctx.meta().next_seq == 1  # nothing recorded


def test_bad_search_arguments_exit_2(c: Cli) -> None:
    assert c.run("search", "x", "--limit", "0").exit_code == 2
    assert c.run("search", "x", "--kind", "memo").exit_code == 2
    assert c.run("search", "x", "--since", "not-a-time").exit_code == 2
    assert c.run("search", "x", "--since", "20", "--until", "10").exit_code == 2
    # A byte that is not UTF-8 reaches argv as a lone surrogate (surrogateescape): it was
    # a UnicodeEncodeError from ICU's word breaker, a traceback instead of exit 2.
    bad = c.run("search", "deploy\udcffment")
    assert bad.exit_code == 2 and json.loads(bad.output)["error"]["code"] == "bad_query"


def test_import_of_5000_documents_is_quick(c: Cli, tmp_path: Path) -> None:
    words = "部署 地区 上海 region deploy build test passed failed ภาษา ไทย".split()
    records = [
        {
            "kind": "tool_result",
            "text": f"doc {i} " + " ".join(words[j % len(words)] for j in range(i, i + 12)),
        }
        for i in range(5000)
    ]
    path = write_lines(tmp_path / "many.jsonl", records)
    started = time.perf_counter()
    doc = c.json("import", str(path))
    imported = time.perf_counter() - started
    assert doc["imported"] == 5000 and doc["refs"][0] == "@e1" and doc["refs"][-1] == "@e5000"
    found = c.json("search", "上海 ภาษา", "--limit", "5")
    assert len(found["hits"]) == 5 and found["lag"] == 0
    # Reported, not asserted (tests never assert wall-clock times).
    print(f"imported 5000 in {imported:.2f}s, first search (catch-up) done")
