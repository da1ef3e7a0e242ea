"""The inspector's pages and JSON twins over an embedded store (``morphz inspect``'s app),
driven by an HTTP client: every page renders, its twin answers the same data, hostile
text is escaped, bad input gets a clear page and nothing is written."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

import morphz
from morphz.cli.inspect import inspect_app
from servers.inspector import CSP
from tests.servers.inspector_story import HOSTILE, fill


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Path]]:
    store = tmp_path_factory.mktemp("pages") / "store"
    fill(store)
    with TestClient(inspect_app(str(store)), base_url="http://127.0.0.1") as client:  # type: ignore[arg-type]
        yield client, store


def _version(store: Path) -> int:
    with morphz.open_context(store, "demo", readonly=True) as ctx:
        return int(ctx.version())


PAGES = [
    "/c/demo/graph",
    "/c/demo/graph?center=release&radius=1",
    "/c/demo/graph?version=2",
    "/c/demo/frame?id=release",
    "/c/demo/frame?id=release&version=1",
    "/c/demo/history?id=release",
    "/c/demo/diff?id=release&a=1&b=2",
    "/c/demo/event?ref=@e4",
    "/c/demo/transactions",
    "/c/demo/transactions?before=3",
    "/c/demo/traces",
    "/c/demo/search?q=regression",
    "/c/demo/governance",
    "/c/demo/governance?verify=1",
    "/c/demo/rejections",
]


def test_every_page_and_its_json_twin(story: tuple[TestClient, Path]) -> None:
    client, _ = story
    home = client.get("/inspect/")
    assert home.status_code == 200 and "demo" in home.text
    assert client.get("/inspect/api/").json()["contexts"][0]["name"] == "demo"
    for path in PAGES:
        page = client.get("/inspect" + path)
        assert page.status_code == 200, (path, page.text[:300])
        assert page.headers["content-security-policy"] == CSP
        assert page.headers["content-type"].startswith("text/html")
        twin = client.get("/inspect/api" + path)
        assert twin.status_code == 200 and twin.headers["content-type"] == "application/json"
    graph = client.get("/inspect/api/c/demo/graph?version=2").json()
    assert {n["id"] for n in graph["nodes"]} == {"release", "test-result"}
    assert graph["edges"] == [["test-result", "supports", "release"]]
    frame = client.get("/inspect/api/c/demo/frame?id=release").json()
    assert frame["frame"]["body"] == "(goal ship-v1) (stage packaging)"
    assert frame["sources"][0]["text"].startswith("Ship v1")
    governance = client.get("/inspect/api/c/demo/governance").json()
    assert [i["frame"] for i in governance["quarantine"]] == ["stale-note"]
    assert [i["frame"] for i in governance["pending"]] == ["rumour"]
    assert client.get("/inspect/api/c/demo/transactions").json()["transactions"][0]["kind"] == (
        "governance"
    )
    # a rejection is shown by its code, with the frame it collided on and never its text
    rejected = client.get("/inspect/api/c/demo/rejections").json()
    assert rejected["codes"] == {"conflict": 1}
    (row,) = rejected["rejections"]
    assert row["frames"] == ["release"] and row["agent"] == "embedded"
    assert HOSTILE[:8] not in client.get("/inspect/c/demo/rejections").text
    assert 'data-code="conflict"' in client.get("/inspect/c/demo/rejections").text
    # the audit chain is checked on demand, under this machine's audit key
    chain = client.get("/inspect/api/c/demo/governance?verify=1").json()["chain"]
    assert chain["ok"] and chain["checked"] >= 2, chain
    assert client.get("/inspect/api/c/demo/governance").json()["chain"] is None
    assert "Intact:" in client.get("/inspect/c/demo/governance?verify=1").text
    # the page shows what its twin answers
    page = client.get("/inspect/c/demo/transactions").text
    for t in client.get("/inspect/api/c/demo/transactions").json()["transactions"]:
        assert f'data-version="{t["version"]}"' in page


def test_hostile_text_is_escaped_everywhere(story: tuple[TestClient, Path]) -> None:
    client, _ = story
    for path in (
        "/c/demo/frame?id=hostile",
        "/c/demo/event?ref=@e4",
        "/c/demo/search?q=pwned",
        "/c/demo/graph?center=hostile",
        "/c/demo/history?id=hostile",
    ):
        html = client.get("/inspect" + path).text
        assert "<script>window" not in html and "<img" not in html, path
    assert (
        "&lt;script&gt;window.__pwned=1&lt;/script&gt;"
        in client.get("/inspect/c/demo/frame?id=hostile").text
    )
    # the graph's data rides in a JSON script element with <, > and & escaped
    graph = client.get("/inspect/c/demo/graph?center=hostile").text
    data = re.search(r'<script type="application/json" id="graph-data">(.*?)</script>', graph, re.S)
    assert data is not None and "<" not in data.group(1)
    assert HOSTILE[:8] not in graph


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [
        ("/c/nope/graph", 404, "not_found"),
        ("/c/demo/frame?id=ghost", 404, "not_found"),
        ("/c/demo/frame", 422, "bad_argument"),
        ("/c/demo/graph?version=999", 422, "future_version"),
        ("/c/demo/graph?version=-2", 422, "out_of_range"),
        ("/c/demo/graph?version=1e9", 422, "bad_argument"),
        ("/c/demo/graph?radius=50", 422, "out_of_range"),
        ("/c/demo/diff?id=release&a=0&b=1", 404, "not_found"),
        ("/c/demo/event?ref=@e999", 404, "not_found"),
        ("/c/demo/nothing", 404, "not_found"),
        ("/c/..%2F..%2Fetc/graph", 404, "not_found"),
        ("/c/a%3Cb%3E/graph", 422, "bad_context_name"),
        ("/c/demo/search?q=" + "x" * 1001, 422, "bad_argument"),
    ],
)
def test_bad_input_gets_a_clear_page_and_changes_nothing(
    story: tuple[TestClient, Path], path: str, status: int, code: str
) -> None:
    client, store = story
    before = _version(store)
    page = client.get("/inspect" + path)
    assert page.status_code == status, page.text[:300]
    assert f"<code>{code}</code>" in page.text and "Nothing was changed" in page.text
    twin = client.get("/inspect/api" + path)
    assert twin.status_code == status and twin.json()["error"]["code"] == code
    assert _version(store) == before


def test_only_reads_are_routed(story: tuple[TestClient, Path]) -> None:
    client, store = story
    before = _version(store)
    for path in ("/inspect/c/demo/graph", "/inspect/api/c/demo/transactions"):
        assert client.post(path, json={}).status_code == 405
        assert client.delete(path).status_code == 405
    assert _version(store) == before


def test_inspect_refuses_a_non_loopback_address_without_insecure(tmp_path: Path) -> None:
    from morphz.cli.main import cli

    result = CliRunner().invoke(
        cli, ["--json", "--store", str(tmp_path), "inspect", "--host", "10.1.2.3"]
    )
    assert result.exit_code == 1
    assert '"code": "insecure_bind"' in result.output
    assert list(tmp_path.iterdir()) == []
