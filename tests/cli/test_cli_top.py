"""``morphz top``: the context actors of the session cluster, found through Ray's directory
of named actors, with their versions, counters and rates.

In-process through click's ``CliRunner``: this process is already connected to the
session cluster, so the command watches it (and leaves the connection as it found it).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from actors import ContextHandle, connect
from morphz.cli.main import cli
from morphz.cli.top import rates
from tests.actors.cluster import RayCluster


def top(*args: str) -> Result:
    return CliRunner().invoke(cli, ["top", *args])


@pytest.fixture
def loaded(
    ray_cluster: RayCluster, tmp_path: Path, context_name: str, namespace: str
) -> Iterator[ContextHandle]:
    """A context actor with 3 commits and 2 rejections (``frame_exists``)."""
    h = connect(context_name, store_dir=tmp_path, namespace=namespace)
    for i in range(3):
        assert h.submit(f"(context-tx (base-version {i}) (derive f{i} (n {i})))").committed
    for _ in range(2):
        assert not h.submit("(context-tx (base-version 3) (derive f0 (again)))").committed
    yield h
    h.shutdown()


def _rows(result: Result) -> list[dict[str, Any]]:
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["interval"] == 0.2
    return list(doc["contexts"])


def test_once_json_shows_the_context_with_its_version_and_counters(
    loaded: ContextHandle, namespace: str
) -> None:
    rows = _rows(top("--once", "--json", "--interval", "0.2", "--namespace", namespace))
    assert [r["context"] for r in rows] == [loaded.name]
    row = rows[0]
    assert row["namespace"] == namespace
    assert (row["version"], row["commits"], row["rejections"]) == (3, 3, 2)
    assert row["pending"] == 0 and row["denials"] == 0
    assert row["commit_rate"] == 0.0 and row["rejection_rate"] == 0.0  # idle while sampled
    assert row["pid"] == loaded.pid()


def test_all_namespaces_are_listed_without_a_filter(loaded: ContextHandle, namespace: str) -> None:
    rows = _rows(top("--once", "--json", "--interval", "0.2"))
    assert (namespace, loaded.name) in {(r["namespace"], r["context"]) for r in rows}


def test_an_enforcing_context_without_a_capability_shows_the_denial(
    ray_cluster: RayCluster, tmp_path: Path, context_name: str, namespace: str
) -> None:
    h = connect(context_name, store_dir=tmp_path, namespace=namespace, enforce=True)
    try:
        rows = _rows(top("--once", "--json", "--interval", "0.2", "--namespace", namespace))
    finally:
        h.shutdown()
    assert rows == [
        {
            "context": context_name,
            "namespace": namespace,
            "error": rows[0]["error"],
            "commit_rate": None,
            "rejection_rate": None,
        }
    ]
    assert rows[0]["error"]["code"] == "permission_denied"


def test_the_table_names_the_context(loaded: ContextHandle, namespace: str) -> None:
    result = top("--once", "--interval", "0.2", "--namespace", namespace)
    assert result.exit_code == 0, result.output
    assert loaded.name in result.output and "commits/s" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--interval", "0"], "0.1<=x<=60"),
        (["--interval", "soon"], "not a valid float"),
        (["--capability", "/nonexistent/token"], "cannot read the capability file"),
    ],
)
def test_bad_options_are_refused_before_any_sample(
    ray_cluster: RayCluster, args: list[str], message: str
) -> None:
    result = top("--once", *args)
    assert result.exit_code != 0
    assert message in result.output


def test_rates_are_per_second_and_unknown_across_a_restart() -> None:
    before = [
        {"namespace": "n", "context": "a", "pid": 1, "commits": 10, "rejections": 0},
        {"namespace": "n", "context": "b", "pid": 1, "commits": 10, "rejections": 0},
    ]
    after = [
        {"namespace": "n", "context": "a", "pid": 1, "commits": 30, "rejections": 4},
        {"namespace": "n", "context": "b", "pid": 2, "commits": 1, "rejections": 0},
        {"namespace": "n", "context": "c", "pid": 3, "commits": 5, "rejections": 0},
    ]
    a, b, c = rates(before, after, 2.0)
    assert (a["commit_rate"], a["rejection_rate"]) == (10.0, 2.0)
    assert b["commit_rate"] is None and c["commit_rate"] is None
