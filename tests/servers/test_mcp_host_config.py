"""The MCP host configurations the README and ``docs/mcp.md`` show work when a host spawns
them: the command is named by absolute path (a host does not run the user's shell, so
``.venv/bin`` is not on its ``PATH``), or as ``python -m morphz``.

Each JSON block is taken from the page as written, its placeholder paths replaced by this
checkout and a temporary store, and spawned by the MCP SDK's stdio client with a ``PATH``
that does not hold the virtual environment.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.servers.test_mcp import ROOT, doc, server_env

pytestmark = pytest.mark.subprocess

CHECKOUT = "/path/to/checkout"
STORE = "/path/to/.morphz"


def host_configs(page: str) -> list[dict[str, Any]]:
    """Every ``mcpServers`` entry of the JSON blocks of *page*."""
    text = (ROOT / page).read_text(encoding="utf-8")
    entries = []
    for block in re.findall(r"```json\n(.*?)```", text, flags=re.S):
        data = json.loads(block)
        if "mcpServers" in data:
            entries.extend(data["mcpServers"].values())
    assert entries, f"{page} shows no MCP host configuration"
    return entries


def spawned(entry: dict[str, Any], store: Path) -> StdioServerParameters:
    """*entry* as a host spawns it: placeholders filled, ``PATH`` without the venv."""

    def fill(s: str) -> str:
        return s.replace(STORE, str(store)).replace(CHECKOUT, str(ROOT))

    command = fill(entry["command"])
    if command == str(ROOT / ".venv/bin/python"):
        command = sys.executable  # this test's interpreter is the checkout's (or CI's) venv
    elif command == str(ROOT / ".venv/bin/morphz"):
        command = str(Path(sys.executable).with_name("morphz"))
    env = server_env(PATH="/usr/bin:/bin", **{k: fill(v) for k, v in entry.get("env", {}).items()})
    return StdioServerParameters(command=command, args=[fill(a) for a in entry["args"]], env=env)


async def first_state(params: StdioServerParameters) -> dict[str, Any]:
    async with Client(params, read_timeout_seconds=120) as client:
        return doc(await client.call_tool("state", {}))


@pytest.mark.parametrize("page", ["README.md", "docs/mcp.md"])
def test_the_documented_stdio_config_starts_when_a_host_spawns_it(
    page: str, tmp_path: Path
) -> None:
    embedded = [e for e in host_configs(page) if "RAY_ADDRESS" not in e.get("env", {})]
    assert embedded
    for entry in embedded:
        assert Path(entry["command"]).is_absolute(), f"{page}: {entry['command']!r} needs PATH"
        if "--create" not in entry["args"]:
            continue
        state = anyio.run(first_state, spawned(entry, tmp_path / "store"))
        assert state["context"] == "default" and state["version"] == 0


def test_python_dash_m_morphz_serves_mcp(tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "morphz", "--store", str(tmp_path / "store"), "mcp", "--create"],
        env=server_env(PATH="/usr/bin:/bin"),
    )
    assert anyio.run(first_state, params)["version"] == 0


def test_a_server_that_cannot_join_its_cluster_tells_the_host_why(tmp_path: Path) -> None:
    entry = next(e for e in host_configs("docs/mcp.md") if "RAY_ADDRESS" in e.get("env", {}))
    entry = {**entry, "env": {**entry["env"], "RAY_ADDRESS": "127.0.0.1:1"}}  # nobody there
    entry["env"].pop("MORPHZ_CAPABILITY", None)

    async def main() -> str:
        try:
            await first_state(spawned(entry, tmp_path / "store"))
        except Exception as e:  # the SDK raises the server's answer inside task groups
            return repr(e)
        raise AssertionError("the server answered though it cannot reach its cluster")

    message = anyio.run(main)
    assert "ray_unreachable" in message and "127.0.0.1:1" in message
