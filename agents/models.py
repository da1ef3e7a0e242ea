"""An OpenAI-compatible chat-completions client that answers compiled inputs (R38).

:class:`OpenAIChatModel` implements :class:`protocol.turns.Model` over any
endpoint that speaks ``POST {base_url}/chat/completions`` with function tools:
OpenAI, vLLM (``vllm serve … --served-model-name NAME``), Ollama (``/v1``),
llama.cpp's server and hosted gateways. It uses the standard library only
(``urllib.request`` and ``json``) and never imports Ray, so embedded agents
use it too.

One call sends ``compiled.messages`` and the tools: the four memory tools of
:data:`agents.tools.MEMORY_TOOL_SPECS` plus the external tools passed in (left out in
maintenance mode, R32). The answer becomes one :class:`~protocol.turns.ModelTurn`:

* ``context_tx`` calls → ``transactions`` (their ``tx`` argument, in order);
* ``recall``, ``search``, ``read_event`` calls → ``memory_calls``;
* the first other tool call → the ``action``; further external calls in the
  same answer are dropped (one action per turn, R10) and logged by name;
* plain content with no tool call other than ``context_tx`` → a
  :class:`~protocol.turns.Reply`.

Failures: 429, 5xx, timeouts and connection errors are retried with
exponential backoff; an input-overflow answer raises
:class:`~protocol.turns.InputOverflow` at once; anything else raises
:class:`~protocol.errors.RequestError` with code ``model_error``. The API key
is sent only in the ``Authorization`` header and never appears in a log line,
an error message or a ``repr``. See docs/models.md.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from agents.tools import MEMORY_TOOL_SPECS, external_tool_specs, transaction_text
from protocol.errors import RequestError
from protocol.turns import MEMORY_TOOLS, CompiledInput, InputOverflow, ModelTurn, Reply, ToolCall

log = logging.getLogger(__name__)

ENV_BASE_URL = ("MORPHZ_MODEL_BASE_URL", "OPENAI_BASE_URL")
ENV_MODEL = ("MORPHZ_MODEL",)
ENV_API_KEY = ("MORPHZ_MODEL_API_KEY", "OPENAI_API_KEY")
"""Environment variables read by :meth:`ModelConfig.from_env`, first set one wins."""

DEFAULT_BASE_URL = "https://api.openai.com/v1"
MAX_BACKOFF_S = 60.0
"""Longest single wait between attempts, ``Retry-After`` included."""
MAX_RESPONSE_BYTES = 32 << 20
"""Largest response body read from the endpoint."""

_RETRY_STATUS = frozenset({408, 429})
_OVERFLOW_STATUS = frozenset({400, 413, 422})
_OVERFLOW_CODES = frozenset(
    {"context_length_exceeded", "exceed_context_size_error", "string_above_max_length"}
)
# How OpenAI, vLLM, Ollama, llama.cpp and hosted gateways word an input that
# does not fit, matched case-insensitively against the error message. Server
# errors (5xx) need the narrower phrase: "upstream request took too long" is a
# gateway timeout, not an overflow.
_OVERFLOW_TEXT_5XX = re.compile(
    r"context[ _-](?:length|window|size)|maximum model length|max_model_len", re.I
)
_OVERFLOW_TEXT = re.compile(
    _OVERFLOW_TEXT_5XX.pattern
    + r"|(?:prompt|input|request|messages?|sequence|conversation)\b[^.\n]{0,40}?\btoo long"
    r"|too many (?:input |prompt )?tokens",
    re.I,
)


class ModelConfig(BaseModel):
    """Where and how to call an OpenAI-compatible endpoint.

    ``base_url`` is the API root that ``/chat/completions`` is appended to
    (``http://localhost:8000/v1`` for vLLM, ``http://localhost:11434/v1`` for
    Ollama). ``api_key`` is a secret: it prints as ``**********``.
    ``context_delta`` is not used by the client; it is carried for the
    compiler (R37, off by default). ``max_output_tokens`` is sent as
    ``max_tokens``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str = Field(default=DEFAULT_BASE_URL, min_length=1)
    model: str = Field(min_length=1)
    api_key: SecretStr | None = None
    timeout_s: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=3, ge=0, le=20)
    backoff_s: float = Field(default=0.5, ge=0)
    temperature: float | None = Field(default=0.0, ge=0, le=2)
    context_delta: bool = False
    max_output_tokens: int | None = Field(default=None, ge=1)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> ModelConfig:
        """A config from *overrides* first, then the environment.

        ``base_url`` ← ``MORPHZ_MODEL_BASE_URL`` or ``OPENAI_BASE_URL`` (default
        OpenAI's); ``model`` ← ``MORPHZ_MODEL``; ``api_key`` ←
        ``MORPHZ_MODEL_API_KEY`` or ``OPENAI_API_KEY``. Empty variables count as
        unset. Raises :class:`RequestError` (code ``model_config``) when no model
        is named or a value is invalid.
        """
        source = os.environ if env is None else env
        values: dict[str, Any] = {}
        for field, names in (
            ("base_url", ENV_BASE_URL),
            ("model", ENV_MODEL),
            ("api_key", ENV_API_KEY),
        ):
            for name in names:
                if source.get(name):
                    values[field] = source[name]
                    break
        values.update({k: v for k, v in overrides.items() if v is not None})
        if not values.get("model"):
            raise RequestError(
                "no model named: pass model= or set MORPHZ_MODEL", code="model_config"
            )
        try:
            return cls(**values)
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(x) for x in err.get("loc", ())) or "config"
            raise RequestError(
                f"bad model config: {where}: {err.get('msg')}", code="model_config"
            ) from None

    @property
    def endpoint(self) -> str:
        """The chat-completions URL."""
        return self.base_url.rstrip("/") + "/chat/completions"


class _Retryable(Exception):
    """One failed attempt worth repeating: a 429/5xx status, a timeout, a lost connection."""

    def __init__(self, description: str, retry_after: float | None = None) -> None:
        super().__init__(description)
        self.description = description
        self.retry_after = retry_after


class OpenAIChatModel:
    """A :class:`protocol.turns.Model` over an OpenAI-compatible chat-completions endpoint.

    Deterministic given the endpoint's answers; thread-compatible (no state
    changes after construction). *sleep* is the wait between attempts
    (injectable so tests need not wait).
    """

    def __init__(
        self,
        config: ModelConfig | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        **options: Any,
    ) -> None:
        if config is None:
            config = ModelConfig.from_env(**options)
        elif options:
            config = ModelConfig.model_validate({**dict(config), **options})
        self.config = config
        self._sleep = sleep

    def __repr__(self) -> str:
        return f"OpenAIChatModel(model={self.config.model!r}, base_url={self.config.base_url!r})"

    @property
    def context_delta(self) -> bool:
        """Whether the compiler may use ContextDelta encoding for this model (R37)."""
        return self.config.context_delta

    def request_body(
        self, compiled: CompiledInput, tools: Sequence[Mapping[str, Any]] = ()
    ) -> dict[str, Any]:
        """The JSON body :meth:`respond` sends for *compiled* and the external *tools*.

        In maintenance mode (R32) only the memory tools are offered.
        """
        offered = list(MEMORY_TOOL_SPECS)
        if not compiled.capacity.maintenance:
            offered.extend(external_tool_specs(tools))
        body: dict[str, Any] = {
            "model": self.config.model,
            "messages": [dict(m) for m in compiled.messages],
            "tools": offered,
            "tool_choice": "auto",
        }
        if self.config.temperature is not None:
            body["temperature"] = self.config.temperature
        if self.config.max_output_tokens is not None:
            body["max_tokens"] = self.config.max_output_tokens
        return body

    def respond(self, compiled: CompiledInput, tools: tuple[dict[str, Any], ...]) -> ModelTurn:
        """Call the endpoint once (with retries) and turn its answer into a :class:`ModelTurn`.

        Raises :class:`InputOverflow` when the endpoint reports the input does
        not fit, and :class:`RequestError` (code ``model_error``) for any other
        failure, including retries exhausted.
        """
        body = self.request_body(compiled, tools)
        answer = self._post(body)
        return parse_answer(answer, maintenance=compiled.capacity.maintenance)

    # -- the one I/O seam -----------------------------------------------------

    def _headers(self) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": "morphz/0.1",
        }
        if self.config.api_key is not None and self.config.api_key.get_secret_value():
            headers["Authorization"] = "Bearer " + self.config.api_key.get_secret_value()
        return headers

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        attempts = self.config.max_retries + 1
        last = ""
        retry_after: float | None = None
        for attempt in range(attempts):
            if attempt:
                self._sleep(self._delay(attempt, retry_after))
            try:
                return self._attempt(data)
            except _Retryable as e:
                last = e.description
                retry_after = e.retry_after
                log.warning(
                    "model %s: attempt %d/%d failed: %s",
                    self.config.model,
                    attempt + 1,
                    attempts,
                    last,
                )
        raise RequestError(
            f"model endpoint failed after {attempts} attempts: {last}", code="model_error"
        )

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        delay = self.config.backoff_s * float(2 ** (attempt - 1))
        if retry_after is not None:
            delay = max(delay, retry_after)
        return min(delay, MAX_BACKOFF_S)

    def _attempt(self, data: bytes) -> dict[str, Any]:
        request = urllib.request.Request(
            self.config.endpoint, data=data, headers=self._headers(), method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=self.config.timeout_s) as response:
                raw = response.read(MAX_RESPONSE_BYTES + 1)
        except urllib.error.HTTPError as e:
            status = e.code
            try:
                payload = e.read(1 << 20)
            except (OSError, http.client.HTTPException):
                payload = b""
            finally:
                e.close()
            retry_after = _retry_after(e.headers.get("Retry-After") if e.headers else None)
            self._http_error(status, payload, retry_after)
        except urllib.error.URLError as e:
            if isinstance(e.reason, TimeoutError):
                raise _Retryable(f"timed out after {self.config.timeout_s} s") from None
            if isinstance(e.reason, (ConnectionError, OSError)):
                raise _Retryable(f"connection failed: {self._scrub(str(e.reason))}") from None
            raise RequestError(
                f"model endpoint unreachable: {self._scrub(str(e.reason))}", code="model_error"
            ) from None
        except TimeoutError:
            raise _Retryable(f"timed out after {self.config.timeout_s} s") from None
        except (ConnectionError, http.client.HTTPException) as e:
            raise _Retryable(f"connection lost: {type(e).__name__}") from None
        if len(raw) > MAX_RESPONSE_BYTES:
            raise RequestError(
                f"model response larger than {MAX_RESPONSE_BYTES} bytes", code="model_error"
            )
        try:
            answer = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise RequestError(
                "model response is not JSON: " + self._scrub(_excerpt(raw)), code="model_error"
            ) from None
        if not isinstance(answer, dict):
            raise RequestError("model response is not a JSON object", code="model_error")
        return answer

    def _http_error(self, status: int, payload: bytes, retry_after: float | None) -> NoReturn:
        code, message = _error_of(payload)
        message = self._scrub(message)
        if is_overflow(status, code, message):
            raise InputOverflow(f"model input too long (HTTP {status}): {message}")
        description = f"HTTP {status}: {message}" if message else f"HTTP {status}"
        if status in _RETRY_STATUS or status >= 500:
            raise _Retryable(description, retry_after)
        raise RequestError(f"model endpoint refused the request: {description}", code="model_error")

    def _scrub(self, text: str) -> str:
        key = self.config.api_key.get_secret_value() if self.config.api_key else ""
        return text.replace(key, "**********") if key else text


def is_overflow(status: int, code: str | None, message: str) -> bool:
    """True if an error answer means "the input does not fit" (→ :class:`InputOverflow`).

    HTTP 413; an error code such as ``context_length_exceeded``; or, on 400/413/422,
    a message about the context length or a prompt being too long (OpenAI,
    vLLM, Ollama, llama.cpp wording); on 5xx only the context-length wording.
    A 429 never is.
    """
    if status == 429:
        return False
    if status == 413 or (code is not None and code in _OVERFLOW_CODES):
        return True
    if status in _OVERFLOW_STATUS:
        return _OVERFLOW_TEXT.search(message) is not None
    return status >= 500 and _OVERFLOW_TEXT_5XX.search(message) is not None


def parse_answer(answer: Mapping[str, Any], *, maintenance: bool = False) -> ModelTurn:
    """The :class:`ModelTurn` of one chat-completions answer.

    See the module docstring for the mapping. In *maintenance* mode an external
    tool call is dropped (R32). Raises :class:`RequestError` (code
    ``model_error``) when the answer has no message.
    """
    choices = answer.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        raise RequestError("model answer has no choices", code="model_error")
    message = choices[0].get("message")
    if not isinstance(message, Mapping):
        raise RequestError("model answer has no message", code="model_error")
    calls = message.get("tool_calls") or []
    if not calls and isinstance(message.get("function_call"), Mapping):
        calls = [{"id": None, "function": message["function_call"]}]
    transactions: list[str] = []
    memory_calls: list[ToolCall] = []
    action: ToolCall | Reply | None = None
    dropped: list[str] = []
    for call in calls if isinstance(calls, list) else []:
        fn = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str) or not fn["name"]:
            continue
        name = fn["name"][:128]
        raw = fn.get("arguments")
        arguments = _arguments(raw)
        call_id = call.get("id") if isinstance(call.get("id"), str) else None
        if name == "context_tx":
            # Arguments that are not {"tx": text} are passed through as text, so the
            # runtime's parse error reaches the model as feedback instead of vanishing.
            transactions.append(transaction_text(arguments, "" if raw is None else raw))
        elif name in MEMORY_TOOLS:
            memory_calls.append(ToolCall(name=name, arguments=arguments, call_id=call_id))
        elif action is None and not maintenance:
            action = ToolCall(name=name, arguments=arguments, call_id=call_id)
        else:
            dropped.append(name)
    if dropped:
        log.info("model answer: dropped extra tool calls %s (one action per turn)", dropped)
    content = message.get("content")
    text = _content_text(content)
    if action is None and not memory_calls and not dropped and text.strip():
        action = Reply(text=text)
    done = isinstance(action, Reply) and not memory_calls
    return ModelTurn(
        action=action,
        transactions=tuple(transactions),
        memory_calls=tuple(memory_calls),
        finish="done" if done else "continue",
    )


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, Mapping):  # Ollama sometimes sends an object, not a JSON string
        return dict(raw)
    if isinstance(raw, str):
        if not raw.strip():
            return {}
        try:
            value = json.loads(raw)
        except ValueError:
            return {"_raw": raw}
        return dict(value) if isinstance(value, dict) else {"_raw": raw}
    return {}


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: [{"type": "text", "text": …}, …]
        return "".join(
            part.get("text", "")
            for part in content
            if isinstance(part, Mapping) and isinstance(part.get("text"), str)
        )
    return ""


def _error_of(payload: bytes) -> tuple[str | None, str]:
    """The error code and message of an error body, in OpenAI's or a plain shape."""
    try:
        value = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return None, _excerpt(payload)
    if isinstance(value, Mapping):
        err = value.get("error", value)
        if isinstance(err, Mapping):
            code = err.get("code") or err.get("type")
            message = err.get("message") or err.get("detail") or ""
            return (str(code) if code is not None else None), str(message)[:2000]
        if isinstance(err, str):
            return None, err[:2000]
    return None, _excerpt(payload)


def _excerpt(payload: bytes) -> str:
    return payload[:500].decode("utf-8", "replace")


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


__all__ = [
    "ModelConfig",
    "OpenAIChatModel",
    "is_overflow",
    "parse_answer",
]
