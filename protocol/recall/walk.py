"""The walk: breadth-first pages of the cognitive graph around one frame (R26, R27).

:func:`recall` reads one snapshot through a :class:`~protocol.view.ReadView`
and returns one page; :func:`read_recall` does the same on a backend's
snapshot. The walk grows only as far as a page needs (the nodes before its
end, and one more to know whether a next page exists), so a first page costs
the same whatever the size of the whole neighbourhood.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from protocol.errors import NotFound, RequestError
from protocol.ids import event_ref
from protocol.recall.page import RecallPage, decode_cursor, encode_cursor, node_bytes
from protocol.recall.request import RecallRequest
from protocol.sexpr import print_form
from protocol.state import Frame
from protocol.view import ReadView

T = TypeVar("T")

SOURCE = "source"
"""The label of an edge from a frame to one of its sources."""


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
    return " ".join(print_form(f) for f in body)


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
        first_version, cursor_digest, offset = decode_cursor(cursor)
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
        next_cursor=encode_cursor(version, digest, end) if more else None,
        version=version,
    )


def _filters_text(request: RecallRequest) -> str:
    parts = []
    if request.trust is not None:
        parts.append(f"trust filter {', '.join(request.trust)}")
    if request.valid_at is not None:
        parts.append(f"valid at {request.valid_at}")
    return "; ".join(parts)


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
