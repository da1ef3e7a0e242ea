"""The msgpack wire framing of every payload (R6): :func:`pack` and :func:`unpack`.

A msgpack payload is one format-version byte (:data:`WIRE_VERSION`) followed by
one msgpack object. Decoding accepts a closed set of types only (map with
string keys, array, string, binary, integer, float, boolean, nil) and one
extension type, :data:`EXT_BIGINT`, for integers outside the 64-bit range
(body forms allow 40 digits). Payloads are bounded in size and nesting
(:data:`MAX_PAYLOAD_BYTES`, :data:`MAX_NESTING`); :func:`check_plain` is the one
check of a decoded value's types, shared with the JSON form of transactions.

Every decoder raises :class:`~protocol.errors.WireError` on any malformed,
hostile or oversized input, and no other exception.

The format-version byte changes only when a payload an existing decoder accepts
would be read differently. The forms of a transaction on the wire (its dict
form, in msgpack and in JSON) are :mod:`protocol.txwire`'s.
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgpack

from protocol.errors import WireError
from protocol.forms import MAX_INT_DIGITS, is_int_text

WIRE_VERSION = 1
"""The format-version byte that starts every msgpack payload."""

MAX_PAYLOAD_BYTES = 8 << 20
"""Largest msgpack payload or JSON text accepted or produced (8 MiB)."""

MAX_NESTING = 64
"""Deepest nesting of maps and arrays accepted by :func:`unpack` and the JSON form."""

EXT_BIGINT = 1
"""msgpack extension code of an integer outside the 64-bit range, as ASCII decimal."""

_MAX_CONTAINER = 1 << 20
_INT64_MIN = -(1 << 63)
_UINT64_END = 1 << 64
SURROGATE = re.compile(r"[\ud800-\udfff]")
"""A lone surrogate: no string of a JSON payload may hold one."""

# --- msgpack framing ----------------------------------------------------------


def ext_default(obj: Any) -> Any:
    """msgpack's ``default``: an integer beyond 64 bits (at most :data:`MAX_INT_DIGITS`
    digits) as the big-integer extension; anything else is a :class:`WireError`."""
    # msgpack calls this for integers that do not fit 64 bits (and unknown types).
    if isinstance(obj, int) and not isinstance(obj, bool):
        text = str(obj)
        if len(text.lstrip("-")) > MAX_INT_DIGITS:
            raise WireError(f"integer has more than {MAX_INT_DIGITS} digits")
        return msgpack.ExtType(EXT_BIGINT, text.encode("ascii"))
    raise WireError(f"type {type(obj).__name__} cannot be encoded")


def ext_hook(code: int, data: bytes) -> Any:
    """msgpack's ``ext_hook``: the big-integer extension back to an ``int``; any other
    extension type, or a big integer that fits 64 bits, is a :class:`WireError`."""
    if code != EXT_BIGINT:
        raise WireError(f"msgpack extension type {code} is not accepted")
    text = data.decode("ascii")
    if not is_int_text(text):
        raise WireError("malformed big integer")
    value = int(text)
    if _INT64_MIN <= value < _UINT64_END:
        raise WireError("a 64-bit integer must not be sent as a big integer")
    return value


def encode(obj: Any) -> bytes:
    """*obj* as a versioned msgpack payload, unchecked (:func:`pack` checks it first)."""
    try:
        body: bytes = msgpack.packb(obj, use_bin_type=True, default=ext_default)
    except WireError:
        raise
    except Exception as e:  # foreign encoder: every failure becomes a WireError
        raise WireError(f"cannot encode as msgpack: {e}") from e
    if len(body) + 1 > MAX_PAYLOAD_BYTES:
        raise WireError(f"payload larger than {MAX_PAYLOAD_BYTES} bytes")
    return bytes((WIRE_VERSION,)) + body


def decode(data: Any) -> Any:
    """The msgpack object of a payload, its types unchecked (:func:`unpack` checks them)."""
    if isinstance(data, bytes):
        raw = data
    elif isinstance(data, (bytearray, memoryview)):
        try:
            view = memoryview(data)
            if view.nbytes > MAX_PAYLOAD_BYTES:
                raise WireError(f"payload larger than {MAX_PAYLOAD_BYTES} bytes")
            raw = view.tobytes()
        except (ValueError, TypeError, BufferError) as e:
            raise WireError(f"unreadable buffer: {e}") from e
    else:
        raise WireError(f"a payload must be bytes, got {type(data).__name__}")
    if len(raw) > MAX_PAYLOAD_BYTES:
        raise WireError(f"payload larger than {MAX_PAYLOAD_BYTES} bytes")
    if not raw:
        raise WireError("empty payload")
    if raw[0] != WIRE_VERSION:
        raise WireError(f"unsupported wire version {raw[0]}")
    try:
        return msgpack.unpackb(
            memoryview(raw)[1:],
            raw=False,
            strict_map_key=True,
            use_list=True,
            ext_hook=ext_hook,
            max_bin_len=MAX_PAYLOAD_BYTES,
            max_str_len=MAX_PAYLOAD_BYTES,
            max_array_len=_MAX_CONTAINER,
            max_map_len=_MAX_CONTAINER,
            max_ext_len=MAX_INT_DIGITS + 1,
        )
    except WireError:
        raise
    except msgpack.ExtraData as e:
        raise WireError("trailing bytes after the msgpack object") from e
    except msgpack.StackError as e:
        raise WireError("msgpack object nests too deeply") from e
    except Exception as e:  # foreign decoder: every failure becomes a WireError
        raise WireError(f"malformed msgpack: {str(e) or type(e).__name__}") from e


def surrogate_in(values: dict[str, Any]) -> str | None:
    """The name in *values* of the first value holding a string with a lone surrogate (at
    any depth of its lists, tuples and maps, keys included), or None. Iterative: a deep
    value costs no recursion, and each container is looked at once (one holding itself
    ends)."""
    stack: list[tuple[str, Any]] = list(values.items())
    seen: set[int] = set()
    while stack:
        where, value = stack.pop()
        if isinstance(value, str):
            if not value.isascii() and SURROGATE.search(value) is not None:
                return where
        elif isinstance(value, (list, tuple, dict)):
            if id(value) in seen:
                continue
            seen.add(id(value))
            if isinstance(value, dict):
                for key, item in value.items():
                    stack.append((where, key))
                    stack.append((where, item))
            else:
                stack.extend((where, item) for item in value)
    return None


# --- JSON text ------------------------------------------------------------------


def reject_json_constant(name: str) -> Any:
    """``json.loads``'s *parse_constant*: ``NaN``, ``Infinity`` and ``-Infinity`` are not JSON."""
    raise ValueError(f"{name} is not allowed")


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``'s *object_pairs_hook*: an object naming a key twice is refused (a
    reader keeping the first and one keeping the last would read it differently)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("duplicate key in a JSON object")
    return out


def json_document(text: str | bytes | bytearray | memoryview) -> Any:
    """The value of a JSON text (str, or UTF-8 bytes) under the wire's rules.

    Refuses text over :data:`MAX_PAYLOAD_BYTES`, bytes that are not UTF-8, ``NaN`` and
    ``Infinity``, a duplicate key in an object (which a reader keeping the first and one
    keeping the last would read differently), integers over 4,300 digits and nesting
    deeper than the parser's recursion: :class:`WireError`, and no other exception. The
    types and nesting of the value are left to :func:`check_plain` or the caller's model.
    """
    if isinstance(text, (bytes, bytearray, memoryview)):
        try:
            view = memoryview(text)
            if view.nbytes > MAX_PAYLOAD_BYTES:
                raise WireError(f"JSON text larger than {MAX_PAYLOAD_BYTES} bytes")
            text = view.tobytes().decode("utf-8")
        except WireError:
            raise
        except (ValueError, TypeError, BufferError) as e:
            raise WireError(f"JSON text is not UTF-8: {e}") from e
    elif not isinstance(text, str):
        raise WireError(f"JSON text must be str or bytes, got {type(text).__name__}")
    elif len(text) > MAX_PAYLOAD_BYTES:
        raise WireError(f"JSON text larger than {MAX_PAYLOAD_BYTES} bytes")
    try:
        return json.loads(text, parse_constant=reject_json_constant, object_pairs_hook=unique_keys)
    except RecursionError as e:
        raise WireError("JSON text nests too deeply") from e
    except (ValueError, TypeError, ArithmeticError) as e:
        raise WireError(f"malformed JSON: {e}") from e


def check_plain(value: Any, depth: int, *, text_only: bool) -> None:
    """Raise unless *value* is built from the closed set of payload types.

    ``text_only`` is for JSON: no bytes, and strings may not hold lone surrogates.
    """
    if depth > MAX_NESTING:
        raise WireError(f"payload nests deeper than {MAX_NESTING} levels")
    if isinstance(value, str):
        if text_only and not value.isascii() and SURROGATE.search(value) is not None:
            raise WireError("string holds a lone surrogate")
    elif value is None or isinstance(value, (bool, int, float)):
        return
    elif isinstance(value, bytes) and not text_only:
        return
    elif isinstance(value, (list, tuple)):
        for item in value:
            check_plain(item, depth + 1, text_only=text_only)
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise WireError(f"map keys must be strings, got {type(key).__name__}")
            check_plain(key, depth + 1, text_only=text_only)
            check_plain(item, depth + 1, text_only=text_only)
    else:
        raise WireError(f"type {type(value).__name__} is not allowed in a payload")


def pack(obj: Any) -> bytes:
    """Encode a plain object as a versioned msgpack payload.

    *obj* is built from dict (string keys), list, tuple (sent as a list), str,
    bytes, int (up to 40 digits), float, bool and None, nested at most
    :data:`MAX_NESTING` deep; ``unpack(pack(obj))`` gives it back with tuples as
    lists. Anything else raises :class:`WireError`.
    """
    check_plain(obj, 0, text_only=False)
    return encode(obj)


def unpack(data: bytes | bytearray | memoryview) -> Any:
    """Decode a payload made by :func:`pack`.

    The result holds only dict (string keys), list, str, bytes, int, float,
    bool and None, nested at most :data:`MAX_NESTING` deep. Raises
    :class:`WireError` on anything else, and no other exception.
    """
    obj = decode(data)
    check_plain(obj, 0, text_only=False)
    return obj
