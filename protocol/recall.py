"""Graph recall (R26, R27): breadth-first pages of the cognitive graph around one frame.

A :class:`RecallRequest` names a start frame, a depth (hops, at most 4) and a
direction:

* ``ancestors`` follows a frame's sources (frames and events, in stored order)
  and its relations subject → object (sorted);
* ``descendants`` follows the frames that cite it as a source (sorted) and its
  relations in reverse, object → subject (sorted);
* ``both`` does the first, then the second, at every node.

The walk is breadth-first from the start frame (node 0, depth 0): nearer
nodes come first, every node is expanded once (so cycles end), events are
leaves, and retired frames and events are reachable like any other. Optional
filters (``valid_at``, ``trust``) drop the frames whose envelope fails them:
such a frame is neither returned nor walked through, and its edges are not
kept; events have no envelope and always pass. Every edge
found while expanding is kept once, as ``{"from", "to", "label"}`` where
``label`` is the relation's name, or ``"source"`` for an edge from a frame to
one of its sources.

:func:`recall` returns one :class:`RecallPage`: at most ``max_nodes`` nodes
whose JSON renderings add up to at most ``max_bytes`` (pages split only
between whole nodes; a node larger than ``max_bytes`` gets a page of its
own), the edges whose later endpoint is on this page (so the pages' edges
partition the whole edge set), the context ``version`` and a ``next_cursor``.
A cursor binds the request parameters and the version of the first page: if
the graph changed since, the next page is refused (``stale_cursor``) and
recall restarts.

Nothing here does I/O: :func:`recall` reads one snapshot through a
:class:`~protocol.view.ReadView`. Each page walks only as far as it needs
(the nodes before its end, and one more to know whether a next page exists),
so a first page costs the same whatever the size of the whole neighbourhood.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Callable
from typing import Any, Literal, Protocol, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from protocol.errors import NotFound, OutOfRange, ParseError, RequestError, WireError
from protocol.ids import event_ref, is_frame_id
from protocol.state import ACCEPTED, CANDIDATE, HIDDEN_TRUST, TRUST, Frame
from protocol.view import ReadView
from protocol.wire import pack, unpack

T = TypeVar("T")

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
MAX_CURSOR_CHARS = 256
CURSOR_FORMAT = 1
"""First element of every cursor; bump when its layout changes."""
SOURCE = "source"
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
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_CHECK_BYTES = 4


def _bad(message: str) -> RequestError:
    return RequestError(message, code="bad_request")


def valid_at_seconds(value: Any, *, code: str = "bad_time", name: str = "valid_at") -> float:
    """Epoch seconds of a valid-time filter: an ISO date/date-time (UTC unless it says) or a number.

    The same parsing as the envelope's ``valid-from``/``valid-to``
    (:func:`protocol.tx.valid_time`). A number that is not finite or beyond
    ±1e12 raises :class:`OutOfRange`; anything else that is not a time raises
    :class:`RequestError` with *code*. Messages start with *name* unless it is empty.
    """
    from protocol.tx import valid_time

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
                obj = json.loads(obj, parse_constant=_reject_constant, object_pairs_hook=_unique)
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


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("duplicate key in a JSON object")
    return out


class RecallPage(BaseModel):
    """One page of a recall: nodes, the edges completed on it, the version and a cursor.

    Frame nodes: ``{"id", "type": "frame", "depth", "lifecycle", "revision",
    "sources", "protected"}`` and ``"body"`` (S-expression text) with
    ``include_bodies``. Event nodes: ``{"id": "@eN", "type": "event", "depth",
    "lifecycle", "kind", "size", "preview"}`` and ``"text"`` (the full
    original) with ``include_events``. ``next_cursor`` is None on the last page.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    nodes: list[dict[str, Any]]
    edges: list[dict[str, str]]
    next_cursor: str | None
    version: int

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready page: ``{"nodes", "edges", "next_cursor", "version"}``."""
        return {
            "nodes": list(self.nodes),
            "edges": list(self.edges),
            "next_cursor": self.next_cursor,
            "version": self.version,
        }


# -- cursors ---------------------------------------------------------------------


def _encode_cursor(version: int, digest: bytes, offset: int) -> str:
    payload = pack([CURSOR_FORMAT, version, digest, offset])
    check = hashlib.blake2b(payload, digest_size=_CHECK_BYTES).digest()
    return base64.urlsafe_b64encode(payload + check).decode("ascii").rstrip("=")


def _decode_cursor(cursor: str) -> tuple[int, bytes, int]:
    """``(version, request digest, offset)`` of a cursor; ``bad_cursor`` if it is not one."""

    def bad(why: str) -> RequestError:
        return RequestError(f"not a recall cursor ({why}); restart recall", code="bad_cursor")

    if not isinstance(cursor, str) or not cursor or len(cursor) > MAX_CURSOR_CHARS:
        raise bad("empty, too long or not text")
    try:
        raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError) as e:
        raise bad("not URL-safe base64") from e
    payload, check = raw[:-_CHECK_BYTES], raw[-_CHECK_BYTES:]
    if len(raw) <= _CHECK_BYTES or hashlib.blake2b(payload, digest_size=_CHECK_BYTES).digest() != (
        check
    ):
        raise bad("checksum mismatch")
    try:
        fields = unpack(payload)
    except WireError as e:
        raise bad("undecodable") from e
    if (
        not isinstance(fields, list)
        or len(fields) != 4
        or fields[0] != CURSOR_FORMAT
        or not all(isinstance(x, int) and not isinstance(x, bool) for x in fields[1::2])
        or not isinstance(fields[2], bytes)
        or fields[1] < 0
        or fields[3] < 1
    ):
        raise bad("unknown layout")
    return fields[1], fields[2], fields[3]


# -- the walk ----------------------------------------------------------------------


class _Walk:
    """Breadth-first discovery order, grown only as far as a page needs.

    Node keys are frame ids and stable event ids (``ev:…``, which no frame id
    can be). A node is *discovered* (given its index and depth) when a
    neighbour is expanded, and *read* only when it is expanded or rendered.
    """

    __slots__ = (
        "view",
        "limit",
        "up",
        "down",
        "keys",
        "depths",
        "index",
        "frames",
        "edges",
        "expanded",
        "seqs",
        "admits",
    )

    def __init__(self, view: ReadView, request: RecallRequest, start: Frame) -> None:
        self.view = view
        self.admits = request.admits if request.filtered else None
        self.limit = request.depth
        self.up = request.direction != "descendants"
        self.down = request.direction != "ancestors"
        self.keys: list[str] = [start.id]
        self.depths: list[int] = [0]
        self.index: dict[str, int] = {start.id: 0}
        self.frames: dict[str, Frame | None] = {start.id: start}
        self.edges: dict[tuple[str, str, str], None] = {}
        self.expanded = 0
        self.seqs: dict[str, int | None] = {}

    def frame(self, frame_id: str) -> Frame | None:
        try:
            return self.frames[frame_id]
        except KeyError:
            f = self.frames[frame_id] = self.view.frame(frame_id)
            return f

    def seq(self, event_id: str) -> int | None:
        try:
            return self.seqs[event_id]
        except KeyError:
            s = self.seqs[event_id] = self.view.event_seq(event_id)
            return s

    def ref(self, key: str) -> str:
        """A node key as the model reads it: ``@eN`` for events, the id for frames."""
        if key.startswith("ev:"):
            seq = self.seq(key)
            return key if seq is None else event_ref(seq)
        return key

    def _expand_next(self) -> None:
        i = self.expanded
        self.expanded = i + 1
        key = self.keys[i]
        depth = self.depths[i]
        if depth >= self.limit or key.startswith("ev:"):
            return  # events are leaves; the last level is not expanded
        f = self.frame(key)
        if f is None:
            return
        view = self.view
        hops: list[tuple[tuple[str, str, str], str]] = []
        if self.up:
            hops += [((key, s, SOURCE), s) for s in f.sources]
            hops += [((key, o, label), o) for label, o in view.relations_from(key)]
        if self.down:
            hops += [((c, key, SOURCE), c) for c in view.cited_by(key)]
            hops += [((s, key, label), s) for s, label in view.relations_to(key)]
        edges, index, keys, depths, nxt = self.edges, self.index, self.keys, self.depths, depth + 1
        admits = self.admits
        for edge, node in hops:
            if node not in index:
                # A frame failing the filters is not a node, not a bridge and ends no edge.
                if (
                    admits is not None
                    and not node.startswith("ev:")
                    and not admits(self.frame(node))
                ):
                    continue
                index[node] = len(keys)
                keys.append(node)
                depths.append(nxt)
            edges[edge] = None

    def discover(self, n: int) -> bool:
        """Expand in order until node *n* is discovered; False if the walk ends first."""
        keys = self.keys
        while len(keys) <= n and self.expanded < len(keys):
            self._expand_next()
        return n < len(keys)

    def expand_before(self, n: int) -> None:
        """Expand every node with index below *n*, so all their edges are known."""
        while self.expanded < min(n, len(self.keys)):
            self._expand_next()

    def render(self, i: int, request: RecallRequest) -> dict[str, Any]:
        key, depth = self.keys[i], self.depths[i]
        if key.startswith("ev:"):
            return self._render_event(key, depth, request.include_events)
        f = self.frame(key)
        if f is None:  # a dangling reference; a consistent store has none
            return {"id": key, "type": "frame", "depth": depth, "lifecycle": "missing"}
        node: dict[str, Any] = {
            "id": f.id,
            "type": "frame",
            "depth": depth,
            "lifecycle": f.lifecycle,
            "revision": f.revision,
            "sources": [self.ref(s) if s.startswith("ev:") else s for s in f.sources],
            "protected": f.protected,
        }
        if request.include_bodies:
            node["body"] = _print_body(f.body)
        return node

    def _render_event(self, key: str, depth: int, full: bool) -> dict[str, Any]:
        seq = self.seq(key)
        e = self.view.event(seq) if seq is not None else None
        if e is None or seq is None:  # a dangling reference; a consistent store has none
            return {"id": key, "type": "event", "depth": depth, "lifecycle": "missing"}
        node: dict[str, Any] = {
            "id": e.ref,
            "type": "event",
            "depth": depth,
            "lifecycle": e.lifecycle,
            "kind": e.kind,
            "size": e.size,
            "preview": e.preview,
        }
        if full:
            node["text"] = self.view.event_content(seq) or ""
        return node


def _print_body(body: tuple[Any, ...]) -> str:
    from protocol.txlang import print_form

    return " ".join(print_form(f) for f in body)


def node_bytes(node: dict[str, Any]) -> int:
    """The bytes *node* counts against ``max_bytes``: the length of its compact UTF-8 JSON."""
    text = _COMPACT.encode(node)
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def recall(
    view: ReadView,
    request: RecallRequest | dict[str, Any] | str,
    cursor: str | None = None,
    view_version: int | None = None,
) -> RecallPage:
    """One page of graph recall over *view* (R26, R27).

    Without *cursor* this is the first page; with the ``next_cursor`` of the
    previous page it continues. Refusals, all :class:`RequestError`:
    ``bad_cursor`` (not a cursor), ``cursor_mismatch`` (a cursor of other
    request parameters), ``stale_view`` (*view_version* given and not the
    current version: model-facing recall from an outdated context view),
    ``stale_cursor`` (the graph changed since the first page: restart),
    :class:`NotFound` for an unknown start frame, and ``filtered_out`` for a
    start frame that fails the request's filters.
    """
    if not isinstance(request, RecallRequest):
        request = RecallRequest.parse(request)
    digest = request.digest()
    offset = 0
    first_version: int | None = None
    if cursor is not None:
        first_version, cursor_digest, offset = _decode_cursor(cursor)
        if cursor_digest != digest:
            raise RequestError(
                "the cursor belongs to a recall with other parameters; "
                "send the same request with its cursor",
                code="cursor_mismatch",
            )
    version = view.meta().version
    if view_version is not None and view_version != version:
        raise RequestError(
            f"the context view is at version {view_version} but the graph is at {version}; "
            "re-read the context before recalling",
            code="stale_view",
        )
    if first_version is not None and first_version != version:
        raise RequestError(
            f"the graph changed since the first page (version {first_version}, now {version}); "
            "restart recall",
            code="stale_cursor",
        )
    start = view.frame(request.frame_id)
    if start is None:
        raise NotFound(f"no frame {request.frame_id!r}")
    if not request.admits(start):
        raise RequestError(
            f"frame {request.frame_id!r} does not pass the recall filters "
            f"(trust {start.trust}; {_filters_text(request)})",
            code="filtered_out",
        )

    walk = _Walk(view, request, start)
    if not walk.discover(offset):
        raise RequestError(
            "the cursor points past the last node; restart recall", code="bad_cursor"
        )
    nodes: list[dict[str, Any]] = []
    used = 0
    end = offset
    while len(nodes) < request.max_nodes and walk.discover(end):
        node = walk.render(end, request)
        size = node_bytes(node)
        if nodes and used + size > request.max_bytes:
            break
        nodes.append(node)
        used += size
        end += 1
    walk.expand_before(end)
    index = walk.index
    edges = [
        {"from": walk.ref(a), "to": walk.ref(b), "label": label}
        for (a, b, label) in walk.edges
        if offset <= max(index[a], index[b]) < end
    ]
    more = walk.discover(end)
    return RecallPage.model_construct(
        nodes=nodes,
        edges=edges,
        next_cursor=_encode_cursor(version, digest, end) if more else None,
        version=version,
    )


def _filters_text(request: RecallRequest) -> str:
    parts = []
    if request.trust is not None:
        parts.append(f"trust filter {', '.join(request.trust)}")
    if request.valid_at is not None:
        parts.append(f"valid at {request.valid_at}")
    return "; ".join(parts)


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


class _Reads(Protocol):
    def read(self, fn: Callable[[ReadView], T]) -> T: ...


def read_recall(
    backend: _Reads,
    request: RecallRequest | dict[str, Any] | str,
    cursor: str | None = None,
    view_version: int | None = None,
) -> RecallPage:
    """:func:`recall` on one snapshot of *backend* (anything with ``read(fn)``)."""
    if not isinstance(request, RecallRequest):
        request = RecallRequest.parse(request)
    req = request
    return backend.read(lambda v: recall(v, req, cursor, view_version))


def as_recall_observation(page: RecallPage, request: RecallRequest | None = None) -> str:
    """The JSON text a recall result enters the context as (a ``recall_result`` observation).

    Recall results are tool output (R30): recording one changes no frame's
    lifecycle and, claimed alone, does not advance the tick. With *request*,
    the text starts with the request that produced the page.
    """
    doc: dict[str, Any] = {}
    if request is not None:
        doc["request"] = request.model_dump(exclude_none=True)
    doc.update(page.to_dict())
    return _COMPACT.encode(doc)
