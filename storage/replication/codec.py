"""The wire form of one replicated group commit (:class:`Batch`) and its codec.

A batch is what one primary write (one :meth:`~storage.backend.Backend.transact`)
did to the store, in order: the :class:`~protocol.view.Changeset` objects it
applied, the :class:`~protocol.forget.Rewrite` objects it rewrote in place, or
an outbox acknowledgement (:class:`OutboxAck`). It is tagged with the epoch
of the primary that wrote it, its sequence number (one per replicated write,
gapless from 1), the context version after it, and the primary's
*acknowledged* watermark (the highest sequence number it has acknowledged to
a client), which is what a follower may show to readers.

Encoding is msgpack through the records' own ``to_record``/``from_record`` (the
same forms the LMDB store writes), behind a format byte; decoding accepts
only that closed set of shapes and raises :class:`~protocol.errors.WireError`
for anything else, so a corrupt or hostile payload changes nothing.

What travels between actors is *sealed* (:func:`seal`): format byte
:data:`SEALED`, an HMAC-SHA256 of the whole format-1 batch (its epoch, sequence
number, version, watermark and operations) under the context's replication key
(:func:`replication_key`), then the batch. A follower opens it with
:func:`unseal` before it looks at anything else, so a batch forged by a process
without the key (an empty batch with the next sequence number, a ``seq`` that
would make the primary's real batch look like a duplicate) is refused
(``bad_mac``) and changes nothing.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgpack

from protocol.errors import WireError
from protocol.forget import Rewrite
from protocol.state import Event, Frame, Meta
from protocol.view import Changeset
from protocol.wire import ext_default, ext_hook

FORMAT = 1
"""The format byte every encoded batch starts with."""


@dataclass(frozen=True, slots=True)
class OutboxAck:
    """The primary deleted its index intents numbered *upto* and below."""

    upto: int


Op = Changeset | Rewrite | OutboxAck
"""One step of a batch, in the order the primary performed it."""


@dataclass(slots=True)
class Batch:
    """One replicated write: ``ops`` applied in order make the follower's store the primary's.

    ``seq`` numbers replicated writes from 1 without gaps; ``epoch`` is the
    primary's; ``version`` the context version after the write; ``acked`` the
    highest ``seq`` the primary had acknowledged to a client when it sent this.
    """

    epoch: int
    seq: int
    version: int
    acked: int
    ops: list[Op] = field(default_factory=list)


def _changeset(cs: Changeset) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if cs.meta is not None:
        out["meta"] = cs.meta.to_record()
    if cs.frames:
        out["frames"] = [f.to_record() for f in cs.frames]
    if cs.events:
        out["events"] = [e.to_record() for e in cs.events]
    for name in (
        "contents",
        "rel_add",
        "rel_del",
        "cites_add",
        "due_add",
        "due_del",
        "inbox_add",
        "inbox_del",
        "history",
        "audit",
    ):
        value = getattr(cs, name)
        if value:
            out[name] = [list(v) if isinstance(v, tuple) else v for v in value]
    if cs.lastmod:
        out["lastmod"] = dict(cs.lastmod)
    if cs.client is not None:
        client_id, version, digest = cs.client
        out["client"] = [client_id, version, bytes(digest)]
    for name in ("txlog", "outbox", "trace"):
        value = getattr(cs, name)
        if value is not None:
            out[name] = value
    return out


def _rewrite(rw: Rewrite) -> dict[str, Any]:
    return {
        "contents": [[seq, text] for seq, text in rw.contents],
        "history": [[fid, version, frame.to_record()] for fid, version, frame in rw.history],
        "txlog": list(rw.txlog),
    }


def encode_op(op: Op) -> bytes:
    """The msgpack form of one operation, taken when it is performed (later changes to
    the objects it names cannot reach the batch)."""
    if isinstance(op, Changeset):
        doc: list[Any] = ["apply", _changeset(op)]
    elif isinstance(op, Rewrite):
        doc = ["rewrite", _rewrite(op)]
    else:
        doc = ["outbox_ack", op.upto]
    return msgpack.packb(doc, use_bin_type=True, default=ext_default)  # type: ignore[no-any-return]


def encode_parts(epoch: int, seq: int, version: int, acked: int, ops: list[bytes]) -> bytes:
    """A batch from operations already encoded by :func:`encode_op` (the same bytes as
    :func:`encode_batch` of the decoded operations)."""
    packer = msgpack.Packer(use_bin_type=True)
    head: bytes = packer.pack_array_header(5) + b"".join(
        packer.pack(n) for n in (epoch, seq, version, acked)
    )
    tail: bytes = packer.pack_array_header(len(ops))
    return bytes([FORMAT]) + head + tail + b"".join(ops)


def encode_batch(batch: Batch) -> bytes:
    """The msgpack form of *batch* (format byte first)."""
    ops = [encode_op(op) for op in batch.ops]
    return encode_parts(batch.epoch, batch.seq, batch.version, batch.acked, ops)


def batch_header(data: bytes) -> tuple[int, int, int, int]:
    """``(epoch, seq, version, acked)`` of an encoded batch, without decoding its operations."""
    if not isinstance(data, (bytes, bytearray)) or len(data) < 2 or data[0] != FORMAT:
        raise WireError(f"not a replicated batch of format {FORMAT}")
    try:
        unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, ext_hook=ext_hook)
        unpacker.feed(bytes(data[1:]))
        if unpacker.read_array_header() != 5:
            raise WireError("a replicated batch is a list of 5 items")
        head = tuple(unpacker.unpack() for _ in range(4))
    except WireError:
        raise
    except (ValueError, TypeError, msgpack.UnpackException) as e:
        raise WireError(f"a replicated batch does not decode: {e}") from e
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in head):
        raise WireError("a replicated batch's counters are integers >= 0")
    return head[0], head[1], head[2], head[3]


def _ints(value: Any, n: int, what: str) -> tuple[Any, ...]:
    if not isinstance(value, list) or len(value) != n:
        raise WireError(f"a replicated {what} is a list of {n} items")
    return tuple(value)


def _rows(doc: dict[str, Any], name: str, width: int) -> list[tuple[Any, ...]]:
    rows = doc.get(name, [])
    if not isinstance(rows, list):
        raise WireError(f"a replicated changeset's {name} is a list")
    return [_ints(r, width, f"{name} row") for r in rows]


def _list(doc: dict[str, Any], name: str) -> list[Any]:
    value = doc.get(name, [])
    if not isinstance(value, list):
        raise WireError(f"a replicated changeset's {name} is a list")
    return value


def _record(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise WireError(f"a replicated {what} is a map")
    return value


def _int(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise WireError(f"a replicated {what} is an integer, not {type(value).__name__}")
    return value


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise WireError(f"a replicated {what} is a string, not {type(value).__name__}")
    return value


R = TypeVar("R", Meta, Frame, Event)


def _whole(cls: type[R], value: Any, what: str) -> R:
    """The record *value* holds, refused unless it is a whole one: a record missing a
    field would otherwise load with the field's default (nothing silently filled in)."""
    record = _record(value, what)
    decoded = cls.from_record(record)
    if decoded.to_record() != record:
        raise WireError(f"a replicated {what} record has missing or altered fields")
    return decoded


_CHANGESET_KEYS = frozenset(
    "meta frames events contents rel_add rel_del cites_add due_add due_del inbox_add"
    " inbox_del history audit lastmod client txlog outbox trace".split()
)


def _decode_changeset(doc: Any) -> Changeset:
    doc = _record(doc, "changeset")
    unknown = set(doc) - _CHANGESET_KEYS
    if unknown:
        raise WireError(f"a replicated changeset has unknown fields {sorted(map(str, unknown))}")
    cs = Changeset()
    if "meta" in doc:
        cs.meta = _whole(Meta, doc["meta"], "meta")
    cs.frames = [_whole(Frame, r, "frame") for r in _list(doc, "frames")]
    cs.events = [_whole(Event, r, "event") for r in _list(doc, "events")]
    cs.contents = [(_int(s, "seq"), _str(t, "text")) for s, t in _rows(doc, "contents", 2)]
    for name in ("rel_add", "rel_del"):
        rows = [tuple(_str(x, "relation") for x in r) for r in _rows(doc, name, 3)]
        setattr(cs, name, rows)
    cites = _rows(doc, "cites_add", 2)
    cs.cites_add = [(_str(s, "citing id"), _str(f, "cited id")) for s, f in cites]
    cs.due_add = [
        (_int(t, "tick"), _str(f, "frame id"), _int(g, "generation"), _int(r, "revision"))
        for t, f, g, r in _rows(doc, "due_add", 4)
    ]
    cs.due_del = [(_int(t, "tick"), _str(f, "frame id")) for t, f in _rows(doc, "due_del", 2)]
    cs.inbox_add = [_int(s, "seq") for s in _list(doc, "inbox_add")]
    cs.inbox_del = [_int(s, "seq") for s in _list(doc, "inbox_del")]
    cs.history = [(_str(f, "frame id"), _int(v, "version")) for f, v in _rows(doc, "history", 2)]
    cs.audit = [_record(r, "audit record") for r in _list(doc, "audit")]
    lastmod = _record(doc.get("lastmod", {}), "lastmod")
    cs.lastmod = {_str(k, "lastmod key"): _int(v, "version") for k, v in lastmod.items()}
    if "client" in doc:
        client_id, version, digest = _ints(doc["client"], 3, "client row")
        if not isinstance(digest, bytes):
            raise WireError("a replicated client digest is bytes")
        cs.client = (_str(client_id, "client id"), _int(version, "version"), digest)
    for name in ("txlog", "outbox", "trace"):
        if name in doc:
            setattr(cs, name, _record(doc[name], name))
    return cs


_REWRITE_KEYS = frozenset({"contents", "history", "txlog"})


def _decode_rewrite(doc: Any) -> Rewrite:
    doc = _record(doc, "rewrite")
    unknown = set(doc) - _REWRITE_KEYS
    if unknown:
        raise WireError(f"a replicated rewrite has unknown fields {sorted(map(str, unknown))}")
    history = [
        (_str(f, "frame id"), _int(v, "version"), _whole(Frame, r, "frame"))
        for f, v, r in _rows(doc, "history", 3)
    ]
    contents = [(_int(s, "seq"), _str(t, "text")) for s, t in _rows(doc, "contents", 2)]
    txlog = [_record(r, "log record") for r in _list(doc, "txlog")]
    return Rewrite(contents=contents, history=history, txlog=txlog)


def decode_batch(data: bytes) -> Batch:
    """The :class:`Batch` encoded in *data*; :class:`WireError` if it is not one."""
    if not isinstance(data, (bytes, bytearray)) or not data:
        raise WireError("a replicated batch is non-empty bytes")
    if data[0] != FORMAT:
        raise WireError(f"a replicated batch has format {data[0]}, not {FORMAT}")
    try:
        body = msgpack.unpackb(bytes(data[1:]), raw=False, strict_map_key=False, ext_hook=ext_hook)
        epoch, seq, version, acked, ops = _ints(body, 5, "batch")
        for value in (epoch, seq, version, acked):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise WireError("a replicated batch's counters are integers >= 0")
        if not isinstance(ops, list):
            raise WireError("a replicated batch's operations are a list")
        out = Batch(epoch=epoch, seq=seq, version=version, acked=acked)
        for op in ops:
            kind, payload = _ints(op, 2, "operation")
            if kind == "apply":
                out.ops.append(_decode_changeset(payload))
            elif kind == "rewrite":
                out.ops.append(_decode_rewrite(payload))
            elif kind == "outbox_ack" and type(payload) is int and payload >= 0:
                out.ops.append(OutboxAck(payload))
            else:
                raise WireError(f"unknown replicated operation {kind!r}")
        return out
    except WireError:
        raise
    except (ValueError, TypeError, KeyError, OverflowError, msgpack.UnpackException) as e:
        raise WireError(f"a replicated batch does not decode: {e}") from e


SEALED = 2
"""The format byte of a sealed batch: ``SEALED``, a 32-byte MAC, then a format-1 batch."""
MAC_BYTES = 32
MAC_LABEL = b"morphz-replication/2\0"
CONTROL_LABEL = b"morphz-replication-control/1\0"
CHAIN_START = bytes(MAC_BYTES)
"""The digest a chain of batches starts from (a store that never replicated)."""


def batch_mac(key: bytes, data: bytes, prev: bytes = CHAIN_START) -> bytes:
    """The HMAC-SHA256 of an encoded (format-1) batch under the context's replication key,
    chained to *prev*, the MAC of the batch before it: it covers every byte of the batch
    (its epoch, sequence number, watermark and operations) and the whole history before
    it, so a batch only checks out right after the batch it was written after."""
    return hmac.new(key, MAC_LABEL + bytes(prev) + data, hashlib.sha256).digest()


def seal(data: bytes, key: bytes, prev: bytes = CHAIN_START) -> bytes:
    """*data* (a format-1 batch) sealed with its MAC under *key*, chained to *prev*."""
    return bytes([SEALED]) + batch_mac(key, data, prev) + data


def opened(data: Any) -> tuple[bytes, bytes]:
    """``(mac, batch)`` of sealed *data*, unchecked (a held batch, or to read the header
    first); :class:`WireError` ``bad_mac`` if *data* is not a sealed batch at all."""
    if not isinstance(data, (bytes, bytearray)) or len(data) <= 1 + MAC_BYTES:
        raise WireError("a replicated batch must be sealed (a MAC and a batch)", code="bad_mac")
    if data[0] != SEALED:
        raise WireError(
            f"a replicated batch must be sealed (format {SEALED}), not format {data[0]}",
            code="bad_mac",
        )
    return bytes(data[1 : 1 + MAC_BYTES]), bytes(data[1 + MAC_BYTES :])


def unseal(data: Any, key: bytes, prev: bytes = CHAIN_START) -> bytes:
    """The format-1 batch inside sealed *data*, once its MAC checks out under *key* right
    after the batch whose MAC is *prev*; :class:`WireError` (code ``bad_mac``) for an
    unsealed batch, a wrong MAC, a batch of another history, or anything else: a batch
    that did not come from a holder of the key, or not in this order, changes nothing."""
    mac, inner = opened(data)
    if not hmac.compare_digest(mac, batch_mac(key, inner, prev)):
        raise WireError(
            "the replicated batch's MAC does not check out (forged, or not the batch"
            " that follows the last one held)",
            code="bad_mac",
        )
    return inner


def _field(value: int | str | bytes) -> bytes:
    if isinstance(value, bool) or not isinstance(value, (int, str, bytes)):
        raise WireError(f"a control message field is an int, str or bytes, not {value!r}")
    return msgpack.packb(value, use_bin_type=True)  # type: ignore[no-any-return]


def control_mac(key: bytes, op: str, *fields: int | str | bytes) -> bytes:
    """The MAC of the replication control message *op* (``fence``, ``seal``, ``confirm``,
    ``install``, ``promote``, ``epoch``) with its *fields*, under the replication key."""
    mac = hmac.new(key, CONTROL_LABEL + _field(op), hashlib.sha256)
    for value in fields:
        mac.update(_field(value))
    return mac.digest()


def check_control(key: bytes, mac: Any, op: str, *fields: int | str | bytes) -> None:
    """Refuse (:class:`WireError` ``bad_mac``) control message *op* unless *mac* is its MAC:
    a call from a process without the replication key changes nothing."""
    for value in fields:
        if isinstance(value, int) and not isinstance(value, bool) and value < 0:
            raise WireError(f"a {op} message's numbers are >= 0", code="bad_argument")
    if not isinstance(mac, (bytes, bytearray)) or not hmac.compare_digest(
        bytes(mac), control_mac(key, op, *fields)
    ):
        raise WireError(
            f"the {op} message carries no valid MAC under the context's replication key",
            code="bad_mac",
        )


def install_mac(key: bytes, epoch: int, data: bytes) -> bytes:
    """The MAC of a snapshot *data* sent at *epoch*."""
    return control_mac(key, "install", epoch, hashlib.sha256(data).digest())


def replication_key(name: str) -> bytes:
    """The replication key of context *name*: ``<key dir>/replication/<digest>.key``, read or
    made once (:func:`storage.keys.key_at`). Every node serving the context must hold the
    same file (share the key directory, as for the audit key: docs/security.md)."""
    from storage.keys import key_at, key_dir

    digest = hashlib.sha256(b"morphz-replication-key\0" + name.encode("utf-8")).hexdigest()
    return key_at(key_dir() / "replication" / f"{digest[:32]}.key")


MAX_DENIALS = 256
"""Denials one follower message carries at most (more are counted in the last one)."""
MAX_DENIALS_BYTES = 256 << 10
_TEXT_OR_NONE = (str, type(None))
_DENIAL_FIELDS: dict[str, type | tuple[type, ...]] = {
    "method": str,
    "op": str,
    "holder": _TEXT_OR_NONE,
    "why": str,
    "claimed": _TEXT_OR_NONE,
    "at": float,
    "count": int,
}


def seal_denials(key: bytes, follower: str, node: str, denials: list[dict[str, Any]]) -> bytes:
    """The message a follower sends its primary with the reads it denied: *denials* (each
    ``method``, ``op``, ``holder``, ``claimed``, ``why``, ``at``, ``count``), the follower's
    actor and node names, MACed under the context's replication key."""
    body: bytes = msgpack.packb([follower, node, denials[:MAX_DENIALS]], use_bin_type=True)
    return bytes([SEALED]) + control_mac(key, "denials", hashlib.sha256(body).digest()) + body


def open_denials(key: bytes, data: Any) -> tuple[str, str, list[dict[str, Any]]]:
    """``(follower, node, denials)`` of a message :func:`seal_denials` made; WireError
    (``bad_mac`` for one no member made, ``bad_argument`` for a malformed one) otherwise:
    a process without the replication key writes nothing into a context's audit log."""
    if not isinstance(data, (bytes, bytearray)) or len(data) > MAX_DENIALS_BYTES:
        raise WireError(f"a denials message is bytes, at most {MAX_DENIALS_BYTES}",
                        code="bad_argument")  # fmt: skip
    mac, body = opened(data)
    check_control(key, mac, "denials", hashlib.sha256(body).digest())
    try:
        follower, node, denials = msgpack.unpackb(body, raw=False, strict_map_key=True)
    except (ValueError, TypeError, msgpack.UnpackException) as e:
        raise WireError(f"a denials message does not decode: {e}", code="bad_argument") from e
    if not isinstance(follower, str) or not isinstance(node, str) or not isinstance(denials, list):
        raise WireError("a denials message is [follower, node, denials]", code="bad_argument")
    if len(denials) > MAX_DENIALS:
        raise WireError(f"at most {MAX_DENIALS} denials a message", code="bad_argument")
    for d in denials:
        if (
            not isinstance(d, dict)
            or set(d) != set(_DENIAL_FIELDS)
            or not all(isinstance(d[k], t) for k, t in _DENIAL_FIELDS.items())
            or isinstance(d["count"], bool)
            or d["count"] < 1
        ):
            raise WireError(f"a denial has the fields {sorted(_DENIAL_FIELDS)}",
                            code="bad_argument")  # fmt: skip
    return follower, node, denials
