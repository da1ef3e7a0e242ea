"""A recall request: its fields, their bounds and filters, and how a model's is narrowed.

:class:`RecallRequest` validates everything a caller sends (R26): the start
frame, depth, direction, what to include, page limits and the optional
``valid_at`` and ``trust`` filters. Invalid input raises typed errors only
(:class:`~protocol.errors.OutOfRange` for a value out of its bounds,
:class:`~protocol.errors.RequestError` for the rest). :func:`for_model` narrows
a request to what may reach a model's input. :func:`valid_at_seconds` and
:func:`trust_filter` parse the two filters; search parses its filters with
them too.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from protocol.errors import OutOfRange, ParseError, RequestError
from protocol.ids import is_frame_id
from protocol.state import ACCEPTED, CANDIDATE, HIDDEN_TRUST, TRUST, Frame
from protocol.tx import valid_time
from protocol.wire import reject_json_constant, unique_keys

MAX_DEPTH = 4
"""Most hops a recall walks from its start frame."""
MAX_NODES = 128
"""Most nodes one page holds."""
DEFAULT_MAX_NODES = 32
MIN_BYTES = 1 << 10
"""Smallest page size budget: 1 KiB of JSON-rendered nodes."""
MAX_BYTES = 4 << 20
"""Largest page size budget: 4 MiB of JSON-rendered nodes."""
DEFAULT_MAX_BYTES = 256 << 10
MAX_REQUEST_CHARS = 64 << 10
"""Longest JSON text :meth:`RecallRequest.parse` reads."""
"""The label of an edge from a frame to one of its sources."""
MODEL_TRUST = (CANDIDATE, ACCEPTED)
"""The trust filter of model-facing recall when the request names none (in :data:`TRUST` order)."""

Direction = Literal["ancestors", "descendants", "both"]

_BOUNDS = {
    "depth": (0, MAX_DEPTH, "hops"),
    "max_nodes": (1, MAX_NODES, "nodes per page"),
    "max_bytes": (MIN_BYTES, MAX_BYTES, "bytes per page"),
}
_DIGEST_BYTES = 8


def _bad(message: str) -> RequestError:
    return RequestError(message, code="bad_request")


def valid_at_seconds(value: Any, *, code: str = "bad_time", name: str = "valid_at") -> float:
    """Epoch seconds of a valid-time filter: an ISO date/date-time (UTC unless it says) or a number.

    The same parsing as the envelope's ``valid-from``/``valid-to``
    (:func:`protocol.tx.valid_time`). A number that is not finite or beyond
    ±1e12 raises :class:`OutOfRange`; anything else that is not a time raises
    :class:`RequestError` with *code*. Messages start with *name* unless it is empty.
    """
    try:
        return valid_time(value)
    except ValueError as e:
        message = f"{name}: {e}" if name else str(e)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            raise OutOfRange(message) from None
        raise RequestError(message, code=code) from None


def trust_filter(value: Any, *, code: str = "bad_trust", name: str = "trust") -> tuple[str, ...]:
    """A trust filter as a tuple of distinct trust statuses in :data:`~protocol.state.TRUST` order.

    *value* is one status or a non-empty list/tuple of them; an unknown status,
    an empty list or anything else raises :class:`RequestError` with *code*.
    Order and repetition do not matter: equal sets give equal tuples (and so
    equal cursor bindings).
    """
    items = (value,) if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not items:
        raise RequestError(
            f"{name}: a non-empty list of trust statuses ({', '.join(TRUST)})", code=code
        )
    unknown = sorted({str(x)[:40] for x in items if not isinstance(x, str) or x not in TRUST})
    if unknown:
        raise RequestError(
            f"{name}: unknown trust status {', '.join(unknown)}; use {', '.join(TRUST)}", code=code
        )
    return tuple(t for t in TRUST if t in items)


def _describe(e: ValidationError) -> str:
    err = e.errors()[0]
    loc = ".".join(str(x) for x in err.get("loc", ())) or "request"
    kind = err.get("type")
    if kind == "extra_forbidden":
        return (
            f"unknown field {loc!r}; a recall request has {', '.join(RecallRequest.field_names())}"
        )
    if kind == "missing":
        return f"{loc} is required"
    msg = str(err.get("msg", "invalid"))
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    return f"{loc}: {msg}"


class RecallRequest(BaseModel):
    """A validated graph recall request (R26); invalid input raises typed errors only.

    A value outside its bounds raises :class:`~protocol.errors.OutOfRange`
    (never clamped); any other invalid field, an unknown field or a missing
    ``frame_id`` raises :class:`~protocol.errors.RequestError` with code
    ``bad_request``. Types are strict: ``"2"``, ``2.0`` and ``true`` are not
    depths.

    Filters (both optional, None = no filter): ``valid_at`` (ISO date/date-time
    or epoch seconds, normalized to float seconds) keeps frames whose envelope's
    ``[valid_from, valid_to)`` covers it; ``trust`` (a non-empty list of trust
    statuses, normalized to :data:`~protocol.state.TRUST` order) keeps frames
    whose trust is one of them. Events always pass.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    frame_id: str
    depth: int = 2
    direction: Direction = "ancestors"
    include_bodies: bool = True
    include_events: bool = False
    max_nodes: int = DEFAULT_MAX_NODES
    max_bytes: int = DEFAULT_MAX_BYTES
    valid_at: float | None = None
    trust: tuple[str, ...] | None = None

    @model_validator(mode="wrap")
    @classmethod
    def _typed_errors(cls, data: Any, handler: Callable[[Any], Any]) -> Any:
        # OutOfRange raised by the field validators passes through pydantic untouched;
        # everything pydantic itself refuses becomes one bad_request.
        try:
            return handler(data)
        except ValidationError as e:
            raise _bad(_describe(e)) from None

    @field_validator("frame_id")
    @classmethod
    def _v_frame_id(cls, value: str) -> str:
        if not is_frame_id(value):
            raise _bad(f"frame_id: not a frame id: {value[:60]!r}")
        return value

    @field_validator("depth", "max_nodes", "max_bytes")
    @classmethod
    def _v_bounds(cls, value: int, info: ValidationInfo) -> int:
        name = str(info.field_name)
        low, high, unit = _BOUNDS[name]
        if not low <= value <= high:
            raise OutOfRange(f"{name} must be between {low} and {high} {unit}, not {value}")
        return value

    @field_validator("valid_at", mode="before")
    @classmethod
    def _v_valid_at(cls, value: Any) -> float | None:
        return None if value is None else valid_at_seconds(value, code="bad_request")

    @field_validator("trust", mode="before")
    @classmethod
    def _v_trust(cls, value: Any) -> tuple[str, ...] | None:
        if value is None:
            return None
        if isinstance(value, str):  # strict: a list, even of one status
            raise _bad(f'trust: a list of trust statuses, e.g. ["{value[:40]}"]')
        return trust_filter(value, code="bad_request")

    def admits(self, frame: Frame | None) -> bool:
        """True if *frame* passes the filters (a missing frame, None, always does)."""
        if frame is None:
            return True
        if self.trust is not None and frame.trust not in self.trust:
            return False
        return self.valid_at is None or frame.valid_at(self.valid_at)

    @property
    def filtered(self) -> bool:
        """True if the request has a ``valid_at`` or ``trust`` filter."""
        return self.valid_at is not None or self.trust is not None

    @classmethod
    def field_names(cls) -> list[str]:
        """The request's field names, in declaration order."""
        return list(cls.model_fields)

    @classmethod
    def parse(cls, obj: dict[str, Any] | str | bytes) -> RecallRequest:
        """A request from a dict or from JSON text.

        Malformed JSON raises :class:`~protocol.errors.ParseError` (with line and
        column); otherwise only :class:`~protocol.errors.RequestError` and its
        subclasses are raised.
        """
        if isinstance(obj, bytes):
            try:
                obj = obj.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ParseError(f"the recall request is not valid UTF-8 (byte {e.start})") from e
        if isinstance(obj, str):
            if len(obj) > MAX_REQUEST_CHARS:
                raise _bad(f"a recall request is at most {MAX_REQUEST_CHARS} characters of JSON")
            try:
                obj = json.loads(
                    obj, parse_constant=reject_json_constant, object_pairs_hook=unique_keys
                )
            except json.JSONDecodeError as e:
                raise ParseError(f"malformed JSON: {e.msg}", e.lineno, e.colno) from e
            except RecursionError as e:
                raise ParseError("the recall request nests too deeply") from e
            except ValueError as e:
                raise ParseError(f"malformed JSON: {e}") from e
        if not isinstance(obj, dict):
            raise _bad(f"a recall request is a JSON object, not {type(obj).__name__}")
        return cls.model_validate(obj)

    def digest(self) -> bytes:
        """A short digest of every parameter; cursors carry it to bind their request.

        Absent filters are left out, so a request without filters binds its
        cursors exactly as before the filters existed.
        """
        text = json.dumps(self.model_dump(exclude_none=True), sort_keys=True, ensure_ascii=False)
        return hashlib.blake2b(text.encode(), digest_size=_DIGEST_BYTES).digest()


def for_model(request: RecallRequest) -> RecallRequest:
    """*request* as model-facing recall runs it: trust filtered to what may reach model input.

    Without a ``trust`` filter it gets :data:`MODEL_TRUST` (candidate and
    accepted). A filter naming a hidden status (rejected, quarantined: frames
    kept out of every compiled input) is refused with code ``not_permitted``;
    reviewers read those through :func:`recall` directly.
    """
    if request.trust is None:
        return request.model_copy(update={"trust": MODEL_TRUST})
    hidden = [t for t in request.trust if t in HIDDEN_TRUST]
    if hidden:
        raise RequestError(
            f"trust {', '.join(hidden)}: such frames never enter model input; "
            "model-facing recall reads only candidate, accepted and retired frames",
            code="not_permitted",
        )
    return request
