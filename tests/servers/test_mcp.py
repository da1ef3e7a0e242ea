"""``morphz mcp`` driven by the MCP SDK's own client, over stdio and streamable HTTP.

The server runs as a child process (``python -m morphz.cli mcp``) on a real
LMDB store, served embedded (no Ray here; the shared-context tests through a
context actor are in ``test_mcp_ray.py``). The helpers below are used there too.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from service.operations import operations
from service.store import Store

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.subprocess

TOOLS = {"commit", "frame", "history", "observe", "read_event", "recall", "search", "state"} | {
    op.mcp.name or op.name for op in operations() if op.mcp is not None
}
"""The hand-written tools and the ones the registry exposes."""


def server_env(**extra: str) -> dict[str, str]:
    """This environment without a store or cluster named, plus *extra*."""
    env = {k: v for k, v in os.environ.items() if k not in ("MORPHZ_STORE", "RAY_ADDRESS")}
    env["RAY_AUTH_MODE"] = os.environ.get("RAY_AUTH_MODE", "disabled")
    env.update(extra)
    return env


def stdio_client(store: Path, *args: str, context: str = "default", **env: str) -> Client:
    """An SDK client that spawns ``python -m morphz.cli mcp`` on *store* over stdio."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "morphz.cli", "--store", str(store), "--context", context, "mcp", *args],
        env=server_env(**env),
        cwd=str(ROOT),
    )
    return Client(params, read_timeout_seconds=120)


def free_port() -> int:
    """A loopback port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def http_server(store: Path, *args: str, context: str = "default", **env: str) -> Iterator[str]:
    """Run ``morphz mcp --http`` on a free loopback port; yield its MCP URL, stop it after."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "morphz.cli", "--store", str(store), "--context", context, "mcp"]
        + ["--http", f"127.0.0.1:{port}", *args],
        env=server_env(**env),
        cwd=str(ROOT),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                err = proc.stderr.read().decode() if proc.stderr else ""
                raise AssertionError(f"morphz mcp --http exited {proc.returncode}: {err}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError("morphz mcp --http did not start listening") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()


def doc(result: Any) -> dict[str, Any]:
    """The JSON document of a tool result (its structured content, else its text)."""
    if result.structured_content is not None:
        return dict(result.structured_content)
    return dict(json.loads(result.content[0].text))


def text(result: Any) -> str:
    """The text of a tool result."""
    return str(result.content[0].text)


def tx(base: int, *ops: str, reason: str = "test") -> str:
    """A ``(context-tx …)`` text on *base* with *ops*."""
    return f'(context-tx (base-version {base}) (reason "{reason}") {" ".join(ops)})'


def version_of(store: Path, context: str = "default") -> tuple[int, int]:
    """The context's ``(version, number of events)``, read from the store beside the server."""
    with Store(str(store)).open(context, readonly=True) as ctx:
        st = ctx.state()
        return st.version, len(st.events)


async def exercise_every_tool(client: Client, store: Path) -> None:
    """Every tool, a rejected commit as a result, the prompt and both resources."""
    listed = await client.list_tools()
    assert {t.name for t in listed.tools} == TOOLS
    for t in listed.tools:
        assert t.description and len(t.description) > 40, t.name
        assert t.input_schema["type"] == "object"
    commit_tool = next(t for t in listed.tools if t.name == "commit")
    assert "context-tx" in str(commit_tool.description)
    assert "protocol" in str(commit_tool.description)
    assert commit_tool.input_schema["required"] == ["tx"]

    obs = doc(await client.call_tool("observe", {"text": "regression suite: 412 passed"}))
    ref = obs["ref"]
    assert obs["claim"]["claimed"] == [ref]
    st = doc(await client.call_tool("state", {}))
    assert st["counts"]["events"] == 1 and st["frames"] == []
    base = st["version"]

    made = doc(
        await client.call_tool(
            "commit", {"tx": tx(base, f"(derive test-result (from {ref}) (tests passed))")}
        )
    )
    assert made["status"] == "committed" and made["version"] == base + 1

    # A second writer on the old base: a tool RESULT carrying the receipt, not an error.
    stale = await client.call_tool(
        "commit", {"tx": tx(base, f"(derive test-result (from {ref}) (tests failed))")}
    )
    assert not stale.is_error
    rejected = doc(stale)
    assert rejected["status"] == "rejected"
    assert rejected["conflicts"] == [{"id": "test-result", "version": base + 1}]
    assert rejected["errors"][0]["code"] == "conflict"
    assert "resubmit" in rejected["hint"]
    retried = doc(
        await client.call_tool(
            "commit",
            {"tx": tx(base + 1, "(revise test-result (tests failed))"), "client_id": "c-1"},
        )
    )
    assert retried["status"] == "committed" and retried["client_id"] == "c-1"
    again = doc(
        await client.call_tool(
            "commit",
            {"tx": tx(base + 1, "(revise test-result (tests failed))"), "client_id": "c-1"},
        )
    )
    assert again["duplicate"] is True and again["version"] == retried["version"]

    frame = doc(await client.call_tool("frame", {"id": "test-result"}))
    assert frame["body"] == "(tests failed)" and frame["revision"] == 2
    hist = doc(await client.call_tool("history", {"id": "test-result"}))
    assert [w["op"] for w in hist["writes"]] == ["derive", "revise"]
    chunk = doc(await client.call_tool("read_event", {"ref": ref, "offset": 11, "length": 5}))
    assert chunk["text"] == "suite" and chunk["more"] is True
    rec = doc(await client.call_tool("recall", {"frame_id": "test-result", "depth": 1}))
    assert rec["recalled"] == ["test-result"] and "test-result" in rec["text"]
    found = doc(await client.call_tool("search", {"query": "regression"}))
    assert found["hits"] >= 1 and ref in found["text"]
    page = doc(await client.call_tool("state", {"limit": 1}))
    assert len(page["events"]) == 1 and page["next_offset"] == 1  # recall/search recorded

    prompt = await client.get_prompt("protocol")
    from service.protocol_text import PROTOCOL_TEXT

    assert prompt.messages[0].content.text == PROTOCOL_TEXT  # type: ignore[union-attr]
    templates = await client.list_resource_templates()
    assert {t.uri_template for t in templates.resource_templates} == {
        "morphz://{context}/frames/{+id}",
        "morphz://{context}/events/{ref}",
    }
    res = await client.read_resource("morphz://default/frames/test-result")
    assert json.loads(res.contents[0].text)["body"] == "(tests failed)"  # type: ignore[union-attr]
    res = await client.read_resource(f"morphz://default/events/{ref}")
    assert json.loads(res.contents[0].text)["text"].startswith("regression")  # type: ignore[union-attr]


HOSTILE: list[tuple[str, dict[str, Any], str]] = [
    ("observe", {"text": "x" * ((1 << 20) + 1)}, "at most"),
    ("observe", {"text": ["not", "text"]}, "valid string"),
    ("observe", {"text": "fine", "kind": "system"}, "user_message"),
    ("observe", {"text": "fine", "session": ""}, "at least 1"),
    ("commit", {"tx": "(context-tx (base-version " + "9" * 50 + "))"}, "base-version"),
    ("commit", {"tx": "x" * ((1 << 20) + 1)}, "at most"),
    ("commit", {"tx": 7}, "valid string"),
    ("commit", {"tx": '(context-tx (base-version 0) (reason "a")) (retire @e1)'}, "parse_error"),
    ("commit", {"tx": '") (retire @e1'}, "parse_error"),
    ("commit", {"tx": "(context-tx (base-version 0) (retire @e1))", "client_id": ""}, "least"),
    ("frame", {"id": '") (retire @e1'}, "not_found"),
    ("frame", {"id": 5}, "valid string"),
    ("frame", {}, "required"),
    ("history", {"id": "x" * 5000}, "at most"),
    ("read_event", {"ref": '@e1") (retire @e1'}, "bad"),
    ("read_event", {"ref": "@e1", "offset": -1}, "greater than or equal"),
    ("read_event", {"ref": "@e1", "length": "all"}, "valid integer"),
    ("recall", {"frame_id": "f", "depth": 99}, "less than or equal"),
    ("recall", {"frame_id": "f", "direction": "sideways"}, "ancestors"),
    ("search", {"query": ""}, "at least 1"),
    ("search", {"query": "q", "limit": 10_000}, "less than or equal"),
    ("state", {"limit": 0}, "greater than or equal"),
]
"""``(tool, arguments, a word of the error)``: each a clear tool error, nothing written."""


async def check_hostile(client: Client, store: Path) -> None:
    """Each hostile call is a tool error result that names the problem; nothing is written."""
    await client.call_tool("observe", {"text": "keep me"})
    before = version_of(store)
    for name, args, word in HOSTILE:
        result = await client.call_tool(name, args)
        assert result.is_error, (name, args)
        message = text(result)
        assert word.lower() in message.lower(), (name, message[:300])
        assert version_of(store) == before, (name, args)
    st = doc(await client.call_tool("state", {}))
    assert [e["lifecycle"] for e in st["events"]] == ["active"]


def test_stdio_every_tool_prompt_and_resources(tmp_path: Path) -> None:
    async def main() -> None:
        async with stdio_client(tmp_path, "--create") as client:
            await exercise_every_tool(client, tmp_path)

    anyio.run(main)


def test_stdio_field_edits_through_commit(tmp_path: Path) -> None:
    async def main() -> None:
        async with stdio_client(tmp_path, "--create") as client:
            listed = await client.list_tools()
            commit_tool = next(t for t in listed.tools if t.name == "commit")
            assert "(set|append|remove ID (FIELD VALUE...))" in str(commit_tool.description)
            prompt = await client.get_prompt("protocol")
            assert "(append ID (items" in prompt.messages[0].content.text  # type: ignore[union-attr]
            made = doc(await client.call_tool("commit", {"tx": tx(0, "(derive plan (items))")}))
            base = made["version"]
            for item in ("a", "b"):  # two writers on one stale base: both land
                got = doc(
                    await client.call_tool(
                        "commit", {"tx": tx(base, f"(append plan (items {item}))")}
                    )
                )
                assert got["status"] == "committed", got
            assert got["edits"] == [
                {"op": 0, "id": "plan", "field": "items", "revision": 3, "outcome": "merged"}
            ]
            lost = doc(await client.call_tool("commit", {"tx": tx(base, "(set plan (items c))")}))
            assert lost["status"] == "rejected"
            assert lost["conflicts"] == [{"id": "plan", "version": base + 2, "field": "items"}]
            frame = doc(await client.call_tool("frame", {"id": "plan"}))
            assert frame["body"] == "(items a b)" and frame["revision"] == 3
            bad = doc(
                await client.call_tool("commit", {"tx": tx(base + 2, "(incr plan (items 1))")})
            )
            assert bad["status"] == "rejected" and bad["errors"][0]["code"] == "not_a_number"

    anyio.run(main)


def test_stdio_hostile_arguments_write_nothing(tmp_path: Path) -> None:
    async def main() -> None:
        async with stdio_client(tmp_path, "--create") as client:
            await check_hostile(client, tmp_path)

    anyio.run(main)


def test_http_every_tool_and_hostile_arguments(tmp_path: Path) -> None:
    async def main(url: str) -> None:
        async with Client(url, read_timeout_seconds=120) as client:
            await exercise_every_tool(client, tmp_path)
        async with Client(url, read_timeout_seconds=120) as client:  # a second session
            st = doc(await client.call_tool("state", {}))
            assert st["counts"]["frames"] == 1
            await client.call_tool("observe", {"text": "keep me"})
            before = version_of(tmp_path)
            for name, args, _ in HOSTILE[:3] + HOSTILE[7:9]:
                assert (await client.call_tool(name, args)).is_error
            assert version_of(tmp_path) == before

    with http_server(tmp_path, "--create") as url:
        anyio.run(main, url)


def test_a_missing_context_is_not_created_without_create(tmp_path: Path) -> None:
    p = subprocess.run(
        [sys.executable, "-m", "morphz.cli", "--store", str(tmp_path), "mcp"],
        env=server_env(),
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert p.returncode == 1 and "not_found" in p.stderr
    assert p.stdout == ""
    assert not Store(str(tmp_path)).exists("default")
