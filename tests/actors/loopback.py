"""A local chat-completions endpoint for testing model clients without a network.

:class:`Loopback` runs ``http.server`` on ``127.0.0.1`` (ephemeral port) in a
thread. Each ``POST /v1/chat/completions`` is checked for the request shape an
OpenAI-compatible server expects (a model name, chat messages, function
tools); a malformed request gets a 400 and is recorded in ``problems``. Valid
requests are answered from a queue of scripted :class:`Answer` objects (a
status, a JSON body, optional headers and a delay before answering), so a test
can play "500 then 200", "429", "too slow" or "context_length_exceeded".
Every request received is kept in ``requests`` (path, headers, JSON body).
"""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ROLES = {"system", "user", "assistant", "tool", "developer"}


@dataclass
class Answer:
    """One scripted response."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass
class Received:
    """One request as the server saw it."""

    path: str
    headers: dict[str, str]
    body: Any


def completion(message: dict[str, Any], finish_reason: str = "stop") -> dict[str, Any]:
    """A chat-completions response body holding *message*."""
    return {
        "id": "chatcmpl-loopback",
        "object": "chat.completion",
        "created": 0,
        "model": "loopback",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def text_answer(text: str) -> Answer:
    """A plain assistant reply."""
    return Answer(body=completion({"role": "assistant", "content": text}))


def call(name: str, arguments: dict[str, Any] | str, call_id: str | None = None) -> dict[str, Any]:
    """One tool call entry; *arguments* is JSON-encoded unless given as text."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {
        "id": call_id or f"call_{name}",
        "type": "function",
        "function": {"name": name, "arguments": raw},
    }


def tools_answer(*calls: dict[str, Any], content: str | None = None) -> Answer:
    """An assistant message carrying tool calls (and optional content)."""
    message = {"role": "assistant", "content": content, "tool_calls": list(calls)}
    return Answer(body=completion(message, "tool_calls"))


def error_answer(
    status: int, message: str, code: str | None = None, *, headers: dict[str, str] | None = None
) -> Answer:
    """An OpenAI-style error body ``{"error": {"message", "type", "code"}}``."""
    error = {"message": message, "type": "invalid_request_error", "param": None, "code": code}
    return Answer(status=status, body={"error": error}, headers=dict(headers or {}))


def check_request(body: Any) -> list[str]:
    """What is wrong with a chat-completions request body (empty when it is well formed)."""
    problems: list[str] = []
    if not isinstance(body, dict):
        return ["the body is not a JSON object"]
    if not isinstance(body.get("model"), str) or not body["model"]:
        problems.append("model must be a non-empty string")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        problems.append("messages must be a non-empty list")
    else:
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or m.get("role") not in ROLES:
                problems.append(f"messages[{i}] needs a known role")
            elif not isinstance(m.get("content"), (str, list)) and not m.get("tool_calls"):
                problems.append(f"messages[{i}] needs content")
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            problems.append("tools must be a list")
        else:
            names = []
            for i, t in enumerate(tools):
                fn = t.get("function") if isinstance(t, dict) else None
                if t.get("type") != "function" or not isinstance(fn, dict):
                    problems.append(f"tools[{i}] must be a function tool")
                    continue
                if not isinstance(fn.get("name"), str):
                    problems.append(f"tools[{i}] needs a name")
                if not isinstance(fn.get("parameters"), dict):
                    problems.append(f"tools[{i}] needs parameters (a JSON schema)")
                names.append(fn.get("name"))
            if len(names) != len(set(names)):
                problems.append("tool names must be unique")
    return problems


class Loopback:
    """The server; use as a context manager. ``base_url`` ends in ``/v1``."""

    def __init__(self) -> None:
        self.answers: deque[Answer] = deque()
        self.requests: list[Received] = []
        self.problems: list[str] = []
        self._closing = threading.Event()
        self._lock = threading.Lock()
        loopback = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                try:
                    body: Any = json.loads(raw)
                except ValueError:
                    body = None
                loopback.record(Received(self.path, dict(self.headers.items()), body))
                problems = [] if self.path == "/v1/chat/completions" else ["unknown path"]
                problems += check_request(body)
                if self.headers.get("Content-Type") != "application/json":
                    problems.append("Content-Type must be application/json")
                if problems:
                    loopback.problems.extend(problems)
                    self.send(error_answer(400, "; ".join(problems), "invalid_request"))
                    return
                self.send(loopback.next_answer())

            def send(self, answer: Answer) -> None:
                if answer.delay_s and loopback._closing.wait(answer.delay_s):
                    return
                data = json.dumps(answer.body).encode("utf-8")
                try:
                    self.send_response(answer.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in answer.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def base_url(self) -> str:
        """The API root to configure a client with."""
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def script(self, *answers: Answer) -> None:
        """Queue answers, served in order."""
        with self._lock:
            self.answers.extend(answers)

    def record(self, received: Received) -> None:
        with self._lock:
            self.requests.append(received)

    def next_answer(self) -> Answer:
        with self._lock:
            if self.answers:
                return self.answers.popleft()
        return error_answer(500, "loopback: no scripted answer left", "loopback_exhausted")

    def __enter__(self) -> Loopback:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
