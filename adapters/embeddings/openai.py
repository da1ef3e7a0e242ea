"""An OpenAI-compatible ``/v1/embeddings`` client: OpenAI, vLLM, Ollama, text-embeddings-inference
and hosted gateways all speak it.

One request per batch of ``batch_size`` texts: ``{"model": ..., "input": [...]}`` (plus
``dimensions`` when the config names one). A failed attempt is retried — 408, 409, 429,
5xx, a timeout, a refused or dropped connection — up to ``max_retries`` times, waiting a
jittered exponential backoff (0.5 s doubling, capped at 8 s, each wait drawn in [½, 1] of
its step) or the server's ``Retry-After`` / ``retry-after-ms`` when that is longer; a
server asking for more than :data:`MAX_RETRY_AFTER` seconds is not waited for. A 413 splits
the batch in two (servers such as text-embeddings-inference cap the batch). 401/403 and
other 4xx are not retried.

Every reply is checked before any vector is returned: a JSON object whose ``data`` holds
exactly one item per input, each with a distinct ``index`` in range (items are put back in
``index`` order: servers may answer out of order) and a non-empty list of finite numbers,
all of one length. The first reply fixes the dimension unless the config does; a later
reply of another length raises ``embed_dimension`` (the model behind the URL changed).

The API key is read from the environment variable the config names, sent only as
``Authorization: Bearer ...``, and kept out of every message, repr, log line and exception
(foreign exceptions are not chained; error text from the server is scrubbed).
"""

from __future__ import annotations

import email.utils
import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal, NoReturn

import httpx

from adapters.embeddings.base import (
    UNKNOWN_MODEL_TOKENS,
    EmbedderConfig,
    check_texts,
    check_vector,
    known_max_tokens,
    normalized,
)
from storage.embeddings import EmbeddingError

log = logging.getLogger("morphz.embeddings")

BACKOFF_BASE = 0.5
BACKOFF_CAP = 8.0
MAX_RETRY_AFTER = 60.0
# A reply larger than this per input text (plus a fixed allowance) is refused unread:
# 3,072 float32 values as JSON take about 70 KB.
REPLY_BYTES_PER_TEXT = 256 * 1024
REPLY_BYTES_BASE = 1 << 20
_RETRY_STATUS = frozenset({408, 409, 429})
_MASK = "**********"


class _Retryable(Exception):
    """One failed attempt worth repeating."""

    def __init__(self, description: str, code: str, retry_after: float | None = None) -> None:
        super().__init__(description)
        self.description = description
        self.code = code
        self.retry_after = retry_after


class _TooLarge(Exception):
    """HTTP 413: the server wants smaller batches."""

    def __init__(self, description: str) -> None:
        super().__init__(description)
        self.description = description


def retry_after_seconds(headers: httpx.Headers, now: datetime | None = None) -> float | None:
    """The wait a server asks for: ``retry-after-ms`` (OpenAI), else ``Retry-After`` as
    seconds or an HTTP date; ``None`` when absent or unreadable."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            value = float(millis) / 1000.0
            if value >= 0.0 and value == value:
                return value
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        seconds = float(raw)
        return seconds if seconds >= 0.0 and seconds == seconds else None
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def _server_message(raw: bytes) -> str:
    """The ``error.message`` (or ``error``/``detail``) of an error reply, else its start."""
    try:
        body: Any = json.loads(raw[: 64 * 1024])
    except (ValueError, UnicodeDecodeError):
        return raw[:200].decode("utf-8", "replace").strip()
    if isinstance(body, dict):
        error = body.get("error", body.get("detail", body.get("message")))
        if isinstance(error, dict):
            error = error.get("message", error)
        return str(error)[:500]
    return str(body)[:200]


class OpenAIEmbedder:
    """An :class:`~adapters.embeddings.base.Embedder` over an OpenAI-compatible endpoint.

    *sleep* (the wait between attempts) and *rng* (the backoff jitter) are injectable so
    a test can record the waits instead of sitting through them. Thread-safe: one pooled
    HTTP client, the dimension fixed under a lock.
    """

    def __init__(
        self,
        config: EmbedderConfig,
        *,
        env: Mapping[str, str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        if config.provider != "openai":
            raise EmbeddingError(
                f"OpenAIEmbedder needs provider 'openai', not {config.provider!r}",
                code="embed_model",
            )
        self.config = config
        source = os.environ if env is None else env
        key = ""
        if config.api_key_env is not None:
            key = source.get(config.api_key_env, "")
            if not key:
                raise EmbeddingError(
                    f"the API key's environment variable {config.api_key_env} is not set",
                    code="embed_auth",
                )
        self._key = key
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self._client = httpx.Client(
            headers=headers, timeout=httpx.Timeout(config.timeout), follow_redirects=False
        )
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._dimension = config.dimensions
        self._lock = threading.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(model={self.config.model!r}, endpoint={self.config.endpoint!r})"

    @property
    def model_id(self) -> str:
        """``openai:<model>`` (``@<dimensions>`` appended when the config asks for a length,
        ``+input_type`` when requests name their side: the vectors differ)."""
        suffix = f"@{self.config.dimensions}" if self.config.dimensions else ""
        typed = "+input_type" if self.config.input_type else ""
        return f"openai:{self.config.model}{suffix}{typed}"

    @property
    def max_tokens(self) -> int:
        """The model's input window in tokens: the config's ``max_tokens``, else the
        window :data:`~adapters.embeddings.base.MODEL_TOKENS` knows for the model, else
        :data:`~adapters.embeddings.base.UNKNOWN_MODEL_TOKENS`."""
        return self.config.max_tokens or known_max_tokens(self.config.model) or UNKNOWN_MODEL_TOKENS

    @property
    def dimension(self) -> int:
        """The config's ``dimensions``, else the first reply's; if no call was made yet,
        one text is embedded to learn it."""
        if self._dimension is None:
            self.embed(["dimension probe"])
        assert self._dimension is not None  # fixed by the reply just checked
        return self._dimension

    def embed(
        self, texts: Sequence[str], *, kind: Literal["document", "query"] = "document"
    ) -> list[list[float]]:
        """One vector per text, in order (see the module docstring for batching, retries and
        checks). Empty strings are sent as one space (OpenAI refuses empty inputs)."""
        items = check_texts(texts, kind)
        if self._closed:
            raise EmbeddingError("the embedder is closed", code="embed_closed")
        if not items:
            return []
        inputs = [t if t else " " for t in items]
        size = self.config.batch_size
        vectors: list[list[float]] = []
        try:
            for start in range(0, len(inputs), size):
                vectors.extend(self._embed_batch(inputs[start : start + size], kind))
        except EmbeddingError as e:
            if self._key and self._key in e.message:
                raise EmbeddingError(self._scrub(e.message), code=e.code) from None
            raise
        return vectors

    def close(self) -> None:
        """Close the HTTP connections; later calls raise ``embed_closed``."""
        self._closed = True
        self._client.close()

    # -- one batch ------------------------------------------------------------

    def _embed_batch(self, batch: list[str], kind: str) -> list[list[float]]:
        try:
            reply = self._post(batch, kind)
        except _TooLarge as e:
            if len(batch) == 1:
                raise EmbeddingError(
                    f"the endpoint refused one text as too large: {e.description}",
                    code="embed_rejected",
                ) from None
            half = len(batch) // 2
            log.warning(
                "embeddings %s: %s; splitting a batch of %d", self.config.model, e, len(batch)
            )
            return self._embed_batch(batch[:half], kind) + self._embed_batch(batch[half:], kind)
        vectors = self._vectors(reply, len(batch))
        return [normalized(v) for v in vectors] if self.config.normalize else vectors

    def _body(self, batch: list[str], kind: str) -> bytes:
        body: dict[str, Any] = {"model": self.config.model, "input": batch}
        if self.config.dimensions is not None:
            body["dimensions"] = self.config.dimensions
        if self.config.input_type:
            body["input_type"] = kind
        return json.dumps(body, ensure_ascii=False).encode("utf-8")

    def _post(self, batch: list[str], kind: str) -> Any:
        data = self._body(batch, kind)
        attempts = self.config.max_retries + 1
        failure: _Retryable | None = None
        made = 0
        for attempt in range(attempts):
            if failure is not None:
                wait = self._delay(attempt, failure.retry_after)
                if wait is None:
                    break
                self._sleep(wait)
            made += 1
            try:
                return self._attempt(data, len(batch))
            except _Retryable as e:
                failure = e
                log.warning(
                    "embeddings %s: attempt %d/%d failed: %s",
                    self.config.model,
                    made,
                    attempts,
                    e.description,
                )
        assert failure is not None
        tries = f"{made} attempt{'s' if made > 1 else ''}"
        if failure.retry_after is not None and failure.retry_after > MAX_RETRY_AFTER:
            tries += f" (the server asked to wait {failure.retry_after:g} s)"
        raise EmbeddingError(
            f"embeddings endpoint {self.config.endpoint} failed after {tries}:"
            f" {failure.description}",
            code=failure.code,
        )

    def _delay(self, attempt: int, retry_after: float | None) -> float | None:
        """The wait before *attempt* (1-based retries); ``None``: do not retry."""
        if retry_after is not None and retry_after > MAX_RETRY_AFTER:
            return None
        step = min(BACKOFF_CAP, BACKOFF_BASE * 2.0 ** (attempt - 1))
        wait = step * (0.5 + 0.5 * self._rng.random())
        return max(wait, retry_after) if retry_after is not None else wait

    def _attempt(self, data: bytes, count: int) -> Any:
        limit = REPLY_BYTES_BASE + count * REPLY_BYTES_PER_TEXT
        try:
            with self._client.stream("POST", self.config.endpoint, content=data) as response:
                raw = bytearray()
                for chunk in response.iter_bytes():
                    raw += chunk
                    if len(raw) > limit:
                        raise EmbeddingError(
                            f"the reply is larger than {limit} bytes for {count} texts",
                            code="embed_bad_reply",
                        )
        except httpx.TimeoutException:
            raise _Retryable(
                f"timed out after {self.config.timeout:g} s", "embed_unreachable"
            ) from None
        except RuntimeError:  # httpx: the client was closed by another thread meanwhile
            if not self._closed:
                raise
            raise EmbeddingError("the embedder is closed", code="embed_closed") from None
        except httpx.TransportError as e:
            raise _Retryable(
                f"connection failed ({type(e).__name__}): {self._scrub(str(e))}",
                "embed_unreachable",
            ) from None
        status = response.status_code
        if status != 200:
            self._http_error(response, bytes(raw))
        try:
            return json.loads(bytes(raw))
        except (ValueError, UnicodeDecodeError):
            excerpt = bytes(raw[:80]).decode("utf-8", "replace")
            raise EmbeddingError(
                f"the reply is not JSON: {self._scrub(excerpt)!r}", code="embed_bad_reply"
            ) from None

    def _http_error(self, response: httpx.Response, raw: bytes) -> NoReturn:
        status = response.status_code
        message = self._scrub(_server_message(raw))
        description = f"HTTP {status}: {message}" if message else f"HTTP {status}"
        if status == 429:
            raise _Retryable(
                description, "embed_rate_limited", retry_after_seconds(response.headers)
            )
        if status in _RETRY_STATUS or status >= 500:
            raise _Retryable(
                description, "embed_unreachable", retry_after_seconds(response.headers)
            )
        if status == 413:
            raise _TooLarge(description)
        if status in (401, 403):
            raise EmbeddingError(
                f"the embeddings endpoint refused the credentials: {description}",
                code="embed_auth",
            )
        raise EmbeddingError(
            f"the embeddings endpoint refused the request: {description}", code="embed_rejected"
        )

    # -- the reply --------------------------------------------------------------

    def _vectors(self, reply: Any, count: int) -> list[list[float]]:
        if not isinstance(reply, dict):
            raise EmbeddingError(
                f"the reply is a JSON {type(reply).__name__}, not an object", code="embed_bad_reply"
            )
        data = reply.get("data")
        if not isinstance(data, list):
            raise EmbeddingError("the reply has no 'data' list", code="embed_bad_reply")
        if len(data) != count:
            raise EmbeddingError(
                f"the reply holds {len(data)} vectors for {count} texts", code="embed_bad_reply"
            )
        slots: list[list[float] | None] = [None] * count
        positional = all(isinstance(item, dict) and "index" not in item for item in data)
        for position, item in enumerate(data):
            if not isinstance(item, dict):
                raise EmbeddingError(f"data[{position}] is not an object", code="embed_bad_reply")
            index = position if positional else item.get("index")
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
                raise EmbeddingError(
                    f"data[{position}] has index {str(index)[:20]!r}, not one of 0..{count - 1}",
                    code="embed_bad_reply",
                )
            if slots[index] is not None:
                raise EmbeddingError(
                    f"data[{position}] repeats index {index}", code="embed_bad_reply"
                )
            slots[index] = check_vector(item.get("embedding"), f"data[{position}].embedding")
        vectors = [v for v in slots if v is not None]  # all filled: count items, distinct
        self._check_dimension(vectors)
        return vectors

    def _check_dimension(self, vectors: list[list[float]]) -> None:
        lengths = sorted({len(v) for v in vectors})
        if len(lengths) > 1:
            raise EmbeddingError(
                f"one reply mixes vectors of {lengths} dimensions", code="embed_dimension"
            )
        with self._lock:
            if self._dimension is None:
                self._dimension = lengths[0]
                return
            expected = self._dimension
        if lengths[0] != expected:
            origin = "the config's dimensions" if self.config.dimensions else "earlier replies"
            raise EmbeddingError(
                f"model {self.config.model} answered vectors of {lengths[0]} dimensions,"
                f" {expected} expected ({origin}): the model behind the endpoint changed;"
                " build a new embedder and rebuild the vectors",
                code="embed_dimension",
            )

    def _scrub(self, text: str) -> str:
        return text.replace(self._key, _MASK) if self._key else text
