"""A LangGraph ``BaseStore`` over a Morphz context that loses no updates.

:class:`MorphzStore` keeps each LangGraph item (namespace, key, value) as one
frame of a context — an embedded :class:`~service.context.Context` or a Ray
:class:`~actors.client.handle.ContextHandle`; both answer the same calls — and writes
it through the transaction language, so the context's conflict check decides
every write:

* a ``put`` of a key this store has read (or written) is a ``revise`` based on
  the version at which it read it: if another writer changed the frame since,
  the engine rejects it ``conflict`` and the store raises :class:`StoreConflict`
  (or, with a ``merge`` function, re-reads, merges and tries again);
* a ``put`` of a key never read is a ``derive``: it fails the same way if the
  key exists;
* a ``delete`` retires the frame (its history stays readable).

The memory of what was read is kept per execution context (thread or asyncio
task, :mod:`contextvars`), so threads sharing one store never base a write on
each other's reads. docs/langgraph.md describes the mapping and the semantics.

Where an item lives (its frame id) and which items a filter selects are
:mod:`morphz.integrations.langgraph_keys`; how an item is laid out in a body is
:mod:`morphz.integrations.langgraph_items`.

LangGraph is imported here only: ``import morphz`` does not need it (the
``morphz[langgraph]`` extra installs it).
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import math
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from morphz.integrations.langgraph_items import (
    Decoded,
    decode_item,
    fits_fields,
    has_surrogate,
    item_body,
    put_edits,
)
from morphz.integrations.langgraph_keys import (
    DEFAULT_ROOT,
    check_namespace,
    compare,
    frame_id_for,
    label_of,
    matches,
    namespace_part,
)
from protocol.errors import NotFound, OutOfRange, RequestError
from protocol.forms import MAX_STRING_CHARS, Symbol
from protocol.ids import is_frame_id
from protocol.receipts import Receipt
from protocol.replies import FrameReply
from protocol.tx import ContextTx, Derive, Restore, Retire, Revise
from service.context import Context

__all__ = ["Merge", "MorphzStore", "StoreConflict", "frame_id_for"]

Merge = Callable[[dict[str, Any] | None, dict[str, Any]], dict[str, Any]]
"""``merge(current, mine)``: the value to write when *mine* lost a race to *current*
(``None`` when the key is absent or deleted now)."""

SEARCH_LIMIT = 50
"""Most hits one query search takes from the context's index (its model-search limit)."""
_CONFLICTS = frozenset({"conflict", "frame_exists"})
_SEARCH_LOCK = threading.Lock()  # an embedded context's index is caught up by one thread at a time


class StoreConflict(RequestError):
    """A write lost a race: the key changed after the version this store read it at
    (or a create found the key existing). Nothing was written.

    ``namespace`` and ``key`` name the item, ``frame_id`` its frame,
    ``base_version`` the version the write was based on (the read), and
    ``conflicts`` the ``(id, version)`` pairs of the changes that beat it.
    """

    code = "conflict"

    def __init__(
        self,
        namespace: tuple[str, ...],
        key: str,
        frame_id: str,
        base_version: int,
        conflicts: tuple[tuple[str, int], ...],
        reason: str,
    ) -> None:
        super().__init__(
            f"{'/'.join(namespace)} {key!r}: {reason} (the write was based on version"
            f" {base_version}); read the key again and retry"
        )
        self.namespace = namespace
        self.key = key
        self.frame_id = frame_id
        self.base_version = base_version
        self.conflicts = conflicts

    def to_dict(self) -> dict[str, object]:
        return {
            **super().to_dict(),
            "namespace": list(self.namespace),
            "key": self.key,
            "frame_id": self.frame_id,
            "base_version": self.base_version,
            "conflicts": [list(c) for c in self.conflicts],
        }


@dataclass(frozen=True)
class _Seen:
    """What this store last saw of one frame: whether it existed, whether it was live
    (not deleted), the version a write is based on, and the item's creation time."""

    exists: bool
    live: bool
    version: int
    created_at: str = ""
    item: Decoded | None = None
    """The item as this store last read or wrote it (what a ``put`` edits from)."""


# -- bodies ---------------------------------------------------------------------------


_LEAVES = frozenset({str, int, bool, type(None)})
"""Types JSON carries back exactly as they are: nothing in them to check."""


def _check_json(value: Any, depth: int = 0) -> None:
    """Refuse what JSON cannot carry back exactly: non-string keys, NaN and infinities."""
    if depth > 64:
        raise RequestError("the value nests deeper than 64 levels", code="bad_value")
    children: Iterable[Any]
    if isinstance(value, Mapping):
        for k in value:
            if not isinstance(k, str):
                raise RequestError(
                    f"value keys are strings, not {type(k).__name__} ({k!r})", code="bad_value"
                )
        children = value.values()
    elif isinstance(value, list | tuple):
        children = value
    elif isinstance(value, float) and not math.isfinite(value):
        raise RequestError(f"the value holds {value!r}, which JSON cannot carry", code="bad_value")
    else:
        return
    for v in children:
        if depth < 64 and type(v) in _LEAVES:
            continue  # the common case without a call: a long list of strings stays cheap
        _check_json(v, depth + 1)


def _value_text(value: Any) -> str:
    if not isinstance(value, Mapping):
        raise RequestError(
            f"a value is a dict of JSON values, not {type(value).__name__}", code="bad_value"
        )
    _check_json(value)
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise RequestError(f"the value is not JSON: {e}", code="bad_value") from e
    if has_surrogate(text):  # lone surrogates: escape them
        text = json.dumps(value, ensure_ascii=True, allow_nan=False)
    if len(text) > MAX_STRING_CHARS:
        raise OutOfRange(
            f"the value is {len(text)} characters of JSON; at most {MAX_STRING_CHARS} fit a frame"
        )
    return text


def _body(
    namespace: tuple[str, ...], key: str, value_text: str, created: str, updated: str
) -> tuple[Any, ...]:
    """The whole-value layout (values whose keys cannot each be a field)."""
    for label in (*namespace, key):
        if has_surrogate(label):
            raise RequestError(f"{label!r} holds a lone surrogate", code="bad_key")
    head = (
        Symbol("item"),
        (Symbol("namespace"), *namespace),
        (Symbol("key"), key),
        (Symbol("created-at"), created),
        (Symbol("updated-at"), updated),
    )
    return (head, (Symbol("value"), value_text))


def _item_body(
    namespace: tuple[str, ...], key: str, value: dict[str, Any], text: str, created: str, now: str
) -> tuple[Any, ...]:
    if fits_fields(value):
        _body(namespace, key, text, created, now)  # the same checks of the labels
        return item_body(namespace, key, value, created, now)
    return _body(namespace, key, text, created, now)


def _decode(frame: FrameReply) -> Decoded | None:
    """The item a frame's body holds, or None when the frame is not an item."""
    return decode_item(frame.body_forms)


def _now() -> str:
    return datetime.now(UTC).isoformat()


# -- the store ------------------------------------------------------------------------


class MorphzStore(BaseStore):
    """A LangGraph store whose writes are conditional on what this store read.

    *context* is an embedded :class:`~service.context.Context` or a Ray
    :class:`~actors.client.handle.ContextHandle`. *root* is the first segment of every
    item's frame id (a frame id, default ``lg``), so one context can hold
    several stores. *merge*, when given, resolves a lost race instead of
    raising :class:`StoreConflict`: it gets the current value (None if the key
    is gone) and the value being written, and answers the value to write; it
    is tried at most *max_attempts* times. *session* names the session that
    query searches are recorded under (a search is an observation).

    Each operation of a batch is its own transaction (a batch is not atomic).
    TTLs are not supported (``supports_ttl`` is false: a ``ttl`` raises
    ``NotImplementedError``), and ``index`` arguments are ignored: every
    item is in the context's lexical index.
    """

    supports_ttl = False

    def __init__(
        self,
        context: Any,
        *,
        root: str = DEFAULT_ROOT,
        merge: Merge | None = None,
        max_attempts: int = 100,
        session: str = "main",
    ) -> None:
        if not isinstance(root, str) or not is_frame_id(root) or len(root) > 32:
            raise RequestError(
                f"root must be a frame id of at most 32 characters, not {root!r}",
                code="bad_argument",
            )
        if merge is not None and not callable(merge):
            raise RequestError(
                "merge must be a function (current, mine) -> value", code="bad_argument"
            )
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise OutOfRange(f"max_attempts must be at least 1, not {max_attempts!r}")
        self.context = context
        self.root = root
        self.merge = merge
        self.max_attempts = max_attempts
        self.session = session
        self._embedded = isinstance(context, Context)
        self._root_depth = root.count("/") + 1
        self._seen: contextvars.ContextVar[dict[str, _Seen] | None] = contextvars.ContextVar(
            f"morphz_store_seen_{id(self):x}", default=None
        )

    # -- BaseStore ------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run *ops* in order, each as its own read or transaction; see the class."""
        seen = dict(self._seen.get() or {})
        try:
            return self._run(list(ops), seen)
        finally:
            self._seen.set(seen)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` run on a worker thread; the reads it makes are remembered in the
        calling task."""
        seen = dict(self._seen.get() or {})
        try:
            return await asyncio.to_thread(self._run, list(ops), seen)
        finally:
            self._seen.set(seen)

    def seen_version(self, namespace: tuple[str, ...], key: str) -> int | None:
        """The version the next ``put`` of this key is based on here; None if never read."""
        seen = (self._seen.get() or {}).get(frame_id_for(tuple(namespace), key, self.root))
        return None if seen is None else seen.version

    # -- operations -------------------------------------------------------------------

    def _run(self, ops: list[Op], seen: dict[str, _Seen]) -> list[Result]:
        for op in ops:
            check_namespace(op)
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(self._get(tuple(op.namespace), op.key, seen))
            elif isinstance(op, PutOp):
                if op.ttl is not None:
                    raise NotImplementedError("MorphzStore does not support TTLs")
                if op.value is None:
                    self._delete(tuple(op.namespace), op.key, seen)
                else:
                    self._put(tuple(op.namespace), op.key, op.value, seen)
                results.append(None)
            elif isinstance(op, SearchOp):
                results.append(self._search(op, seen))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            else:
                raise RequestError(
                    f"unknown store operation {type(op).__name__}", code="bad_argument"
                )
        return results

    def _read(self, fid: str, seen: dict[str, _Seen]) -> Decoded | None:
        """Read frame *fid* and remember what was seen; the live item or None."""
        while True:
            try:
                frame = self.context.frame(fid)
            except NotFound:
                snap = self.context.snapshot([fid])
                if snap.frames.get(fid) is not None:
                    continue  # created between the two reads: read it
                seen[fid] = _Seen(exists=False, live=False, version=snap.version)
                return None
            decoded = _decode(frame)
            if decoded is None:
                raise RequestError(f"frame {fid} is not a store item", code="not_an_item")
            live = frame.lifecycle == "active"
            seen[fid] = _Seen(True, live, frame.updated_version, decoded.created_at, decoded)
            return decoded if live else None

    def _get(self, namespace: tuple[str, ...], key: str, seen: dict[str, _Seen]) -> Item | None:
        fid = frame_id_for(namespace, key, self.root)
        decoded = self._read(fid, seen)
        if decoded is None:
            return None
        if (decoded.namespace, decoded.key) != (namespace, key):
            raise RequestError(
                f"frame {fid} holds another item (a digest collision)", code="not_an_item"
            )
        return decoded.item()

    def _submit(self, base: int, ops: tuple[Any, ...], reason: str) -> Receipt:
        receipt: Receipt = self.context.submit(ContextTx(base_version=base, reason=reason, ops=ops))
        return receipt

    def _put(
        self, namespace: tuple[str, ...], key: str, value: Any, seen: dict[str, _Seen]
    ) -> None:
        fid = frame_id_for(namespace, key, self.root)
        text = _value_text(value)  # a bad value is refused before anything is read or written
        for attempt in range(self.max_attempts):
            before = seen.get(fid)
            now = _now()
            ops: tuple[Any, ...]
            if before is None or not before.exists:
                base = self.context.version() if before is None else before.version
                ops = (Derive(id=fid, body=_item_body(namespace, key, value, text, now, now)),)
            elif (
                before.live
                and before.item is not None
                and before.item.keyed
                and fits_fields(dict(value))
            ):
                # Only the keys that changed: a writer of other keys does not collide.
                base = before.version
                ops = put_edits(fid, before.item, dict(value), now)
            else:
                base = before.version
                body = _item_body(namespace, key, value, text, before.created_at, now)
                revise = Revise(id=fid, body=body)
                ops = (revise,) if before.live else (Restore(ref=fid), revise)
            receipt: Receipt | None = self._submit(base, ops, "langgraph store put")
            if receipt is not None and receipt.status == "rejected" and before is not None:
                if receipt.errors[0].code == "too_old":
                    receipt = self._rebase(fid, before, ops, "langgraph store put")
            if receipt is not None and receipt.status == "committed":
                created = before.created_at if before is not None and before.exists else now
                # Edits merged into a newer revision: the next write stays based on the
                # version read, so it still collides with what changed its keys since.
                merged = any(e.outcome == "merged" for e in receipt.edits)
                written = Decoded(
                    namespace, key, dict(value), created, now, (now,), fits_fields(dict(value))
                )
                at = base if merged else receipt.version
                seen[fid] = _Seen(True, True, at, created, written)
                return
            if receipt is not None and receipt.errors[0].code not in _CONFLICTS:
                error = receipt.errors[0]
                raise RequestError(f"put {fid}: {error.message}", code=error.code)
            if self.merge is None or attempt + 1 == self.max_attempts:
                raise self._conflict(namespace, key, fid, base, receipt, seen)
            current = self._read(fid, seen)
            value = self.merge(None if current is None else dict(current.value), dict(value))
            text = _value_text(value)
        raise AssertionError("unreachable")  # pragma: no cover

    def _rebase(self, fid: str, before: _Seen, ops: tuple[Any, ...], reason: str) -> Receipt | None:
        """A write based on a read older than the history kept (``too_old``): if the frame
        has not changed since that read, base it on a fresh version; None if it has."""
        snap = self.context.snapshot([fid])
        try:
            frame = self.context.frame(fid)
        except NotFound:
            frame = None
        if frame is None and not before.exists:
            return self._submit(snap.version, ops, reason)
        if frame is not None and before.exists and frame.updated_version == before.version:
            return self._submit(snap.version, ops, reason)
        return None

    def _delete(self, namespace: tuple[str, ...], key: str, seen: dict[str, _Seen]) -> None:
        fid = frame_id_for(namespace, key, self.root)
        before = seen.get(fid)
        base = self.context.version() if before is None else before.version
        retire = (Retire(refs=(fid,)),)
        receipt: Receipt | None = self._submit(base, retire, "langgraph store delete")
        if receipt is not None and receipt.status == "rejected" and before is not None:
            if receipt.errors[0].code == "too_old":
                receipt = self._rebase(fid, before, retire, "langgraph store delete")
        if receipt is not None and receipt.status == "committed":
            created = before.created_at if before is not None else ""
            seen[fid] = _Seen(True, False, receipt.version, created)
            return
        if receipt is not None and receipt.errors[0].code == "unknown_ref":
            seen[fid] = _Seen(False, False, receipt.version)  # deletes are idempotent
            return
        if receipt is not None and receipt.errors[0].code not in _CONFLICTS:
            error = receipt.errors[0]
            raise RequestError(f"delete {fid}: {error.message}", code=error.code)
        raise self._conflict(namespace, key, fid, base, receipt, seen)

    @staticmethod
    def _conflict(
        namespace: tuple[str, ...],
        key: str,
        fid: str,
        base: int,
        receipt: Receipt | None,
        seen: dict[str, _Seen],
    ) -> StoreConflict:
        """The error of a lost race; forgets the read, so the next write reads again."""
        seen.pop(fid, None)
        if receipt is None:
            return StoreConflict(namespace, key, fid, base, (), "changed since it was read")
        conflicts = tuple((c.id, c.version) for c in receipt.conflicts)
        return StoreConflict(namespace, key, fid, base, conflicts, receipt.errors[0].message)

    def _prefix(self, namespace: tuple[str, ...]) -> str | None:
        try:
            return namespace_part(self.root, namespace) + "/"
        except OutOfRange:
            return None  # deeper than any item can be

    def _active_ids(self, prefix: str) -> list[str]:
        frames = self.context.state().frames
        return sorted(
            f["id"] for f in frames if f["id"].startswith(prefix) and f["lifecycle"] == "active"
        )

    def _search(self, op: SearchOp, seen: dict[str, _Seen]) -> list[SearchItem]:
        for name in ("limit", "offset"):
            n = getattr(op, name)
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise OutOfRange(f"{name} must be a non-negative integer, not {n!r}")
        namespace = tuple(op.namespace_prefix)
        prefix = self._prefix(namespace)
        if prefix is None or op.limit == 0:
            return []
        if op.query:
            args = {
                "query": op.query,
                "id_prefix": prefix,
                "kinds": ["frame"],
                "lifecycle": "active",
                "limit": SEARCH_LIMIT,
            }
            if self._embedded:
                with _SEARCH_LOCK:
                    ids = list(self.context.search(args, self.session).recalled)
            else:
                ids = list(self.context.search(args, self.session).recalled)
        else:
            ids = self._active_ids(prefix)
        wanted = op.offset + op.limit
        found: list[SearchItem] = []
        matched = 0
        for fid in ids:
            if not op.filter and not op.query and matched >= wanted:
                break
            decoded = self._read(fid, seen)
            if decoded is None or decoded.namespace[: len(namespace)] != namespace:
                continue
            if op.filter and not all(
                compare(decoded.value.get(k), v) for k, v in op.filter.items()
            ):
                continue
            matched += 1
            if matched > op.offset and len(found) < op.limit:
                item = decoded.item()
                found.append(
                    SearchItem(
                        namespace=item.namespace,
                        key=item.key,
                        value=item.value,
                        created_at=item.created_at,
                        updated_at=item.updated_at,
                    )
                )
        return found

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        for name in ("limit", "offset"):
            n = getattr(op, name)
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise OutOfRange(f"{name} must be a non-negative integer, not {n!r}")
        if op.max_depth is not None and (
            isinstance(op.max_depth, bool) or not isinstance(op.max_depth, int) or op.max_depth < 1
        ):
            raise OutOfRange(f"max_depth must be a positive integer, not {op.max_depth!r}")
        namespaces: set[tuple[str, ...]] = set()
        for fid in self._active_ids(self.root + "/"):
            segments = fid.split("/")[self._root_depth : -1]
            labels = [label_of(s) for s in segments]
            if all(label is not None for label in labels):
                namespace = tuple(str(label) for label in labels)
            else:  # a hashed label: the body holds the original
                decoded = _decode(self.context.frame(fid))
                if decoded is None:
                    continue
                namespace = decoded.namespace
            if not namespace:
                continue
            if all(matches(c, namespace) for c in op.match_conditions or ()):
                namespaces.add(namespace[: op.max_depth] if op.max_depth else namespace)
        return sorted(namespaces)[op.offset : op.offset + op.limit]
