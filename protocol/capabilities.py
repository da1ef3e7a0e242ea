"""Capabilities: signed grants of operations on the contexts of one tenant (pure, no I/O).

A :class:`Capability` says that *holder* (an agent or thread id) may perform
some operations (:data:`OPERATIONS`: ``read``, ``commit``, ``recall``,
``admin``) on the contexts of one *tenant* whose names match a glob. It is
signed with HMAC-SHA256 over a canonical JSON encoding of every field but the
signature, with a key only the context actors (and whoever issues
capabilities) hold. The token that travels is ``protocol.wire.pack`` of the
capability's plain form.

:func:`verify` decodes a token (bounded, typed errors), checks the signature
in constant time and the expiry, and answers the capability;
:func:`allows` decides one (tenant, context, operation). Operations do not
imply one another: ``admin`` does not include ``read``.

Every refusal is a :class:`PermissionDenied` (``code == "permission_denied"``),
a :class:`~protocol.errors.RequestError`. No clock is read here: the caller
passes ``now`` (the issue time, the time a token is checked at).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable
from fnmatch import fnmatchcase
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from protocol.errors import RequestError, WireError
from protocol.wire import pack, unpack

Operation = Literal["read", "commit", "recall", "admin"]
OPERATIONS: tuple[str, ...] = ("read", "commit", "recall", "admin")
"""The operations a grant may name."""
SIGNATURE_SCHEME = "morphz-cap/1"
"""Prefix of the signed text: a new encoding gets a new scheme, old tokens stop verifying."""
MAX_GRANTS = 64
MIN_KEY_BYTES = 16
MAX_TOKEN_BYTES = 16 << 10


class PermissionDenied(RequestError):
    """A call without a valid capability for its context and operation; nothing changed."""

    code = "permission_denied"


class Grant(BaseModel):
    """Operations on the contexts whose names match *context* (an ``fnmatch`` glob)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    context: str = Field(min_length=1, max_length=128)
    ops: tuple[Operation, ...] = Field(min_length=1, max_length=4)


class Capability(BaseModel):
    """A signed statement: *holder* may do *grants* in *tenant* until *expires*."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    holder: str = Field(min_length=1, max_length=256)
    tenant: str = Field(min_length=1, max_length=128)
    grants: tuple[Grant, ...] = Field(max_length=MAX_GRANTS)
    issued_by: str = Field(min_length=1, max_length=256)
    issued_at: float
    expires: float | None = None
    signature: str = ""

    def signed_text(self) -> bytes:
        """The canonical bytes the signature covers: every field but the signature."""
        doc = self.model_dump(mode="json", exclude={"signature"})
        return (
            SIGNATURE_SCHEME
            + "\n"
            + json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        ).encode("ascii")


def _check_key(key: bytes) -> bytes:
    if not isinstance(key, bytes) or len(key) < MIN_KEY_BYTES:
        raise RequestError(f"a grant key is at least {MIN_KEY_BYTES} bytes", code="bad_grant_key")
    return key


def sign(cap: Capability, key: bytes) -> str:
    """The hex HMAC-SHA256 of *cap*'s canonical text under *key*."""
    return hmac.new(_check_key(key), cap.signed_text(), hashlib.sha256).hexdigest()


def issue(
    key: bytes,
    *,
    holder: str,
    tenant: str,
    grants: Iterable[tuple[str, Iterable[str]]],
    issued_by: str,
    expires: float | None = None,
    now: float,
) -> bytes:
    """A signed capability token for *holder*, issued at *now*: ``(context glob, operations)``
    pairs."""
    try:
        cap = Capability(
            holder=holder,
            tenant=tenant,
            grants=tuple(Grant(context=c, ops=tuple(ops)) for c, ops in grants),  # type: ignore[arg-type]
            issued_by=issued_by,
            issued_at=now,
            expires=expires,
        )
    except ValidationError as e:
        raise RequestError(
            f"bad capability: {e.errors()[0].get('msg')}", code="bad_argument"
        ) from e
    return token(cap.model_copy(update={"signature": sign(cap, key)}))


def token(cap: Capability) -> bytes:
    """The wire form of a capability (signed or not: :func:`verify` decides)."""
    return pack(cap.model_dump(mode="json"))


def decode(data: Any) -> Capability:
    """The capability a token carries, unverified; PermissionDenied if it is not one."""
    if not isinstance(data, (bytes, bytearray)) or len(data) > MAX_TOKEN_BYTES:
        raise PermissionDenied("no capability token (expected bytes)")
    try:
        return Capability.model_validate(unpack(bytes(data)))
    except (WireError, ValidationError) as e:
        raise PermissionDenied(f"malformed capability token: {type(e).__name__}") from e


def verify(data: Any, key: bytes, *, now: float) -> Capability:
    """The capability of a token whose signature holds and that has not expired at *now*;
    PermissionDenied otherwise."""
    cap = decode(data)
    if not hmac.compare_digest(sign(cap, key), cap.signature):
        raise PermissionDenied("capability signature does not verify")
    if cap.expires is not None and now >= cap.expires:
        raise PermissionDenied("capability expired")
    return cap


def allows(cap: Capability, tenant: str, context: str, op: str) -> bool:
    """True when *cap* grants *op* on context *context* of *tenant*."""
    if cap.tenant != tenant:
        return False
    return any(op in g.ops and fnmatchcase(context, g.context) for g in cap.grants)


def check(data: Any, key: bytes, tenant: str, context: str, op: str, *, now: float) -> Capability:
    """Verify a token at *now* and its grant of *op* on *tenant*/*context*; PermissionDenied
    otherwise."""
    cap = verify(data, key, now=now)
    if not allows(cap, tenant, context, op):
        raise PermissionDenied(
            f"{cap.holder!r} holds no {op} grant on context {context!r} of tenant {tenant!r}"
        )
    return cap


def seal(doc: Any, key: bytes) -> bytes:
    """*doc* packed with an HMAC over its packed form (an export package)."""
    body = pack(doc)
    mac = hmac.new(_check_key(key), b"morphz-package/1\n" + body, hashlib.sha256).hexdigest()
    return pack({"body": body, "mac": mac})


def unseal(data: Any, key: bytes) -> Any:
    """The document :func:`seal` packed, if its HMAC holds; PermissionDenied otherwise."""
    try:
        outer = unpack(data)
    except WireError as e:
        raise PermissionDenied(f"malformed package: {e.message}") from e
    if not isinstance(outer, dict) or set(outer) != {"body", "mac"}:
        raise PermissionDenied("malformed package")
    body, mac = outer["body"], outer["mac"]
    if not isinstance(body, bytes) or not isinstance(mac, str):
        raise PermissionDenied("malformed package")
    want = hmac.new(_check_key(key), b"morphz-package/1\n" + body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want, mac):
        raise PermissionDenied("package signature does not verify")
    try:
        return unpack(body)
    except WireError as e:
        raise PermissionDenied(f"malformed package: {e.message}") from e


__all__ = [
    "MAX_GRANTS",
    "OPERATIONS",
    "Capability",
    "Grant",
    "PermissionDenied",
    "allows",
    "check",
    "decode",
    "issue",
    "seal",
    "sign",
    "token",
    "unseal",
    "verify",
]
