"""Epoch certificates: the directory's Ed25519 signature of one epoch of one context (pure).

Fence, seal, install and promotion change who may write a replicated context, so a
member takes an epoch only with a certificate the context directory signed with a
key of its own (:func:`storage.keys.directory_signing_key`), checked against the
directory's public keys (:func:`storage.keys.directory_public_keys`); the functions
that read those keys are :mod:`storage.replication.epochs`. Members hold public keys
only: a process that reads every replication key still cannot make one.

A certificate says *what* it allows, not just the epoch: it is the msgpack list
``[SCHEME, kid, purpose, member, signature]``, the signature covering
``SCHEME``, the context, the epoch, the purpose and the member
(:func:`statement`). Purposes:

* ``epoch`` — "*member* is the primary of the context at this epoch": kept in the
  directory's entry (``ContextEntry.epoch_signature``, public), taken by ``install``
  (a snapshot sent at that epoch), ``fence`` and by ``become_primary`` only on *member*;
* ``fence`` — "fence at this epoch" (*member* empty): the supervisor's fence before it
  knows which follower it promotes;
* ``seal`` — "*member* seals for promotion at this epoch": made for the chosen follower
  only and never published, so the public certificate cannot seal (disable) a follower.

A certificate of the retired scheme (an HMAC under the shared replication key, 32
bytes) is refused with :data:`RETIRED_MESSAGE`. Every refusal is a
:class:`~protocol.errors.WireError` with code ``bad_signature`` (``bad_argument`` for an
epoch that is not an integer >= 0) and changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgpack
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from protocol import capabilities
from protocol.errors import RequestError, WireError

SCHEME = "morphz-epoch/1"
"""The first item of every certificate and of every signed statement."""
PURPOSES = ("epoch", "fence", "seal")
BAD_SIGNATURE = "bad_signature"
MAX_CERT_BYTES = 1024
RETIRED_MESSAGE = (
    "this epoch carries a MAC under the shared replication key (the retired scheme: any"
    " node holding that key could forge it); epochs are signed by the directory's own"
    " Ed25519 key now: restart the directory so it re-signs its entries, and give every"
    " node its public key (MORPHZ_DIRECTORY_PUBLIC_KEYS; docs/cluster.md, 'Epoch signatures')"
)


def _pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)  # type: ignore[no-any-return]


def statement(context: str, epoch: int, purpose: str, member: str) -> bytes:
    """The bytes a certificate's signature covers."""
    return _pack([SCHEME, context, epoch, purpose, member])


def check_number(epoch: Any) -> int:
    """*epoch* if it is an integer >= 0; WireError ``bad_argument`` otherwise."""
    if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
        raise WireError("an epoch is an integer >= 0", code="bad_argument")
    return epoch


def sign(seed: bytes, context: str, epoch: int, purpose: str = "epoch", member: str = "") -> bytes:
    """The certificate of *purpose* at *epoch* of *context* for *member*, signed with the
    directory's signing key *seed* (an Ed25519 seed)."""
    if purpose not in PURPOSES:
        raise WireError(f"an epoch certificate's purpose is one of {PURPOSES}", code="bad_argument")
    key = Ed25519PrivateKey.from_private_bytes(seed)
    kid = capabilities.key_id(capabilities.public_key(seed))
    signature = key.sign(statement(context, check_number(epoch), purpose, member))
    return _pack([SCHEME, kid, purpose, member, signature])


def check(
    keys: Mapping[str, bytes],
    cert: Any,
    context: str,
    epoch: Any,
    accept: tuple[str, ...],
    member: str | None = None,
) -> tuple[int, str, str]:
    """``(epoch, purpose, member)`` of *cert* once it is the directory's signature (under one
    of *keys*, key id -> raw public key) of *epoch* of *context* for one of the purposes
    *accept*, and, when *member* is given, for that member; WireError ``bad_signature``
    otherwise (see the module doc)."""
    epoch = check_number(epoch)
    if isinstance(cert, (bytes, bytearray)) and len(cert) == 32:
        raise WireError(RETIRED_MESSAGE, code=BAD_SIGNATURE)
    if not isinstance(cert, (bytes, bytearray)) or not 0 < len(cert) <= MAX_CERT_BYTES:
        raise WireError(
            "no epoch certificate of the directory (expected bytes)", code=BAD_SIGNATURE
        )
    try:
        doc = msgpack.unpackb(bytes(cert), raw=False, use_list=True, max_bin_len=MAX_CERT_BYTES)
    except (ValueError, TypeError, msgpack.UnpackException) as e:
        raise WireError(
            f"malformed epoch certificate: {type(e).__name__}", code=BAD_SIGNATURE
        ) from e
    if (
        not isinstance(doc, list)
        or len(doc) != 5
        or doc[0] != SCHEME
        or not all(isinstance(v, str) for v in doc[1:4])
        or not isinstance(doc[4], bytes)
    ):
        raise WireError(f"not an epoch certificate of scheme {SCHEME}", code=BAD_SIGNATURE)
    _, kid, purpose, signed_for, signature = doc
    if purpose not in accept:
        raise WireError(
            f"a {purpose!r} certificate does not allow this (needs one of {accept})",
            code=BAD_SIGNATURE,
        )
    if member is not None and signed_for != member:
        raise WireError(
            f"the epoch certificate is for member {signed_for[:80]!r}, not {member[:80]!r}",
            code=BAD_SIGNATURE,
        )
    public = keys.get(kid)
    if public is None:
        raise WireError(
            f"the epoch certificate is signed by key {kid[:20]!r}, not one of the directory"
            f" public keys this node holds ({sorted(keys)})",
            code=BAD_SIGNATURE,
        )
    try:
        Ed25519PublicKey.from_public_bytes(public).verify(
            signature, statement(context, epoch, purpose, signed_for)
        )
    except (ValueError, InvalidSignature) as e:
        raise WireError(
            f"the directory's signature of epoch {epoch} of context {context[:80]!r} does not"
            " verify (forged, or made for another epoch or context)",
            code=BAD_SIGNATURE,
        ) from e
    return epoch, purpose, signed_for


RECORD_SCHEME = b"morphz-directory-record/1"
"""The first line of every signed record the directory keeps in Ray's GCS."""


def _record_text(namespace: str, key: str, value: str) -> bytes:
    return b"\n".join((RECORD_SCHEME, namespace.encode(), key.encode(), value.encode()))


def sign_record(seed: bytes, namespace: str, key: str, value: str) -> bytes:
    """*value* of the directory's *key* as kept in the GCS: the scheme, the Ed25519
    signature (hex) of the namespace, key and value under the signing key *seed*, then the
    value."""
    signature = Ed25519PrivateKey.from_private_bytes(seed).sign(_record_text(namespace, key, value))
    return RECORD_SCHEME + b" " + signature.hex().encode() + b"\n" + value.encode()


def open_record(public: list[bytes], namespace: str, key: str, raw: bytes) -> str:
    """The value of a record :func:`sign_record` made, once its signature verifies under
    one of the keys *public*; RequestError ``bad_signature`` otherwise (unsigned, forged,
    moved to another key)."""
    head, _, body = bytes(raw).partition(b"\n")
    scheme, _, signature = head.partition(b" ")
    if scheme != RECORD_SCHEME:
        raise RequestError(
            f"the directory's record {key!r} is not signed (written before records were"
            " signed, or by another process)",
            code=BAD_SIGNATURE,
        )
    try:
        value = body.decode()
        text, sig = _record_text(namespace, key, value), bytes.fromhex(signature.decode("ascii"))
    except (ValueError, UnicodeDecodeError) as e:
        raise RequestError(
            f"the directory's record {key!r} is malformed", code=BAD_SIGNATURE
        ) from e
    for one in public:
        try:
            Ed25519PublicKey.from_public_bytes(one).verify(sig, text)
            return value
        except (ValueError, InvalidSignature):
            continue
    raise RequestError(
        f"the directory's record {key!r} does not carry its signature (forged, or of"
        " another directory key)",
        code=BAD_SIGNATURE,
    )


__all__ = [
    "BAD_SIGNATURE",
    "PURPOSES",
    "RECORD_SCHEME",
    "RETIRED_MESSAGE",
    "SCHEME",
    "check",
    "check_number",
    "open_record",
    "sign",
    "sign_record",
    "statement",
]
