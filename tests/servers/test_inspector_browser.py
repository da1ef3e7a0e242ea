"""The web inspector in a real browser: headless Chromium driven by Playwright.

One browser for the module, against ``morphz inspect``'s app served by uvicorn on
loopback over a store the module fills (tests/servers/inspector_story.py). Every
request the pages make is recorded; anything not on loopback is refused and fails
the test. With ``MORPHZ_INSPECTOR_SCREENSHOTS=DIR`` each page is also saved as a PNG
(docs/inspector.md's pictures are made so).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

import morphz
from morphz.cli.inspect import inspect_app
from tests.servers.inspector_story import HOSTILE, fill

pytestmark = pytest.mark.subprocess  # the browser is a child process

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
LOOPBACK = {"127.0.0.1", "localhost", "[::1]", "::1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    import uvicorn

    store = tmp_path_factory.mktemp("inspect") / "store"
    versions = fill(store)
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(inspect_app(str(store)), host="127.0.0.1", port=port, log_level="error")  # type: ignore[arg-type]
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "the inspector did not start"
        time.sleep(0.05)
    yield {"url": f"http://127.0.0.1:{port}/inspect", "store": store, "versions": versions}
    server.should_exit = True
    thread.join(10)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    outside: list[str] = []
    requested: list[str] = []

    def guard(route: Any) -> None:
        url = route.request.url
        requested.append(url)
        parts = urlsplit(url)
        if parts.scheme in ("data", "blob") or parts.hostname in LOOPBACK:
            route.continue_()
        else:
            outside.append(url)
            route.abort()

    context.route("**/*", guard)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.requested = requested
    yield pg
    context.close()
    assert outside == [], f"pages asked for something off loopback: {outside}"
    assert errors == [], f"scripts failed: {errors}"


def _shot(page: Any, name: str) -> None:
    where = os.environ.get("MORPHZ_INSPECTOR_SCREENSHOTS")
    if where:
        Path(where).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(where) / f"inspector-{name}.png"), full_page=False)


def _wait(page: Any, expression: str, timeout: float = 10.0) -> None:
    """Poll *expression* until it is truthy (the pages' CSP forbids the eval that
    Playwright's wait_for_function uses)."""
    deadline = time.monotonic() + timeout
    while not page.evaluate(expression):
        assert time.monotonic() < deadline, f"timed out waiting for {expression}"
        time.sleep(0.05)


def _graph_ids(page: Any) -> tuple[set[str], set[tuple[str, str, str]]]:
    nodes = page.evaluate("window.morphzGraph.nodes().map(n => n.id())")
    edges = page.evaluate(
        "window.morphzGraph.edges().map(e => [e.source().id(), e.data('label'), e.target().id()])"
    )
    return set(nodes), {tuple(e) for e in edges}


def test_every_page_loads_from_loopback_only(site: dict[str, Any], page: Any) -> None:
    base = site["url"]
    pages = {
        "contexts": ("/", "Contexts"),
        "graph": ("/c/demo/graph", None),
        "frame": ("/c/demo/frame?id=release", "Frame release"),
        "history": ("/c/demo/history?id=release", "History of release"),
        "diff": ("/c/demo/diff?id=release&a=1&b=2", "Diff of release"),
        "event": ("/c/demo/event?ref=@e1", "Observation @e1"),
        "transactions": ("/c/demo/transactions", "Transactions"),
        "traces": ("/c/demo/traces", "Usage traces"),
        "search": ("/c/demo/search?q=regression+tests", "Search"),
        "governance": ("/c/demo/governance", "Governance"),
        "rejections": ("/c/demo/rejections", "Rejections"),
    }
    for name, (path, heading) in pages.items():
        response = page.goto(base + path)
        assert response is not None and response.status == 200, (name, response)
        if heading is not None:
            assert page.inner_text("h1").startswith(heading), name
        if name == "graph":
            _wait(page, "window.morphzGraph && window.morphzGraph.nodes().length > 0")
        _shot(page, name)
    # Every twin answers the page's data as JSON.
    for name, (path, _) in pages.items():
        twin = path.replace("/c/", "/api/c/", 1) if name != "contexts" else "/api/"
        response = page.request.get(base + twin)
        assert response.status == 200 and isinstance(response.json(), dict), name
    assert all(urlsplit(u).hostname == "127.0.0.1" for u in page.requested)
    assert any(u.endswith("/static/cytoscape.min.js") for u in page.requested)
    # what the pages showed
    page.goto(base + "/c/demo/search?q=regression")
    assert page.locator("#hits mark").count() >= 1
    page.goto(base + "/c/demo/governance")
    assert "rumour" in page.inner_text("#pending")
    assert "stale-note" in page.inner_text("#quarantine")
    assert "quarantine" in page.inner_text("#audit")
    page.click("#chain a")  # verifying the audit chain is asked for, not done on every load
    assert page.inner_text("#chain").startswith("Intact")
    page.goto(base + "/c/demo/rejections")
    assert "conflict" in page.inner_text("#codes")
    assert "release" in page.inner_text("#rejections")
    page.goto(base + "/c/demo/traces")
    assert "test-result" in page.inner_text("section.trace")


def test_click_a_frame_then_its_history_then_a_diff(site: dict[str, Any], page: Any) -> None:
    page.goto(site["url"] + "/c/demo/graph")
    _wait(page, "window.morphzGraph && window.morphzGraph.$id('release').length")
    box = page.locator("#cy").bounding_box()
    pos = page.evaluate("window.morphzGraph.$id('release').renderedPosition()")
    page.mouse.click(box["x"] + pos["x"], box["y"] + pos["y"])
    page.wait_for_selector("#panel h2")
    assert page.inner_text("#panel h2") == "release"
    assert "(stage packaging)" in page.inner_text("#panel pre.body")
    assert "Ship v1" in page.inner_text("#panel")  # the source observation, readable
    assert "test-result" in page.inner_text("#panel")  # a relation in
    _shot(page, "graph-panel")
    page.click("#panel >> text=history")
    page.wait_for_selector("#revisions")
    rows = page.locator("#revisions tbody tr")
    assert rows.count() == 2
    assert "tests passed" in page.inner_text("#revisions")  # the transaction's reason
    page.click("#diffbutton")
    page.wait_for_selector("#diff")
    assert page.inner_text("#diff del").strip() == "-(stage awaiting-tests)"
    assert page.inner_text("#diff ins").strip() == "+(stage packaging)"


def test_the_version_slider_redraws_the_graph_as_of_that_version(
    site: dict[str, Any], page: Any
) -> None:
    v = site["versions"]
    page.goto(site["url"] + "/c/demo/graph")
    _wait(page, "window.morphzGraph && window.morphzGraph.nodes().length > 0")
    now_nodes, now_edges = _graph_ids(page)
    assert {"release", "deployment/target-v2", "hostile"} <= now_nodes

    def slide(to: int) -> tuple[set[str], set[tuple[str, str, str]]]:
        page.evaluate(
            "v => { const s = document.getElementById('version'); s.value = v;"
            " s.dispatchEvent(new Event('input')); s.dispatchEvent(new Event('change')); }",
            to,
        )
        _wait(page, f"document.body.dataset.asOf === '{to}'")
        return _graph_ids(page)

    nodes, edges = slide(v["derive"])
    assert nodes == {"release", "test-result"} and edges == set()
    nodes, edges = slide(v["revise"])
    assert edges == {("test-result", "supports", "release")}
    assert "version=2" in page.url
    nodes, edges = slide(v["version"])
    assert nodes == now_nodes and edges == now_edges


def test_a_commit_appears_on_the_transactions_page(site: dict[str, Any], page: Any) -> None:
    page.goto(site["url"] + "/c/demo/transactions")
    before = page.locator("#txs tbody tr").count()
    # Another process writes (the inspector holds the store open read-only).
    script = (
        "import sys, morphz\n"
        "with morphz.open_context(sys.argv[1], 'demo') as ctx:\n"
        "    r = ctx.submit(f'(context-tx (base-version {ctx.version()}) (reason \"live\")'\n"
        "                  ' (derive live-frame (note (arrived while watching))))')\n"
        "    assert r.committed\n"
        "    print(r.version)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(site["store"])],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    version = int(done.stdout.strip())
    row = page.locator(f"#txs tbody tr[data-version='{version}']")
    row.wait_for(timeout=10_000)
    assert "live-frame" in row.inner_text()
    assert page.locator("#txs tbody tr").count() == before + 1
    assert "main" in page.inner_text("#agents")


def test_a_hostile_body_is_shown_as_text_and_never_runs(site: dict[str, Any], page: Any) -> None:
    base = site["url"]
    page.goto(base + "/c/demo/frame?id=hostile")
    assert HOSTILE.replace('"', '\\"') in page.inner_text("#body")
    assert page.evaluate("window.__pwned") is None
    assert page.locator("main script, main img").count() == 0
    page.goto(base + "/c/demo/graph?center=hostile")
    _wait(page, "window.morphzGraph && window.morphzGraph.$id('hostile').length")
    box = page.locator("#cy").bounding_box()
    pos = page.evaluate("window.morphzGraph.$id('hostile').renderedPosition()")
    page.mouse.click(box["x"] + pos["x"], box["y"] + pos["y"])
    page.wait_for_selector("#panel pre.obs")
    assert "<script>" in page.inner_text("#panel")
    page.goto(base + "/c/demo/search?q=pwned")
    assert page.evaluate("window.__pwned") is None
    assert page.locator("#hits img, #hits script").count() == 0


def test_bad_input_gets_a_clear_page_and_changes_nothing(site: dict[str, Any], page: Any) -> None:
    base = site["url"]
    with morphz.open_context(site["store"], "demo", readonly=True) as ctx:
        version = ctx.version()
    cases = {
        "/c/nope/graph": (404, "no context 'nope'"),
        "/c/demo/frame?id=ghost": (404, "no frame 'ghost'"),
        f"/c/demo/graph?version={version + 5}": (422, "version must be between 0"),
        "/c/demo/graph?version=-3": (422, "version must be between 0"),
        "/c/demo/graph?center=ghost": (404, "no frame 'ghost'"),
        "/c/demo/diff?id=release&a=0&b=2": (404, "no frame 'release' at version 0"),
        "/c/demo/graph?limit=100000": (422, "limit must be between"),
        "/c/demo/frame?id=%3Cscript%3Ewindow.__pwned%3D3%3C%2Fscript%3E": (404, "no frame"),
    }
    for path, (status, text) in cases.items():
        response = page.goto(base + path)
        assert response is not None and response.status == status, path
        assert text in page.inner_text(".message"), path
        assert page.evaluate("window.__pwned") is None
    _shot(page, "error")
    with morphz.open_context(site["store"], "demo", readonly=True) as ctx:
        assert ctx.version() == version
