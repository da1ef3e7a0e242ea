"""MCP over HTTP as a resource server (the MCP authorization spec's role): bearer tokens
are Morphz capabilities, verified here and then carried by each call to the context actor.

:class:`CapabilityVerifier` is the SDK's ``TokenVerifier``: a token is valid when its
Ed25519 signature, expiry and revocation check out (the store's public keys) and it
grants some operation on the served context; which operation a call needs is the
actor's check, made with that same token (``Memory.per_caller``).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable

from mcp.server.auth.provider import AccessToken

from protocol import capabilities
from protocol.capabilities import Capability, PermissionDenied
from protocol.errors import MorphzError

__all__ = ["MAX_TOKEN_CHARS", "CapabilityVerifier", "token_bytes"]

MAX_TOKEN_CHARS = 128 << 10
"""The longest bearer token text looked at (a capability is at most 16 KiB)."""


def token_bytes(text: str) -> bytes:
    """The capability of a bearer token's text (URL-safe base64, padding optional)."""
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as e:
        raise PermissionDenied("the bearer token is not URL-safe base64") from e


class CapabilityVerifier:
    """The MCP SDK's token verifier (resource-server role) for one context: a bearer token
    is a capability (``morphz grant issue``) whose signature, expiry and revocation check
    out under *verify* and that grants some operation on *context* of *tenant*; the
    operation of each call is then checked by the context actor, with that token."""

    def __init__(self, verify: Callable[[bytes], Capability], tenant: str, context: str) -> None:
        self._verify = verify
        self.tenant = tenant
        self.context = context

    async def verify_token(self, token: str) -> AccessToken | None:
        """The access of *token*, or None (the SDK answers 401)."""
        if not 0 < len(token) <= MAX_TOKEN_CHARS:
            return None
        try:
            cap = self._verify(token_bytes(token))
        except MorphzError:
            return None
        ops = [
            op
            for op in capabilities.OPERATIONS
            if capabilities.allows(cap, self.tenant, self.context, op)
        ]
        if not ops:
            return None
        expires = None if cap.expires is None else int(cap.expires)
        return AccessToken(token=token, client_id=cap.holder, scopes=ops, expires_at=expires)
