"""Memory governance around the context actors: scopes, the grant key, explicit sharing.

- **Scope.** Every context belongs to a tenant and a project, kept in
  ``<store_dir>/<name>/scope.json`` (written when the context is first served;
  ``enforce`` is sticky: once on, a context is always served with enforcement).
  :func:`settle_scope` refuses a later open that names another tenant or
  project (``RequestError`` code ``scope_mismatch``).
- **Grant key.** The HMAC key that signs capabilities (see
  :mod:`protocol.capabilities`): ``MORPHZ_GRANT_KEY`` (at least 16 bytes) when set,
  else ``<store_dir>/.grant-key``, created once with mode 0600. Every context
  actor of a cluster must see the same key: set the variable, or share the
  store directory.
- **Sharing.** :func:`export_frame` and :func:`import_frame` copy one frame
  from a context to another explicitly: read on the source, admin on the
  destination, a sealed package in between, an audit entry in both actors,
  and a provenance envelope in the new frame's body.

No Ray import here; the handle functions only call :class:`~actors.client.ContextHandle`.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from protocol import capabilities
from protocol.errors import RequestError
from storage import context_path

if TYPE_CHECKING:
    from actors.client import ContextHandle

KEY_ENV = "MORPHZ_GRANT_KEY"
"""Environment variable holding the cluster's grant key (text, at least 16 bytes)."""
KEY_FILE = ".grant-key"
SCOPE_FILE = "scope.json"
DEFAULT_TENANT = "default"
DEFAULT_PROJECT = "default"
MAX_SCOPE_NAME = 128


def grant_key(store_dir: str | os.PathLike[str]) -> bytes:
    """The grant key: ``$MORPHZ_GRANT_KEY``, else ``<store_dir>/.grant-key`` (made once, 0600)."""
    env = os.environ.get(KEY_ENV)
    if env:
        key = env.encode("utf-8")
        if len(key) < capabilities.MIN_KEY_BYTES:
            raise RequestError(
                f"{KEY_ENV} must hold at least {capabilities.MIN_KEY_BYTES} bytes",
                code="bad_grant_key",
            )
        return key
    path = Path(store_dir) / KEY_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
            f.flush()
            os.fsync(f.fileno())
    # Another actor may be writing it this instant: wait for 64 hex digits.
    for _ in range(100):
        text = path.read_text(encoding="ascii").strip()
        if len(text) == 64:
            return text.encode("ascii")
        import time

        time.sleep(0.01)
    raise RequestError(f"grant key file {path} is malformed", code="bad_grant_key")


def issue_capability(
    store_dir: str | os.PathLike[str],
    *,
    holder: str,
    tenant: str,
    grants: Iterable[tuple[str, Iterable[str]]],
    issued_by: str = "admin",
    expires: float | None = None,
) -> bytes:
    """A capability token signed with the store's grant key (protocol.capabilities.issue)."""
    return capabilities.issue(
        grant_key(store_dir),
        holder=holder,
        tenant=tenant,
        grants=grants,
        issued_by=issued_by,
        expires=expires,
    )


def check_scope_name(value: object, what: str) -> str:
    """*value* as a tenant or project name (*what*), or a ``bad_argument`` RequestError."""
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_SCOPE_NAME:
        raise RequestError(
            f"{what} is a string of 1 to {MAX_SCOPE_NAME} characters", code="bad_argument"
        )
    return value


def settle_scope(
    store_dir: str | os.PathLike[str],
    name: str,
    tenant: str | None,
    project: str | None,
    enforce: bool,
) -> dict[str, Any]:
    """The context's scope ``{"tenant", "project", "enforce"}``, written if new or tightened.

    A stored scope wins; naming another tenant or project raises ``scope_mismatch``.
    """
    if tenant is not None:
        check_scope_name(tenant, "tenant")
    if project is not None:
        check_scope_name(project, "project")
    path = context_path(store_dir, name) / SCOPE_FILE
    stored: dict[str, Any] | None = None
    with contextlib.suppress(FileNotFoundError):
        stored = json.loads(path.read_text(encoding="utf-8"))
    if stored is None:
        scope = {
            "tenant": tenant or DEFAULT_TENANT,
            "project": project or DEFAULT_PROJECT,
            "enforce": bool(enforce),
        }
    else:
        for field, want in (("tenant", tenant), ("project", project)):
            if want is not None and stored.get(field) != want:
                raise RequestError(
                    f"context {name!r} belongs to {field} {stored.get(field)!r}, not {want!r}",
                    code="scope_mismatch",
                )
        scope = {
            "tenant": str(stored["tenant"]),
            "project": str(stored["project"]),
            "enforce": bool(stored.get("enforce")) or bool(enforce),
        }
        if scope == stored:
            return scope
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(scope, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)
    return scope


def export_frame(src: ContextHandle, frame_id: str, cap: bytes | None) -> bytes:
    """A sealed package of frame *frame_id* of *src*; needs ``read`` on the source.

    The package holds the frame's body, its sources with a summary of each
    (frame body or event preview) and its provenance (tenant, project, context,
    version, revision, exporting holder); the source actor audits the export.
    """
    return src.with_capability(cap).export_frame(frame_id)


def import_frame(
    dst: ContextHandle, package: bytes, cap: bytes | None, *, as_id: str | None = None
) -> dict[str, Any]:
    """Derive a new frame in *dst* from an exported package; needs ``admin`` on the destination.

    The new frame (``as_id``, default ``imported/<source context>/<frame id>``)
    carries ``(provenance (from-tenant …) (from-project …) (from-context …)
    (version N) (frame X) (revision R) (sources …))`` before the original body;
    it cites nothing (the sources live in another context). Answers
    ``{"id", "receipt"}``; the destination audits the import. Importing the
    same package twice is idempotent (the client id is derived from it).
    """
    return dst.with_capability(cap).import_frame(package, as_id)


__all__ = [
    "DEFAULT_PROJECT",
    "DEFAULT_TENANT",
    "KEY_ENV",
    "check_scope_name",
    "export_frame",
    "grant_key",
    "import_frame",
    "issue_capability",
    "settle_scope",
]
