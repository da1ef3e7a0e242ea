"""Who may change the context directory: holders of an admin capability, once it has keys.

A directory with **admin keys** (Ed25519 public keys, hex, the ones
:func:`actors.server.guard.grant_public_keys` reads; set with
:meth:`actors.cluster.directory.DirectoryHandle.require_admin`, kept in the GCS
with the rest of its state) refuses every write a caller makes — ``place`` and
``place_hosted`` of a new context, ``remove``, ``promote``, ``set_primary``,
``set_followers``, ``register_node``, ``move_hosted``, ``rebalance``, a change of
the keys — unless the call
carries a capability signed by one of those keys, not expired, granting ``admin``
on the context named (``*`` for a node's root or the keys). A refusal is
``PermissionDenied`` and changes nothing; it is logged (the directory has no
store of its own to audit into). A directory without admin keys takes writes
from any caller, as before: the keys are the switch, and once set they stay
(only an admin changes them). Two calls stay open: a host's load report and
``rehost``, which any handle makes when its context's host is gone or full and
which moves nothing else (the directory checks that the host cannot serve).

The directory's own supervisor (promotions, repairs, restores:
:mod:`actors.cluster.failover`) runs inside the directory's process and needs no
token: it runs in a context where :data:`SUPERVISING` is set, which no remote
call can set.
"""

from __future__ import annotations

import contextvars
import logging
import time
from typing import Any

from protocol import capabilities
from protocol.capabilities import PermissionDenied
from protocol.errors import MorphzError, RequestError

log = logging.getLogger("morphz.directory")

ADMIN_KEYS = "conf/admin_keys"
"""The directory's KV key holding its admin keys (a comma-separated list of hex keys)."""
ALL = "*"
"""The context a write that names none (a node's root, the keys) needs ``admin`` on."""
MAX_KEYS = 16

SUPERVISING: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "morphz_directory_supervising", default=False
)
"""True inside the directory's own supervisor task (its writes need no capability)."""


def parse_keys(value: Any) -> dict[str, bytes]:
    """Key id -> raw public key of *value* (a list of hex keys); ``bad_argument`` otherwise."""
    if not isinstance(value, (list, tuple)) or len(value) > MAX_KEYS:
        raise RequestError(
            f"admin keys are a list of at most {MAX_KEYS} hex keys", code="bad_argument"
        )
    out: dict[str, bytes] = {}
    for text in value:
        try:
            raw = bytes.fromhex(text) if isinstance(text, str) else b""
        except ValueError:
            raw = b""
        if len(raw) != capabilities.SEED_BYTES:
            raise RequestError(f"not an Ed25519 public key in hex: {str(text)[:80]!r}",
                               code="bad_argument")  # fmt: skip
        out[capabilities.key_id(raw)] = raw
    return out


def check_admin(keys: dict[str, bytes], capability: Any, context: str, method: str) -> None:
    """Refuse (``PermissionDenied``) the directory write *method* on *context* unless the
    directory has no admin keys, the supervisor makes it, or *capability* is a token signed
    by one of *keys* granting ``admin`` on *context*."""
    if not keys or SUPERVISING.get():
        return
    try:
        cap = capabilities.verify(capability, keys, now=time.time())
        if not capabilities.allows(cap, cap.tenant, context, "admin"):
            raise PermissionDenied(f"{cap.holder!r} holds no admin grant on {context!r}")
    except MorphzError as e:
        log.warning("directory %s of %r refused: %s", method, context, e.message)
        raise PermissionDenied(
            f"the directory's {method} needs an admin capability on {context!r}: {e.message}"
        ) from e


__all__ = ["ADMIN_KEYS", "ALL", "MAX_KEYS", "SUPERVISING", "check_admin", "parse_keys"]
