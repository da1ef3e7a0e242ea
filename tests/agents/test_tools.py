"""The memory tools (agents.tools): their specs, what their arguments mean, how a call is answered.

No Ray: the answers go through an embedded port, or a port that lacks recall and search.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agents.port import EmbeddedPort
from agents.tools import (
    MEMORY_TOOL_SPECS,
    MemoryAnswer,
    answer_memory_call,
    external_tool_specs,
    read_event_arguments,
    recall_arguments,
    transaction_text,
)
from protocol.errors import RequestError
from protocol.turns import MEMORY_TOOLS, ToolCall
from service.store import open_context


def test_external_tool_names_are_checked() -> None:
    with pytest.raises(RequestError) as err:
        external_tool_specs([{"name": "recall"}])
    assert err.value.code == "bad_tool"
    with pytest.raises(RequestError):
        external_tool_specs([{"name": "a"}, {"type": "function", "function": {"name": "a"}}])
    with pytest.raises(RequestError):
        external_tool_specs([{"description": "nameless"}])
    assert [t["function"]["name"] for t in MEMORY_TOOL_SPECS] == list(MEMORY_TOOLS)


def test_arguments_of_each_tool() -> None:
    assert transaction_text({"tx": "(context-tx)"}) == "(context-tx)"
    assert transaction_text({}) == ""
    assert transaction_text({"_raw": "(context-tx"}, "(context-tx") == "(context-tx"
    assert transaction_text({"tx": 3}, {"tx": 3}) == '{"tx": 3}'
    request = {"frame_id": "release", "depth": 2}
    assert recall_arguments({"request": request, "cursor": "c1"}) == (request, "c1")
    assert recall_arguments(request) == (request, None)  # the scripted models' bare shape
    assert read_event_arguments({"ref": "@e3"}) == ("@e3", 0, None)
    assert read_event_arguments({"ref": "@e3", "offset": "5", "length": 9}) == ("@e3", 5, 9)


def test_answers_are_recall_results_in_the_callers_session(tmp_path: Path) -> None:
    ctx = open_context(str(tmp_path), "ctx", create=True)
    e = ctx.observe("user_message", "hello there", session="s")
    port = EmbeddedPort(ctx)
    answer = answer_memory_call(port, ToolCall(name="read_event", arguments={"ref": e.ref}), "s")
    assert answer.frames is None
    doc = ctx.event(answer.ref)
    assert doc["kind"] == "recall_result" and doc["session"] == "s"
    assert "hello there" in ctx.read_event(answer.ref)["text"]
    missing = answer_memory_call(port, ToolCall(name="read_event", arguments={"ref": "@e99"}), "s")
    assert ctx.read_event(missing.ref)["text"].startswith("read_event: ")
    found = answer_memory_call(port, ToolCall(name="search", arguments={"query": "hello"}), "s")
    assert found.frames == () and ctx.event(found.ref)["kind"] == "recall_result"
    port.close()
    ctx.close()


class Bare:
    """A port with neither ``recall_observation`` nor ``search``."""

    def __init__(self) -> None:
        self.observed: list[tuple[str, str, str]] = []

    def observe(self, kind: str, text: str, *, session: str = "main") -> dict[str, Any]:
        self.observed.append((kind, text, session))
        return {"ref": f"@e{len(self.observed)}"}


def test_a_port_without_recall_or_search_says_so() -> None:
    port: Any = Bare()
    for n, name in enumerate(("recall", "search"), 1):
        assert answer_memory_call(port, ToolCall(name=name), "t") == MemoryAnswer(f"@e{n}")
    assert [text for _, text, _ in port.observed] == [
        "recall: not available through this context",
        "search: not available through this context",
    ]
    assert {(kind, session) for kind, _, session in port.observed} == {("recall_result", "t")}
