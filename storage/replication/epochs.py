"""Epoch certificates under this node's keys (:mod:`protocol.epochs` holds the rules).

:func:`sign_epoch` is the directory's (it reads the signing key,
:func:`storage.keys.directory_signing_key`); :func:`check_epoch` is every member's (it
reads only the directory's public keys, :func:`storage.keys.directory_public_keys`).
"""

from __future__ import annotations

from typing import Any

from protocol.epochs import (
    BAD_SIGNATURE,
    PURPOSES,
    RETIRED_MESSAGE,
    SCHEME,
    check,
    check_number,
    sign,
    statement,
)
from protocol.errors import RequestError, WireError


def check_epoch(
    context: str, epoch: Any, cert: Any, accept: tuple[str, ...], member: str | None = None
) -> int:
    """*epoch* once *cert* is the directory's certificate of it for *context* (:func:`check`
    under this node's directory public keys, :func:`storage.keys.directory_public_keys`)."""
    from storage.keys import directory_public_keys

    check_number(epoch)
    try:
        keys = directory_public_keys()
    except RequestError as e:
        raise WireError(e.message, code=BAD_SIGNATURE) from e
    return check(keys, cert, context, epoch, accept, member)[0]


def sign_epoch(context: str, epoch: int, purpose: str = "epoch", member: str = "") -> bytes:
    """The directory's certificate (:func:`sign`) under its signing key
    (:func:`storage.keys.directory_signing_key`): the directory process only."""
    from storage.keys import directory_signing_key

    return sign(directory_signing_key(), context, epoch, purpose, member)


__all__ = [
    "BAD_SIGNATURE",
    "PURPOSES",
    "RETIRED_MESSAGE",
    "SCHEME",
    "check",
    "check_epoch",
    "sign",
    "sign_epoch",
    "statement",
]
