"""A page of recall, the cursor to the next one, and a page as an observation.

A :class:`RecallPage` holds at most ``max_nodes`` nodes whose JSON renderings
(:func:`node_bytes`) add up to at most ``max_bytes``. Its ``next_cursor``
binds the request (by digest) and the version of the first page, and carries
the offset of the next node; it is URL-safe base64 of a msgpack list with a
format number first and a checksum last, so a mangled cursor is refused
(``bad_cursor``) rather than misread. :func:`as_recall_observation` is the
text a page enters the context as.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict

from protocol.errors import RequestError, WireError
from protocol.recall.request import RecallRequest
from protocol.wire import pack, unpack

MAX_CURSOR_CHARS = 256
CURSOR_FORMAT = 1
"""First element of every cursor; bump when its layout changes."""
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_CHECK_BYTES = 4


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


def encode_cursor(version: int, digest: bytes, offset: int) -> str:
    """The cursor to the node at *offset* of the recall bound by *digest* at *version*."""
    payload = pack([CURSOR_FORMAT, version, digest, offset])
    check = hashlib.blake2b(payload, digest_size=_CHECK_BYTES).digest()
    return base64.urlsafe_b64encode(payload + check).decode("ascii").rstrip("=")


def decode_cursor(cursor: str) -> tuple[int, bytes, int]:
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


def node_bytes(node: dict[str, Any]) -> int:
    """The bytes *node* counts against ``max_bytes``: the length of its compact UTF-8 JSON."""
    text = _COMPACT.encode(node)
    return len(text) if text.isascii() else len(text.encode("utf-8"))


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
