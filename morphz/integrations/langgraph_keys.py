"""Where a LangGraph item lives in a context, and which items a filter selects.

An item (namespace, key) is the frame ``root/label…/key`` (:func:`frame_id_for`):
letters, digits, ``-`` and ``_`` as they are, every other byte ``.xx``, and a label
or key too long for a frame id hashed (``.h`` and a digest), so an id reads back
to its namespace and key and a namespace prefix maps to an id prefix. The filters
are LangGraph's documented semantics: namespace match conditions, value filters
with ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``, and its namespace rules.
"""

from __future__ import annotations

import hashlib
from typing import Any

from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    SearchOp,
)

from protocol.errors import OutOfRange, RequestError
from protocol.ids import MAX_FRAME_ID

__all__ = [
    "DEFAULT_ROOT",
    "check_namespace",
    "compare",
    "escape",
    "frame_id_for",
    "hashed",
    "label_of",
    "matches",
    "namespace_part",
    "operator",
    "unescape",
]

DEFAULT_ROOT = "lg"
"""The first segment of every item's frame id unless a store names another root."""
_HASH_HEX = 16
_PLAIN_LABEL = 40  # longer escaped labels are hashed, so deep namespaces still fit
_HASHED = 2 + _HASH_HEX  # ".h" and the digest
_PLAIN = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


# -- frame ids ------------------------------------------------------------------------


def escape(text: str, what: str) -> str:
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise RequestError(f"{what} {text!r} is not valid Unicode", code="bad_key") from e
    if not data:
        return "."
    return "".join(chr(b) if b in _PLAIN else f".{b:02x}" for b in data)


def unescape(segment: str) -> str | None:
    """The label a plain segment encodes; None for a hashed one."""
    if segment == ".":
        return ""
    if segment.startswith(".h"):
        return None
    out = bytearray()
    i = 0
    while i < len(segment):
        if segment[i] == ".":
            out.append(int(segment[i + 1 : i + 3], 16))
            i += 3
        else:
            out.append(ord(segment[i]))
            i += 1
    return out.decode("utf-8")


def label_of(segment: str) -> str | None:
    """:func:`unescape`, None for a segment this store did not write."""
    try:
        return unescape(segment)
    except (ValueError, UnicodeDecodeError):
        return None


def hashed(text: str) -> str:
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=_HASH_HEX // 2)
    return ".h" + digest.hexdigest()


def namespace_part(root: str, namespace: tuple[str, ...]) -> str:
    """The frame-id prefix of *namespace*: each label escaped, or hashed when the escaped
    label is over 40 characters or would not leave room for a hashed key. Each label's
    form depends only on the labels before it, so a namespace prefix maps to an id
    prefix."""
    out = root
    for label in namespace:
        segment = escape(label, "namespace label")
        if len(segment) > _PLAIN_LABEL or len(out) + len(segment) + 2 + _HASHED > MAX_FRAME_ID:
            segment = hashed(label)
            if len(out) + 2 * (_HASHED + 1) > MAX_FRAME_ID:
                raise OutOfRange(
                    f"namespace {namespace!r} is too deep for a frame id of at most "
                    f"{MAX_FRAME_ID} characters; use fewer or shorter labels"
                )
        out += "/" + segment
    return out


def frame_id_for(namespace: tuple[str, ...], key: str, root: str = DEFAULT_ROOT) -> str:
    """The frame id of item (*namespace*, *key*) under *root*: ``root/label…/key``.

    Letters, digits, ``-`` and ``_`` stay as they are; every other byte of the UTF-8
    text is written ``.xx`` (hex), the empty string ``.``; so the id reads back to
    the namespace and key. A label or key too long for the 128-character limit is
    replaced by ``.h`` and a 16-hex-digit BLAKE2b digest (the original is kept in
    the frame's body).
    """
    if not isinstance(key, str):
        raise RequestError(f"a key is a string, not {type(key).__name__}", code="bad_key")
    prefix = namespace_part(root, namespace)
    segment = escape(key, "key")
    if len(prefix) + 1 + len(segment) > MAX_FRAME_ID:
        segment = hashed(key)
    return f"{prefix}/{segment}"


# -- filters (LangGraph's documented semantics) -------------------------------------


def matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise RequestError(f"unknown match type {condition.match_type!r}", code="bad_argument")
    return all(p == "*" or n == p for n, p in pairs)


def compare(value: Any, wanted: Any) -> bool:
    if isinstance(wanted, dict):
        if any(str(k).startswith("$") for k in wanted):
            return all(operator(value, op, arg) for op, arg in wanted.items())
        return isinstance(value, dict) and all(compare(value.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list | tuple):
        return (
            isinstance(value, list | tuple)
            and len(value) == len(wanted)
            and all(compare(a, b) for a, b in zip(value, wanted, strict=True))
        )
    return bool(value == wanted)


def operator(value: Any, op: str, arg: Any) -> bool:
    if op == "$eq":
        return bool(value == arg)
    if op == "$ne":
        return bool(value != arg)
    if op in ("$gt", "$gte", "$lt", "$lte"):
        try:
            a, b = float(value), float(arg)
        except (TypeError, ValueError):
            return False
        return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]
    raise RequestError(f"unsupported filter operator {op!r}", code="bad_argument")


def check_namespace(op: Op) -> None:
    """LangGraph's namespace rules, for ops given to ``batch`` directly (its methods check
    them first): labels are non-empty strings without ``.`` or NUL; a put's namespace is
    not empty and not rooted at ``langgraph``."""
    if isinstance(op, GetOp | PutOp):
        labels: tuple[Any, ...] = tuple(op.namespace)
    elif isinstance(op, SearchOp):
        labels = tuple(op.namespace_prefix)
    elif isinstance(op, ListNamespacesOp):
        labels = tuple(p for c in op.match_conditions or () for p in c.path)
    else:
        return
    for label in labels:
        if not isinstance(label, str) or not label or "." in label or "\x00" in label:
            raise InvalidNamespaceError(
                f"invalid namespace label {label!r}: labels are non-empty strings"
                " without '.' or NUL"
            )
    if isinstance(op, PutOp) and (not op.namespace or op.namespace[0] == "langgraph"):
        raise InvalidNamespaceError(
            f"a namespace is not empty and not rooted at 'langgraph': {tuple(op.namespace)}"
        )
