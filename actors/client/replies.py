"""The reply envelope of the context actor: results and typed errors as msgpack.

Every context-actor method that touches the store answers with
``protocol.wire.pack(envelope)`` where the envelope is either ``{"ok": value}``
or ``{"error": {"type": "NotFound", "code": "not_found", "message": "…"}}``.
``submit`` answers with a receipt map (it has a ``status`` key) or the same
error map (``{"error": {...}}``) when the request is refused as a whole.

Errors travel as data, never as pickled exceptions: :func:`raise_error`
rebuilds the library's own class from a closed table, so a caller catching
:class:`~protocol.errors.NotFound` catches it whether the context is embedded
or behind an actor.
"""

from __future__ import annotations

from typing import Any, NoReturn

from protocol.capabilities import PermissionDenied
from protocol.errors import (
    MorphzError,
    NotFound,
    OutOfRange,
    Overloaded,
    ParseError,
    RequestError,
    StoreError,
    StoreFull,
    StoreLocked,
    TransportError,
    WireError,
)
from protocol.replies import plain
from protocol.turns import InputOverflow
from protocol.wire import pack, unpack

ERROR_TYPES: dict[str, type[MorphzError]] = {
    cls.__name__: cls
    for cls in (
        MorphzError,
        NotFound,
        OutOfRange,
        Overloaded,
        ParseError,
        PermissionDenied,
        RequestError,
        StoreError,
        StoreFull,
        StoreLocked,
        TransportError,
        WireError,
        InputOverflow,
    )
}
"""The exception classes an error map may name; anything else decodes as MorphzError.
A class outside it (a store's own ``MapFull``) is sent as its nearest ancestor here,
so a caller catching ``StoreError`` or ``TransportError`` catches it across an actor."""


def error_doc(e: MorphzError) -> dict[str, Any]:
    """The error map of *e*: its class name, stable code, message and extra fields."""
    known = next(c for c in type(e).__mro__ if c.__name__ in ERROR_TYPES)
    doc: dict[str, Any] = {"type": known.__name__, "code": e.code, "message": e.message}
    if isinstance(e, ParseError):
        doc["line"] = e.line
        doc["column"] = e.column
    return doc


def rebuild_error(doc: Any) -> MorphzError:
    """The exception an error map describes, of the same class when it is a known one."""
    if not isinstance(doc, dict):
        return WireError(f"malformed error reply: {type(doc).__name__}")
    cls = ERROR_TYPES.get(str(doc.get("type")), MorphzError)
    message = str(doc.get("message", ""))
    code = doc.get("code")
    exc = cls.__new__(cls)
    # Bypass subclass constructors (ParseError formats its message): keep the text as sent.
    MorphzError.__init__(exc, message, code=code if isinstance(code, str) else None)
    if isinstance(exc, ParseError):
        line, column = doc.get("line", 0), doc.get("column", 0)
        exc.line = line if isinstance(line, int) else 0
        exc.column = column if isinstance(column, int) else 0
    return exc


def raise_error(doc: Any) -> NoReturn:
    """Raise the exception an error map describes."""
    raise rebuild_error(doc)


def ok(value: Any) -> bytes:
    """An ``{"ok": value}`` reply; a value that cannot be packed becomes an error reply."""
    try:
        return pack({"ok": plain(value)})
    except WireError as e:
        return failed(e)


def failed(e: MorphzError) -> bytes:
    """An ``{"error": …}`` reply for *e*."""
    return pack({"error": error_doc(e)})


def open_reply(data: Any) -> Any:
    """The value inside a reply; raises the typed error it carries or a WireError."""
    doc = unpack(data)
    if not isinstance(doc, dict) or len(doc) != 1:
        raise WireError("malformed reply: expected a map with one key, 'ok' or 'error'")
    if "error" in doc:
        raise_error(doc["error"])
    if "ok" not in doc:
        raise WireError("malformed reply: expected 'ok' or 'error'")
    return doc["ok"]
