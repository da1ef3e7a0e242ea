"""Capabilities: signed grants of operations on the contexts of one tenant (pure, no I/O).

A :class:`Capability` says that *holder* (an agent or thread id) may perform
some operations (:data:`OPERATIONS`: ``read``, ``commit``, ``recall``,
``admin``) on the contexts of one *tenant* whose names match a glob, for one
*audience* (the tenant, or one ``tenant/context``), until it expires. It is
signed with **Ed25519** (``cryptography``) over a canonical JSON encoding of
every field but the signature: the private signing key stays with whoever
issues capabilities (never on the cluster), the context actors hold only
public keys, so no process of the cluster can mint a token. ``kid`` names the
signing key (rotation: a verifier holds several public keys), ``token_id``
names the token (revocation: a verifier refuses the ids it is told to). A token
expires :data:`DEFAULT_TTL` after issue unless the issuer says otherwise. The
token that travels is ``protocol.wire.pack`` of the capability's plain form.

Tokens of the retired shared-key scheme (``morphz-cap/1``, HMAC-SHA256 under a
key every actor held) are refused with :data:`RETIRED_SCHEME_MESSAGE`.

:func:`verify` decodes a token (bounded, typed errors), checks the signature,
the revocation list and the expiry, and answers the capability;
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
from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase
from typing import Any, Literal

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from protocol.errors import RequestError, WireError
from protocol.wire import pack, unpack

Operation = Literal["read", "commit", "recall", "admin"]
OPERATIONS: tuple[str, ...] = ("read", "commit", "recall", "admin")
"""The operations a grant may name."""
SIGNATURE_SCHEME = "morphz-cap/2"
"""Prefix of the signed text (Ed25519): a new encoding gets a new scheme."""
RETIRED_SCHEME_MESSAGE = (
    "this capability uses the retired shared-key scheme (morphz-cap/1), which any process"
    " holding the key could forge; issue a new one signed with the grant signing key"
    " (`morphz grant`, see docs/security.md, 'Migrating tokens')"
)
"""What a token of the retired scheme is refused with."""
DEFAULT_TTL = 24 * 3600.0
"""Seconds a token lives when its issuer names no expiry (``ttl=None`` makes one that never
expires, on purpose)."""
MAX_GRANTS = 64
MIN_KEY_BYTES = 16
SEED_BYTES = 32
"""Bytes of an Ed25519 signing key (its seed) and of a public key."""
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
    audience: str = Field(min_length=1, max_length=260)
    grants: tuple[Grant, ...] = Field(max_length=MAX_GRANTS)
    issued_by: str = Field(min_length=1, max_length=256)
    issued_at: float
    expires: float | None = None
    kid: str = Field(min_length=1, max_length=64)
    token_id: str = Field(min_length=1, max_length=64)
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
        raise RequestError(f"a package key is at least {MIN_KEY_BYTES} bytes", code="bad_grant_key")
    return key


def _signer(seed: bytes) -> Ed25519PrivateKey:
    if not isinstance(seed, bytes) or len(seed) != SEED_BYTES:
        raise RequestError(
            f"a grant signing key is {SEED_BYTES} bytes (an Ed25519 seed)", code="bad_grant_key"
        )
    return Ed25519PrivateKey.from_private_bytes(seed)


def public_key(seed: bytes) -> bytes:
    """The raw 32-byte Ed25519 public key of the signing key *seed* (what verifiers hold)."""
    return (
        _signer(seed)
        .public_key()
        .public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    )


def key_id(public: bytes) -> str:
    """The id of a public key: the first 16 hex digits of its SHA-256."""
    return hashlib.sha256(b"morphz-grant-key\0" + public).hexdigest()[:16]


def sign(cap: Capability, seed: bytes) -> str:
    """The hex Ed25519 signature of *cap*'s canonical text under the signing key *seed*."""
    return _signer(seed).sign(cap.signed_text()).hex()


def issue(
    key: bytes,
    *,
    holder: str,
    tenant: str,
    grants: Iterable[tuple[str, Iterable[str]]],
    issued_by: str,
    expires: float | None = None,
    ttl: float | None = DEFAULT_TTL,
    audience: str | None = None,
    token_id: str | None = None,
    now: float,
) -> bytes:
    """A token signed with the signing key *key* (an Ed25519 seed) for *holder*, issued at
    *now*: ``(context glob, operations)`` pairs.

    It expires at *expires*, else *ttl* seconds after *now* (``ttl=None``: never);
    *audience* is the tenant (default) or ``tenant/context``; *token_id* names it for
    revocation (default: a digest of its contents; pass a random one to tell apart
    tokens issued alike in the same second).
    """
    try:
        grant_list = tuple(Grant(context=c, ops=tuple(ops)) for c, ops in grants)  # type: ignore[arg-type]
        until = expires if expires is not None else (None if ttl is None else now + float(ttl))
        kid = key_id(public_key(key))
        draft = {
            "holder": holder,
            "tenant": tenant,
            "audience": audience if audience is not None else tenant,
            "grants": grant_list,
            "issued_by": issued_by,
            "issued_at": now,
            "expires": until,
            "kid": kid,
        }
        if token_id is None:
            token_id = hashlib.sha256(repr(sorted(draft.items())).encode()).hexdigest()[:32]
        cap = Capability(**draft, token_id=token_id)  # type: ignore[arg-type]
    except ValidationError as e:
        raise RequestError(
            f"bad capability: {e.errors()[0].get('msg')}", code="bad_argument"
        ) from e
    if audience is not None and audience not in (tenant,) and not audience.startswith(tenant + "/"):
        raise RequestError(
            "a capability's audience is its tenant or tenant/context", code="bad_argument"
        )
    return token(cap.model_copy(update={"signature": sign(cap, key)}))


def token(cap: Capability) -> bytes:
    """The wire form of a capability (signed or not: :func:`verify` decides)."""
    return pack(cap.model_dump(mode="json"))


def decode(data: Any) -> Capability:
    """The capability a token carries, unverified; PermissionDenied if it is not one (a
    token of the retired shared-key scheme: :data:`RETIRED_SCHEME_MESSAGE`)."""
    if not isinstance(data, (bytes, bytearray)) or len(data) > MAX_TOKEN_BYTES:
        raise PermissionDenied("no capability token (expected bytes)")
    try:
        doc = unpack(bytes(data))
    except WireError as e:
        raise PermissionDenied(f"malformed capability token: {type(e).__name__}") from e
    if isinstance(doc, dict) and "kid" not in doc and "signature" in doc and "holder" in doc:
        raise PermissionDenied(RETIRED_SCHEME_MESSAGE)
    try:
        return Capability.model_validate(doc)
    except ValidationError as e:
        raise PermissionDenied(f"malformed capability token: {type(e).__name__}") from e


def verify(
    data: Any,
    keys: bytes | Mapping[str, bytes],
    *,
    now: float,
    revoked: frozenset[str] | set[str] = frozenset(),
) -> Capability:
    """The capability of a token signed by one of the public *keys* (one raw key, or key id
    → raw key), not revoked (its ``token_id`` in *revoked*) and not expired at *now*;
    PermissionDenied otherwise."""
    cap = decode(data)
    ring = {key_id(keys): keys} if isinstance(keys, bytes) else dict(keys)
    public = ring.get(cap.kid)
    if public is None:
        raise PermissionDenied(f"capability signed by an unknown key {cap.kid!r}")
    try:
        signature = bytes.fromhex(cap.signature)
        Ed25519PublicKey.from_public_bytes(public).verify(signature, cap.signed_text())
    except (ValueError, InvalidSignature) as e:
        raise PermissionDenied("capability signature does not verify") from e
    if cap.token_id in revoked:
        raise PermissionDenied(f"capability {cap.token_id} was revoked")
    if cap.expires is not None and now >= cap.expires:
        raise PermissionDenied("capability expired")
    return cap


def allows(cap: Capability, tenant: str, context: str, op: str) -> bool:
    """True when *cap* grants *op* on context *context* of *tenant*, and is meant for it
    (its audience is the tenant, or this context of it)."""
    if cap.tenant != tenant or cap.audience not in (tenant, f"{tenant}/{context}"):
        return False
    return any(op in g.ops and fnmatchcase(context, g.context) for g in cap.grants)


def check(
    data: Any, keys: bytes | Mapping[str, bytes], tenant: str, context: str, op: str, *, now: float
) -> Capability:
    """Verify a token at *now* and its grant of *op* on *tenant*/*context*; PermissionDenied
    otherwise."""
    cap = verify(data, keys, now=now)
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
    "DEFAULT_TTL",
    "MAX_GRANTS",
    "RETIRED_SCHEME_MESSAGE",
    "OPERATIONS",
    "Capability",
    "Grant",
    "PermissionDenied",
    "allows",
    "check",
    "decode",
    "issue",
    "key_id",
    "public_key",
    "seal",
    "sign",
    "token",
    "unseal",
    "verify",
]
