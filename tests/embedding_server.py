"""A local OpenAI-compatible embeddings endpoint, for tests that need vectors without a network.

:class:`EmbeddingServer` runs ``http.server`` on ``127.0.0.1`` (an ephemeral port) in a
thread and answers ``POST /v1/embeddings`` the way OpenAI, vLLM, Ollama and
text-embeddings-inference do::

    {"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [...]}],
     "model": "...", "usage": {"prompt_tokens": n, "total_tokens": n}}

The vectors are deterministic: :func:`embed_text` is a feature-hashing bag of words
(lower-cased words, CJK characters and CJK bigrams, a few English stop words dropped),
L2-normalized, so texts that share words are near and the same text always gets the same
vector. A request's ``dimensions`` field is honoured (up to the server's dimension).

Faults a test can switch on, each thread-safe:

- :meth:`~EmbeddingServer.fail_next` — the next *n* calls answer *status* (500, 429 ...),
  optionally with ``Retry-After``;
- :meth:`~EmbeddingServer.drop_next` — the next *n* calls close the connection unanswered;
- :meth:`~EmbeddingServer.corrupt_next` — the next *n* replies are broken in one way
  (:data:`CORRUPTIONS`: not JSON, a wrong count, a short vector, a string in a vector ...);
- :meth:`~EmbeddingServer.set_dimension` — the model's dimension from now on;
- :meth:`~EmbeddingServer.require_key` — answer 401 unless ``Authorization: Bearer KEY``
  (the message echoes the header it got, so a client's scrubbing is tested);
- :meth:`~EmbeddingServer.set_delay` — wait before every answer (for timeouts);
- :meth:`~EmbeddingServer.hold` / :meth:`~EmbeddingServer.release` — leave the requests
  with an input containing a given text unanswered until released (a worker kept behind
  for as long as a test needs, whatever the machine's load, while queries are answered);
- :meth:`~EmbeddingServer.shuffle` — return ``data`` in reverse order (``index`` fields
  still right), as servers are allowed to;
- :meth:`~EmbeddingServer.omit_index` — leave ``index`` out of every item;
- ``max_batch`` — refuse a request with more inputs (413, as text-embeddings-inference does);
- ``max_tokens`` — the model's window: every input is cut to its first *n* tokens (words
  and CJK characters, :func:`model_tokens`) before it is embedded, as a real model
  silently truncates (text-embeddings-inference's ``truncate``, sentence-transformers).

Every request is kept in :attr:`~EmbeddingServer.calls` (path, headers, JSON body, the
status answered). Use as a context manager, or through the ``embedding_server`` fixture.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

DEFAULT_DIMENSION = 64

# CJK scripts: Hiragana/Katakana, CJK extension A, unified ideographs, Hangul syllables.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
_TOKEN = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+")
_CJK_RUN = re.compile(rf"[{_CJK}]+")
STOP_WORDS = frozenset(
    "a an and are as at be by did do does for from has have i in is it of on or the this to"
    " was were what when where which who with".split()
)

CORRUPTIONS = (
    "not_json",  # the body is not JSON at all
    "html",  # a proxy's HTML error page with status 200
    "not_object",  # a JSON list instead of an object
    "no_data",  # an object without "data"
    "wrong_count",  # one vector fewer than inputs
    "short_vector",  # the last vector one element short
    "non_numeric",  # a string inside a vector
    "non_finite",  # NaN inside a vector (written as the bare token NaN)
    "bad_index",  # an index out of range
    "duplicate_index",  # two items with the same index
    "empty_vector",  # a vector with no elements
)


def features(text: str) -> list[str]:
    """The bag of words of *text*: lower-cased words (stop words dropped), each CJK
    character and each pair of adjacent CJK characters."""
    found: list[str] = []
    for token in _TOKEN.findall(text.lower()):
        if _CJK_RUN.fullmatch(token):
            found.extend(token)
            found.extend(token[i : i + 2] for i in range(len(token) - 1))
        elif token not in STOP_WORDS:
            found.append(token)
    return found


def model_tokens(text: str) -> list[str]:
    """The server model's tokens of *text*: its words and each CJK character."""
    out: list[str] = []
    for token in _TOKEN.findall(text):
        out.extend(token if _CJK_RUN.fullmatch(token) else [token])
    return out


def truncated(text: str, max_tokens: int | None) -> str:
    """*text* as a model with a window of *max_tokens* tokens reads it (None: whole)."""
    if max_tokens is None:
        return text
    cut = 0
    for i, m in enumerate(_TOKEN_OR_CHAR.finditer(text)):
        if i == max_tokens:
            break
        cut = m.end()
    return text[:cut]


_TOKEN_OR_CHAR = re.compile(rf"[{_CJK}]|[^\W_{_CJK}]+")


def _bucket(feature: str, dimension: int) -> tuple[int, float]:
    digest = int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest())
    return digest % dimension, 1.0 if digest >> 63 else -1.0


def embed_text(text: str, dimension: int = DEFAULT_DIMENSION) -> list[float]:
    """The deterministic, L2-normalized vector the server gives *text*.

    A text with no features (empty, only stop words) gets the unit vector of a fixed
    feature, so every vector has norm 1."""
    vector = [0.0] * dimension
    for feature in features(text) or ["<empty>"]:
        slot, sign = _bucket(feature, dimension)
        vector[slot] += sign
    norm = math.sqrt(sum(x * x for x in vector))
    if norm == 0.0:  # every feature cancelled out: fall back to the fixed one
        slot, sign = _bucket("<empty>", dimension)
        vector[slot] = sign
        norm = 1.0
    return [x / norm for x in vector]


@dataclass
class Call:
    """One request as the server saw it, and the status it answered."""

    path: str
    headers: dict[str, str]
    body: Any
    status: int = 0

    @property
    def texts(self) -> list[str]:
        """The ``input`` strings of the request (empty when it had none)."""
        value = self.body.get("input") if isinstance(self.body, dict) else None
        if isinstance(value, str):
            return [value]
        return [t for t in value if isinstance(t, str)] if isinstance(value, list) else []


@dataclass
class _Fault:
    kind: str  # "status", "drop" or a corruption
    status: int = 500
    headers: dict[str, str] = field(default_factory=dict)


def _error(message: str, kind: str = "invalid_request_error", code: str | None = None) -> Any:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


class EmbeddingServer:
    """The server. ``url`` is the API root (ends in ``/v1``); ``/embeddings`` is under it."""

    def __init__(
        self,
        dimension: int = DEFAULT_DIMENSION,
        *,
        max_batch: int | None = None,
        max_tokens: int | None = None,
    ) -> None:
        self.calls: list[Call] = []
        self.max_batch = max_batch
        self.max_tokens = max_tokens
        self._dimension = self._initial_dimension = dimension
        self._faults: deque[_Fault] = deque()
        self._key: str | None = None
        self._delay = 0.0
        self._shuffle = False
        self._omit_index = False
        self._closing = threading.Event()
        self._released = threading.Event()
        self._released.set()
        self._held = ""
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 30
            disable_nagle_algorithm = True  # headers and body go out as two writes

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length", "0") or 0)
                raw = self.rfile.read(length)
                try:
                    body: Any = json.loads(raw)
                except ValueError:
                    body = None
                call = Call(self.path, dict(self.headers.items()), body)
                server._record(call)
                status, payload, headers = server._answer(call, self.headers)
                call.status = status
                if server._delay and server._closing.wait(server._delay):
                    return
                while server._holds(body) and not server._released.wait(0.05):
                    if server._closing.is_set():
                        return
                if payload is None:  # drop the connection unanswered
                    self.close_connection = True
                    return
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    html = isinstance(payload, bytes) and payload.startswith(b"<")
                    self.send_header("Content-Type", "text/html" if html else "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

            def do_GET(self) -> None:  # noqa: N802
                data = json.dumps(_error(f"unknown path {self.path}")).encode()
                self.send_response(404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    # -- what a test reads ---------------------------------------------------

    @property
    def url(self) -> str:
        """The API root to configure a client with, e.g. ``http://127.0.0.1:40123/v1``."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    @property
    def dimension(self) -> int:
        """The model's current dimension."""
        return self._dimension

    @property
    def texts(self) -> list[str]:
        """Every input string received, in order of arrival."""
        with self._lock:
            return [t for c in self.calls for t in c.texts]

    def vector(self, text: str, dimension: int | None = None) -> list[float]:
        """The vector this server gives *text* (at its current dimension by default)."""
        return embed_text(text, dimension or self._dimension)

    # -- switches --------------------------------------------------------------

    def fail_next(self, n: int = 1, status: int = 500, *, retry_after: str | None = None) -> None:
        """Answer the next *n* calls with *status* (and a ``Retry-After`` header if given)."""
        headers = {"Retry-After": retry_after} if retry_after is not None else {}
        with self._lock:
            self._faults.extend(_Fault("status", status, headers) for _ in range(n))

    def drop_next(self, n: int = 1) -> None:
        """Close the connection of the next *n* calls without answering."""
        with self._lock:
            self._faults.extend(_Fault("drop") for _ in range(n))

    def corrupt_next(self, kind: str, n: int = 1) -> None:
        """Break the next *n* successful replies in the way *kind* names (:data:`CORRUPTIONS`)."""
        if kind not in CORRUPTIONS:
            raise ValueError(f"unknown corruption {kind!r}; one of {CORRUPTIONS}")
        with self._lock:
            self._faults.extend(_Fault(kind) for _ in range(n))

    def set_dimension(self, dimension: int) -> None:
        """The model's dimension from the next call on (a model swapped behind the URL)."""
        self._dimension = dimension

    def require_key(self, key: str | None) -> None:
        """Answer 401 unless the request carries ``Authorization: Bearer <key>``; None: off."""
        self._key = key

    def set_delay(self, seconds: float) -> None:
        """Wait *seconds* before every answer (the wait ends early when the server stops)."""
        self._delay = seconds

    def hold(self, containing: str) -> None:
        """Leave every request with an input containing *containing* waiting until
        :meth:`release` or the server stops (the others are answered)."""
        self._held = containing
        self._released.clear()

    def release(self) -> None:
        """Answer the requests :meth:`hold` kept waiting, and every later one."""
        self._released.set()

    def omit_index(self, on: bool = True) -> None:
        """Leave the ``index`` fields out of ``data`` (items stay in input order)."""
        self._omit_index = on

    def shuffle(self, on: bool = True) -> None:
        """Return ``data`` in reverse order, each item keeping its right ``index``."""
        self._shuffle = on

    def reset(self) -> None:
        """Every switch off, the call record emptied, the dimension back to the first one."""
        with self._lock:
            self._faults.clear()
            self.calls.clear()
        self._dimension, self._key, self._delay = self._initial_dimension, None, 0.0
        self._released.set()
        self._shuffle = self._omit_index = False

    # -- the server --------------------------------------------------------------

    def _holds(self, body: Any) -> bool:
        """Whether :meth:`hold` keeps this request's answer back."""
        if self._released.is_set() or not isinstance(body, dict):
            return False
        inputs = body.get("input")
        texts = [inputs] if isinstance(inputs, str) else inputs if isinstance(inputs, list) else []
        return any(isinstance(t, str) and self._held in t for t in texts)

    def _record(self, call: Call) -> None:
        with self._lock:
            self.calls.append(call)

    def _next_fault(self, transport: bool) -> _Fault | None:
        """Pop the next fault if it is of the kind due now: a status or a dropped connection
        (*transport*, before the request is served) or a corruption (after)."""
        with self._lock:
            if self._faults and (self._faults[0].kind in ("status", "drop")) == transport:
                return self._faults.popleft()
        return None

    def _answer(self, call: Call, headers: Any) -> tuple[int, Any, dict[str, str]]:
        fault = self._next_fault(transport=True)
        if fault is not None:
            if fault.kind == "drop":
                return 0, None, {}
            message = "rate limit reached" if fault.status == 429 else "the server had an error"
            return fault.status, _error(message, "server_error"), fault.headers
        if call.path != "/v1/embeddings":
            return 404, _error(f"unknown path {call.path}"), {}
        given = headers.get("Authorization")
        if self._key is not None and given != f"Bearer {self._key}":
            # Echoes what it was given, as some servers do: a client must scrub it.
            message = f"Incorrect API key provided: {given}"
            return 401, _error(message, "invalid_request_error", "invalid_api_key"), {}
        if headers.get("Content-Type") != "application/json":
            return 400, _error("Content-Type must be application/json"), {}
        problem = self._check(call.body)
        if problem:
            return 400, _error(problem), {}
        if self.max_batch is not None and len(call.texts) > self.max_batch:
            # text-embeddings-inference answers an oversized batch with 413.
            message = f"batch size {len(call.texts)} > maximum allowed batch size {self.max_batch}"
            return 413, _error(message, "validation"), {}
        body = call.body
        texts = [body["input"]] if isinstance(body["input"], str) else list(body["input"])
        dimension = body.get("dimensions") or self._dimension
        data = [
            {
                "object": "embedding",
                "index": i,
                "embedding": embed_text(truncated(t, self.max_tokens), dimension),
            }
            for i, t in enumerate(texts)
        ]
        if self._shuffle:
            data.reverse()
        if self._omit_index:
            for item in data:
                del item["index"]
        tokens = sum(len(features(t)) for t in texts)
        reply: Any = {
            "object": "list",
            "data": data,
            "model": body["model"],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        fault = self._next_fault(transport=False)
        if fault is not None:
            reply = self._corrupt(fault.kind, reply)
        return 200, reply, {}

    def _check(self, body: Any) -> str:
        if not isinstance(body, dict):
            return "the body is not a JSON object"
        known = {"input", "model", "dimensions", "encoding_format", "user", "input_type"}
        unknown = set(body) - known
        if unknown:
            return f"unknown fields {sorted(unknown)}"
        if not isinstance(body.get("model"), str) or not body["model"]:
            return "model must be a non-empty string"
        value = body.get("input")
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not items:
            return "input must be a string or a non-empty list of strings"
        if not all(isinstance(t, str) and t for t in items):
            return "'$.input' is invalid: every input must be a non-empty string"
        dims = body.get("dimensions")
        if dims is not None and (
            not isinstance(dims, int) or isinstance(dims, bool) or not 1 <= dims <= self._dimension
        ):
            return f"dimensions must be an integer in 1..{self._dimension}"
        if body.get("encoding_format", "float") != "float":
            return "only encoding_format float is served"
        if body.get("input_type", "query") not in ("query", "document"):
            return "input_type must be query or document"  # as asymmetric models' servers
        return ""

    @staticmethod
    def _corrupt(kind: str, reply: dict[str, Any]) -> Any:
        data = reply["data"]
        if kind == "not_json":
            return b"{this is not json"
        if kind == "html":
            return b"<html><body>502 Bad Gateway</body></html>"
        if kind == "not_object":
            return [reply]
        if kind == "no_data":
            return {k: v for k, v in reply.items() if k != "data"}
        if kind == "wrong_count":
            reply["data"] = data[:-1]
        elif kind == "short_vector":
            data[-1]["embedding"] = data[-1]["embedding"][:-1]
        elif kind == "non_numeric":
            data[0]["embedding"][0] = "0.5"
        elif kind == "non_finite":
            data[0]["embedding"][0] = float("nan")
        elif kind == "bad_index":
            data[0]["index"] = len(data) + 5
        elif kind == "duplicate_index":
            if len(data) > 1:
                data[1]["index"] = data[0]["index"]
            else:
                data.append(dict(data[0]))
        elif kind == "empty_vector":
            data[0]["embedding"] = []
        return reply

    def __enter__(self) -> EmbeddingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop serving and release the port (waits in progress end at once)."""
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


@pytest.fixture
def embedding_server() -> Iterator[EmbeddingServer]:
    """A fresh loopback embeddings server for one test (dimension 64, no faults)."""
    with EmbeddingServer() as server:
        yield server
