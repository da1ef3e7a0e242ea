"""A stdio MCP server that cannot open its memory tells its host why before it exits.

A host that spawns ``morphz mcp`` and sees it exit reports only "connection
closed". :func:`refuse_stdio_session` answers the host's first requests
(discovery, then ``initialize``) with a JSON-RPC error carrying the reason, in the
one error shape, so the host shows it (``docs/mcp.md``).
"""

from __future__ import annotations

import json
import sys

from protocol.errors import MorphzError

__all__ = ["MAX_REFUSALS", "REFUSAL_WAIT", "refuse_stdio_session"]


MAX_REQUEST_LINE = 1 << 20
"""The longest request line :func:`refuse_stdio_session` reads."""
REFUSAL_WAIT = 10.0
"""Seconds :func:`refuse_stdio_session` keeps answering the host before it exits."""
MAX_REFUSALS = 8
"""Requests :func:`refuse_stdio_session` answers at most."""


def refuse_stdio_session(
    error: MorphzError, *, wait: float = REFUSAL_WAIT, most: int = MAX_REFUSALS
) -> int:
    """Tell a stdio host why this server cannot serve, before it exits.

    When the memory cannot be opened (an unreachable or refusing Ray cluster, a
    missing context, a locked store), a host that spawned the server would only see
    the connection close. This answers the host's requests (discovery, then its
    ``initialize``) with a JSON-RPC error whose message is the error's code and
    message, and whose ``data`` is the one error shape ``{"error": {"code",
    "message"}}``, so the host shows the reason. Bounded: at most *most* requests,
    one bounded line each, for at most *wait* seconds, until the host hangs up.
    Answers how many requests were answered.
    """
    import select
    import time

    doc = {
        "code": -32603,
        "message": f"morphz: {error.code}: {error.message}",
        "data": {"error": {"code": error.code, "message": error.message}},
    }
    answered = 0
    deadline = time.monotonic() + wait
    while answered < most:
        left = deadline - time.monotonic()
        try:
            ready, _, _ = select.select([sys.stdin], [], [], max(left, 0.0))
            line = sys.stdin.buffer.readline(MAX_REQUEST_LINE) if ready else b""
            request = json.loads(line) if line.strip() else None
        except (OSError, ValueError, RecursionError):
            return answered
        if not line:  # the host hung up, or the time is over
            return answered
        if isinstance(request, dict) and request.get("jsonrpc") == "2.0" and "id" in request:
            answer = {"jsonrpc": "2.0", "id": request["id"], "error": doc}
            sys.stdout.write(json.dumps(answer, ensure_ascii=False) + "\n")
            sys.stdout.flush()
            answered += 1
    return answered
