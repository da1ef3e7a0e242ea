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

The modules: ``request`` (:class:`RecallRequest`, its bounds and filters,
:func:`for_model`), ``page`` (:class:`RecallPage`, cursors, node sizes, the
page as an observation) and ``walk`` (:func:`recall`, :func:`read_recall`).
"""

from protocol.recall.page import (
    CURSOR_FORMAT,
    MAX_CURSOR_CHARS,
    RecallPage,
    as_recall_observation,
    node_bytes,
)
from protocol.recall.request import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_NODES,
    MAX_BYTES,
    MAX_DEPTH,
    MAX_NODES,
    MAX_REQUEST_CHARS,
    MIN_BYTES,
    MODEL_TRUST,
    Direction,
    RecallRequest,
    for_model,
    trust_filter,
    valid_at_seconds,
)
from protocol.recall.walk import (
    SOURCE,
    read_recall,
    recall,
)

__all__ = [
    "CURSOR_FORMAT",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_NODES",
    "Direction",
    "MAX_BYTES",
    "MAX_CURSOR_CHARS",
    "MAX_DEPTH",
    "MAX_NODES",
    "MAX_REQUEST_CHARS",
    "MIN_BYTES",
    "MODEL_TRUST",
    "RecallPage",
    "RecallRequest",
    "SOURCE",
    "as_recall_observation",
    "for_model",
    "node_bytes",
    "read_recall",
    "recall",
    "trust_filter",
    "valid_at_seconds",
]
