"""Reads the web inspector shows: the graph as of a version, a page of transactions, a diff
between two revisions of a frame, and one dispatcher (:func:`inspect`) over them.

Every function reads one snapshot of a :class:`~service.context.Context` and writes
nothing. Each bounds its work: the graph is a neighbourhood of at most
:data:`MAX_GRAPH_NODES` frames, rebuilding relations as of an old version walks at most
:data:`MAX_LOG_WALK` log records, a transaction page holds at most
:data:`MAX_TX_PAGE` records and a diff compares at most :data:`MAX_DIFF_CHARS` characters
a side. Every port serves them the same way: the embedded inspector calls
:func:`inspect` on an open context, a context actor calls it for a remote one.
"""

from __future__ import annotations

import difflib
import weakref
from collections import Counter
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field, Strict

from protocol.errors import NotFound, OutOfRange, RequestError
from protocol.state import Frame
from protocol.view import ReadView
from service.reads import print_body
from service.registry import Text
from storage.search import SearchResult

if TYPE_CHECKING:
    from service.context import Context

__all__ = [
    "DEFAULT_GRAPH_NODES",
    "INSPECT_VIEWS",
    "MAX_DIFF_CHARS",
    "MAX_GRAPH_NODES",
    "MAX_LOG_WALK",
    "MAX_QUERY_CHARS",
    "MAX_SEARCH_HITS",
    "MAX_TX_PAGE",
    "diff",
    "find_hits",
    "graph",
    "inspect",
    "inspect_search",
    "int_arg",
    "revisions",
    "transactions",
]

DEFAULT_GRAPH_NODES = 120
"""Frames the graph page draws unless asked for another bound."""
MAX_GRAPH_NODES = 400
"""Most frames one graph read returns: the page stays drawable on any context."""
MAX_RADIUS = 4
"""Most relation hops from the centre a graph read walks."""
RECENT_WALK = 2000
"""Most log records read, newest first, to find the recently written frames (no centre)."""
MAX_LOG_WALK = 50_000
"""Most log records read to rebuild the relations as of an old version."""
MAX_TX_PAGE = 500
"""Most transactions one :func:`transactions` page holds."""
MAX_DIFF_CHARS = 20_000
"""Characters of each revision's body a diff compares (past them, the body is cut)."""
LABEL_CHARS = 80
"""Characters of a frame's body shown as its label in the graph."""

Edge = tuple[str, str, str]


def _version(v: ReadView, version: int | None) -> tuple[int, int]:
    current = v.meta().version
    if version is None:
        return current, current
    if version < 0 or version > current:
        code = "future_version" if version > current else None
        raise OutOfRange(f"version must be between 0 and {current}, not {version}", code=code)
    return current, version


def _edge(change: str) -> Edge | None:
    """The relation a log record's change names (``a label b``), else None (a frame, an event)."""
    parts = change.split(" ")
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 else None


MAX_CACHED_VERSIONS = 1_000_000
"""Most versions whose relation changes one context keeps in memory (see :func:`_flips`)."""

Changes = dict[int, tuple[Edge, ...]]
_CHANGES: weakref.WeakKeyDictionary[Any, Changes] = weakref.WeakKeyDictionary()


def _changes_of(backend: Any) -> Changes:
    """The relation changes already read from *backend*'s log, by version: a committed log
    record never changes what relations it changed, so a slider moved again reads no log."""
    try:
        return _CHANGES.setdefault(backend, {})
    except TypeError:  # a backend that cannot be weakly referenced: no cache
        return {}


def _relation_changes(rec: dict[str, Any]) -> tuple[Edge, ...]:
    """The relations a log record changed: its net ``relations`` field, or, in a record
    written before that field existed, the edges its ``changes`` name (the same, except
    for a transaction that related and unrelated one edge)."""
    net = rec.get("relations")
    if net is not None:
        return tuple((str(r[0]), str(r[1]), str(r[2])) for r in net)
    return tuple(e for c in rec.get("changes") or () if (e := _edge(c)) is not None)


def _flips(v: ReadView, low: int, high: int, known: Changes) -> dict[Edge, bool]:
    """The relations changed an odd number of times by versions ``low+1 .. high``.

    A logged relation change is a flip (a relate of a present edge and an unrelate
    of an absent one change nothing and are not logged), so the relations at *low*
    are those at *high* with these flipped, and the other way round.
    """
    flipped: dict[Edge, bool] = {}
    for version in range(low + 1, high + 1):
        edges = known.get(version)
        if edges is None:
            edges = _relation_changes(v.txlog(version) or {})
            if len(known) < MAX_CACHED_VERSIONS:
                known[version] = edges
        for e in edges:
            if flipped.pop(e, None) is None:
                flipped[e] = True
    return flipped


class _AsOf:
    """Frames and relations of one snapshot as they stood at version *at*."""

    def __init__(self, v: ReadView, current: int, at: int, known: Changes) -> None:
        self.v, self.current, self.at = v, current, at
        self.exact = True
        self.from_scratch = False
        self.flipped: dict[str, set[Edge]] = {}
        if at == current:
            return
        if current - at <= MAX_LOG_WALK and current - at <= at:
            changed = _flips(v, at, current, known)
        elif at <= MAX_LOG_WALK:
            changed, self.from_scratch = _flips(v, 0, at, known), True
        else:  # too far from both ends: relations as they stand now
            changed, self.exact = {}, False
        for e in changed:
            self.flipped.setdefault(e[0], set()).add(e)
            self.flipped.setdefault(e[2], set()).add(e)
        self._frames: dict[str, Frame | None] = {}

    def frame(self, fid: str) -> Frame | None:
        if self.at == self.current:
            return self.v.frame(fid)
        if fid not in self._frames:
            self._frames[fid] = self.v.frame_at(fid, self.at)
        return self._frames[fid]

    def edges(self, fid: str) -> set[Edge]:
        """The relations of *fid*, out and in, at this version."""
        mine = self.flipped.get(fid, set())
        if self.from_scratch:
            return set(mine)
        now = {(fid, lab, o) for lab, o in self.v.relations_from(fid)}
        now |= {(s, lab, fid) for s, lab in self.v.relations_to(fid)}
        return now ^ mine


def _recent(v: ReadView, at: int, limit: int) -> list[str]:
    """Frames written by the newest transactions at or before *at*, newest first."""
    seen: dict[str, None] = {}
    version = at
    while version > 0 and at - version < RECENT_WALK and len(seen) < limit:
        for w in (v.txlog(version) or {}).get("writes") or ():
            seen.setdefault(str(w["frame"]), None)
        version -= 1
    return list(seen)[:limit]


def _node(f: Frame, center: bool) -> dict[str, Any]:
    body = print_body(f.body)
    if len(body) > LABEL_CHARS:
        body = body[: LABEL_CHARS - 1] + "…"
    return {
        "id": f.id,
        "lifecycle": f.lifecycle,
        "trust": f.trust,
        "state": "quarantined" if f.trust == "quarantined" else f.lifecycle,
        "revision": f.revision,
        "kind": f.envelope.get("kind"),
        "label": body,
        "center": center,
    }


def _graph(
    v: ReadView,
    center: str | None,
    version: int | None,
    radius: int,
    limit: int,
    known: Changes,
) -> dict[str, Any]:
    current, at = _version(v, version)
    view = _AsOf(v, current, at, known)
    if center is not None:
        if view.frame(center) is None:
            where = "" if at == current else f" at version {at}"
            raise NotFound(f"no frame {center!r}{where}")
        seeds = [center]
    else:
        seeds = [fid for fid in _recent(v, at, limit) if view.frame(fid) is not None]
    nodes: dict[str, dict[str, Any]] = {}
    frontier: list[str] = []
    for fid in seeds:
        f = view.frame(fid)
        if f is not None and len(nodes) < limit:
            nodes[fid] = _node(f, fid == center)
            frontier.append(fid)
    truncated = False
    edges: set[Edge] = set()
    for _ in range(radius):
        nxt: list[str] = []
        for fid in frontier:
            for e in sorted(view.edges(fid)):
                other = e[2] if e[0] == fid else e[0]
                if other not in nodes:
                    if len(nodes) >= limit:
                        truncated = True
                        continue
                    f = view.frame(other)
                    if f is None:
                        continue
                    nodes[other] = _node(f, False)
                    nxt.append(other)
                edges.add(e)
        frontier = nxt
        if not frontier:
            break
    for fid in frontier:  # edges among the outermost ring
        edges.update(e for e in view.edges(fid) if e[0] in nodes and e[2] in nodes)
    return {
        "version": current,
        "as_of": at,
        "center": center,
        "radius": radius,
        "limit": limit,
        "nodes": list(nodes.values()),
        "edges": [list(e) for e in sorted(edges)],
        "truncated": truncated,
        "relations_exact": view.exact,
    }


def graph(
    ctx: Context,
    *,
    center: str | None = None,
    version: int | None = None,
    radius: int = 2,
    limit: int = DEFAULT_GRAPH_NODES,
) -> dict[str, Any]:
    """A bounded neighbourhood of the graph as it stood at *version* (default: now).

    Around *center* (NotFound if it did not exist then), else around the frames the
    newest transactions wrote: at most *limit* frames (1 to :data:`MAX_GRAPH_NODES`)
    reached within *radius* hops (0 to :data:`MAX_RADIUS`). Answers ``{"version",
    "as_of", "center", "nodes": [{"id", "lifecycle", "trust", "state", "revision",
    "kind", "label", "center"}], "edges": [[subject, label, object]], "truncated",
    "relations_exact"}``; ``relations_exact`` is false when *version* is more than
    :data:`MAX_LOG_WALK` versions from both ends of the log (relations are then drawn
    as they stand now; the frames are always as of *version*).
    """
    if not 1 <= limit <= MAX_GRAPH_NODES:
        raise OutOfRange(f"limit must be between 1 and {MAX_GRAPH_NODES}, not {limit}")
    if not 0 <= radius <= MAX_RADIUS:
        raise OutOfRange(f"radius must be between 0 and {MAX_RADIUS}, not {radius}")
    known = _changes_of(ctx.backend)
    return ctx.backend.read(lambda v: _graph(v, center, version, radius, limit, known))


def _agent(v: ReadView, rec: dict[str, Any]) -> str:
    """Who wrote a log record: the holder of the verified capability it was submitted
    with (a context that enforces records it), else the session of the first frame it
    wrote, else its client id (its kind for runtime and governance records)."""
    kind = str(rec.get("kind") or "model")
    if kind != "model":
        return kind
    if rec.get("agent"):
        return str(rec["agent"])
    for w in rec.get("writes") or ():
        f = v.frame_at(str(w["frame"]), int(rec["version"]))
        if f is not None and f.envelope.get("session"):
            return str(f.envelope["session"])
    return str(rec.get("client_id") or "unknown")


def _tx_row(v: ReadView, rec: dict[str, Any]) -> dict[str, Any]:
    receipt = rec.get("receipt") or {}
    version = int(rec["version"])
    return {
        "version": version,
        "base_version": rec.get("base_version"),
        "kind": rec.get("kind"),
        "agent": _agent(v, rec),
        "client_id": rec.get("client_id"),
        "reason": rec.get("reason"),
        "time": rec.get("time"),
        "tick": rec.get("tick"),
        "rebased": bool(receipt.get("rebased")),
        "changes": list(rec.get("changes") or ())[:50],
        "text": (rec.get("text") or "")[:2000],
    }


def _transactions(v: ReadView, after: int | None, before: int | None, limit: int) -> dict[str, Any]:
    current = v.meta().version
    if after is not None:  # oldest first: what came after *after* (a live view's poll)
        low = max(after, 0)
        versions = range(low + 1, min(current, low + limit) + 1)
    else:
        top = current if before is None else min(before - 1, current)
        versions = range(top, max(top - limit, 0), -1)
    rows = [_tx_row(v, rec) for n in versions if (rec := v.txlog(n)) is not None]
    agents = Counter(r["agent"] for r in rows)
    return {
        "version": current,
        "transactions": rows,
        "agents": dict(agents.most_common()),
        "rebases": sum(1 for r in rows if r["rebased"]),
    }


def transactions(
    ctx: Context, *, after: int | None = None, before: int | None = None, limit: int = 50
) -> dict[str, Any]:
    """A page of committed transactions: newest first (below *before*, default the
    newest), or oldest first after version *after* (what a live view polls for).

    Answers ``{"version", "transactions": [{"version", "base_version", "kind",
    "agent", "client_id", "reason", "time", "tick", "rebased", "changes", "text"}],
    "agents": {agent: count in this page}, "rebases"}``. ``agent`` is the session of
    the first frame a transaction wrote (its kind for runtime and governance records).
    Rejected transactions write nothing to the log: a context actor counts them
    (``stats``).
    """
    if not 1 <= limit <= MAX_TX_PAGE:
        raise OutOfRange(f"limit must be between 1 and {MAX_TX_PAGE}, not {limit}")
    for name, value in (("after", after), ("before", before)):
        if value is not None and value < 0:
            raise OutOfRange(f"{name} must be >= 0, not {value}")
    return ctx.backend.read(lambda v: _transactions(v, after, before, limit))


def _body_at(v: ReadView, frame_id: str, version: int) -> tuple[str, int]:
    f = v.frame_at(frame_id, version)
    if f is None:
        raise NotFound(f"no frame {frame_id!r} at version {version}")
    return print_body(f.body), f.revision


def _diff(v: ReadView, frame_id: str, a: int, b: int) -> dict[str, Any]:
    for x in (a, b):
        _version(v, x)
    old, old_rev = _body_at(v, frame_id, a)
    new, new_rev = _body_at(v, frame_id, b)
    cut = len(old) > MAX_DIFF_CHARS or len(new) > MAX_DIFF_CHARS
    lines = difflib.unified_diff(
        _lines(old[:MAX_DIFF_CHARS]),
        _lines(new[:MAX_DIFF_CHARS]),
        f"{frame_id}@{a} (revision {old_rev})",
        f"{frame_id}@{b} (revision {new_rev})",
        lineterm="",
    )
    return {
        "frame": frame_id,
        "from": {"version": a, "revision": old_rev, "body": old},
        "to": {"version": b, "revision": new_rev, "body": new},
        "diff": list(lines),
        "cut": cut,
    }


def _lines(body: str) -> list[str]:
    """A body split at its forms and words' breaks, so a diff shows what changed."""
    out: list[str] = []
    for word in body.replace("(", "\n(").split("\n"):
        if word.strip():
            out.append(word.rstrip())
    return out


def diff(ctx: Context, frame_id: str, a: int, b: int) -> dict[str, Any]:
    """The change of *frame_id*'s body between the revisions standing at versions *a*
    and *b*: ``{"frame", "from", "to": {"version", "revision", "body"}, "diff": [unified
    diff lines], "cut"}``. NotFound if the frame did not exist at either version."""
    return ctx.backend.read(lambda v: _diff(v, frame_id, a, b))


MAX_SEARCH_HITS = 100
"""Most hits one inspector search answers."""
MAX_QUERY_CHARS = 1000
"""The longest inspector query."""
Query = Annotated[str, Strict(), Field(max_length=MAX_QUERY_CHARS)]
"""An inspector search's words."""
Hits = Annotated[int, Strict(), Field(ge=1, le=MAX_SEARCH_HITS)]
"""How many hits one inspector search answers."""


def find_hits(ctx: Context, args: Any) -> SearchResult:
    """The part of :func:`inspect_search` that reads without the writer: the indexes
    brought up to what was committed before the call, then searched."""
    searcher = ctx.searcher
    searcher.catch_up()
    return searcher.find(args.query, limit=args.limit)


def inspect_search(
    ctx: Context, query: Query, limit: Hits = 20, *, prepared: SearchResult | None = None
) -> dict[str, Any]:
    """The context's search (lexical, hybrid where an embedder is configured) as it
    stands after the index catches up, read-only: unlike a model's search it records no
    ``recall_result`` observation. Hits carry snippets with matches between ``«`` and ``»``.
    """
    assert prepared is not None  # the registry runs find_hits first
    return prepared.to_dict()


def _revisions(v: ReadView, frame_id: str, before: int | None, limit: int) -> dict[str, Any]:
    from service.reads import history

    entries = history(v, frame_id)
    if before is not None:
        entries = [e for e in entries if e["version"] < before]
    page = entries[-limit:][::-1]
    for e in page:
        rec = v.txlog(e["version"]) or {}
        e.update(
            agent=_agent(v, rec) if rec else "unknown",
            client_id=rec.get("client_id"),
            time=rec.get("time"),
            tick=rec.get("tick"),
            text=(rec.get("text") or "")[:2000],
        )
    return {
        "frame": frame_id,
        "version": v.meta().version,
        "revisions": page,
        "more": len(entries) > limit,
    }


def revisions(
    ctx: Context, frame_id: str, *, before: int | None = None, limit: int = 50
) -> dict[str, Any]:
    """A frame's history (:meth:`~service.context.Context.history`), newest first, below
    version *before*, at most *limit*, each entry with who wrote it (``agent``,
    ``client_id``), when (``time``, ``tick``) and the transaction's ``text``:
    ``{"frame", "version", "revisions", "more"}``. NotFound for an unknown frame."""
    if not 1 <= limit <= MAX_TX_PAGE:
        raise OutOfRange(f"limit must be between 1 and {MAX_TX_PAGE}, not {limit}")
    return ctx.backend.read(lambda v: _revisions(v, frame_id, before, limit))


INSPECT_VIEWS = ("diff", "graph", "revisions", "transactions")
"""The views :func:`inspect` answers."""


def int_arg(args: dict[str, Any], name: str, default: int | None) -> int | None:
    """The integer argument *name* of a remote view's *args* (*default* when absent);
    ``bad_argument`` for anything else (a bool too)."""
    value = args.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"{name} must be an integer", code="bad_argument")
    return value


def inspect(ctx: Context, view: Text, args: dict[str, Any]) -> dict[str, Any]:
    """One of :data:`INSPECT_VIEWS` with its arguments as a dict (what a remote caller
    sends); ``bad_argument`` for an unknown view or argument."""
    allowed = {
        "graph": {"center", "version", "radius", "limit"},
        "transactions": {"after", "before", "limit"},
        "diff": {"frame", "a", "b"},
        "revisions": {"frame", "before", "limit"},
    }
    if view not in allowed:
        raise RequestError(f"no inspector view {view[:40]!r}", code="bad_argument")
    extra = set(args) - allowed[view]
    if extra:
        raise RequestError(f"unknown argument {sorted(extra)[0][:40]!r}", code="bad_argument")
    if view == "graph":
        center = args.get("center")
        if center is not None and not isinstance(center, str):
            raise RequestError("center must be a frame id", code="bad_argument")
        return graph(
            ctx,
            center=center,
            version=int_arg(args, "version", None),
            radius=int_arg(args, "radius", 2) or 0,
            limit=int_arg(args, "limit", DEFAULT_GRAPH_NODES) or 0,
        )
    if view == "transactions":
        return transactions(
            ctx,
            after=int_arg(args, "after", None),
            before=int_arg(args, "before", None),
            limit=int_arg(args, "limit", 50) or 0,
        )
    frame_id = args.get("frame")
    if not isinstance(frame_id, str):
        raise RequestError("name a frame", code="bad_argument")
    if view == "revisions":
        return revisions(
            ctx,
            frame_id,
            before=int_arg(args, "before", None),
            limit=int_arg(args, "limit", 50) or 0,
        )
    a, b = int_arg(args, "a", None), int_arg(args, "b", None)
    if a is None or b is None:
        raise RequestError("a diff needs frame, a and b", code="bad_argument")
    return diff(ctx, frame_id, a, b)
