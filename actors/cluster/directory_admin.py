"""Who may change the context directory: holders of an admin capability, once it has keys.

A directory with **admin keys** (Ed25519 public keys, hex, the ones tokens are signed
with) refuses every write a caller makes unless the call carries a capability signed
by one of those keys, not expired, granting ``admin``:

* on a **context's entry** (``place``/``place_hosted`` of a new name, ``remove``,
  ``promote``, ``set_primary``, ``set_followers``, ``move_hosted``): an admin of the
  entry's **tenant** (recorded from the token that placed it) with a grant covering
  its name, or the cluster's **operator**. An admin of tenant A cannot change tenant
  B's entries; an entry placed while the directory was open has no tenant and only
  the operator changes it;
* on the **cluster** (``register_node``, ``rebalance``, changing the keys, a context
  host's load report): the operator only.

The **operator** is the tenant :data:`OPERATOR` (``*``): ``morphz grant issue --tenant
'*' --grant '*:admin'``. ``rehost`` (a handle asks to move its context off a host that
is gone or full; the directory checks that it cannot serve) needs any grant on that
context in its tenant. A refusal is ``PermissionDenied`` and changes nothing; it is
logged (the directory has no store of its own to audit into).

**Where the keys come from.** The directory's environment first —
``$MORPHZ_DIRECTORY_ADMIN_KEYS``, else ``$MORPHZ_GRANT_PUBLIC_KEYS`` (a deployment that
verifies tokens closes its directory with the same keys): set in ``ray start``'s
environment they are out of reach of the Ray processes the directory serves, and the
directory is **closed from its first call**. Keys added with
:meth:`actors.cluster.directory_handle.DirectoryHandle.require_admin` (kept, signed, in the
GCS) are added to them. With no key at all the directory is open — the single-machine
default — and says so loudly (a warning at start, ``admin: "open"`` in ``ping``).

The directory's own supervisor (promotions, repairs, restores:
:mod:`actors.cluster.failover`) runs inside the directory's process and needs no
token: it runs in a context where :data:`SUPERVISING` is set, which no remote
call can set.
"""

from __future__ import annotations

import contextvars
import logging
import os
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
OPERATOR = "*"
"""The tenant of the cluster's operator: its admin grants cover every entry and the cluster."""
ADMIN_KEYS_ENV = "MORPHZ_DIRECTORY_ADMIN_KEYS"
"""Environment variable (of the directory's process) holding its admin keys (hex, commas)."""
GRANT_KEYS_ENV = "MORPHZ_GRANT_PUBLIC_KEYS"
"""The token public keys; the directory's admin keys when :data:`ADMIN_KEYS_ENV` is unset."""
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


def env_admin_keys() -> dict[str, bytes]:
    """The admin keys of the directory's environment (:data:`ADMIN_KEYS_ENV`, else
    :data:`GRANT_KEYS_ENV`); ``bad_argument`` if one is not a public key."""
    text = os.environ.get(ADMIN_KEYS_ENV) or os.environ.get(GRANT_KEYS_ENV) or ""
    return parse_keys(text.replace(",", " ").split())


def check_admin(
    keys: dict[str, bytes],
    capability: Any,
    context: str,
    method: str,
    *,
    tenant: str | None = None,
    ops: tuple[str, ...] = ("admin",),
) -> capabilities.Capability | None:
    """Refuse (``PermissionDenied``) the directory write *method* on *context* unless the
    directory has no admin keys, the supervisor makes it, or *capability* is a token signed
    by one of *keys* granting one of *ops* on *context*: in the operator's tenant, or in
    *tenant* (the entry's owner; None: the operator alone). The verified capability (None
    when none was needed)."""
    if not keys or SUPERVISING.get():
        return None
    try:
        cap = capabilities.verify(capability, keys, now=time.time())
        for owner in (OPERATOR, tenant):
            if owner is not None and cap.tenant == owner:
                if any(capabilities.allows(cap, owner, context, op) for op in ops):
                    return cap
        whose = "the operator's" if tenant is None else f"tenant {tenant!r}'s or the operator's"
        raise PermissionDenied(
            f"{cap.holder!r} of tenant {cap.tenant!r} holds no {'/'.join(ops)} grant on"
            f" {context!r} in {whose} scope"
        )
    except MorphzError as e:
        log.warning("directory %s of %r refused: %s", method, context, e.message)
        raise PermissionDenied(
            f"the directory's {method} needs an admin capability on {context!r}: {e.message}"
        ) from e


__all__ = [
    "ADMIN_KEYS",
    "ADMIN_KEYS_ENV",
    "ALL",
    "GRANT_KEYS_ENV",
    "MAX_KEYS",
    "OPERATOR",
    "SUPERVISING",
    "check_admin",
    "env_admin_keys",
    "parse_keys",
]
