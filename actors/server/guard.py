"""Memory governance around the context actors: scopes, the grant key, explicit sharing.

- **Scope.** Every context belongs to a tenant and a project, kept in
  ``<store_dir>/<name>/scope.json`` (written when the context is first served;
  ``enforce`` is sticky: once on, a context is always served with enforcement).
  :func:`settle_scope` refuses a later open that names another tenant or
  project (``RequestError`` code ``scope_mismatch``).
- **Grant keys.** Capabilities are signed with Ed25519 (see
  :mod:`protocol.capabilities`). The *signing* key stays with whoever issues
  tokens (:func:`grant_key`: ``$MORPHZ_GRANT_SIGNING_KEY_FILE``, else
  ``~/.config/morphz/grant-signing.key``), never on a cluster node; actors verify
  with *public* keys only (:func:`grant_public_keys`: ``$MORPHZ_GRANT_PUBLIC_KEYS``
  and ``<store_dir>/.grant-public-keys``) and refuse revoked token ids
  (:func:`revoke_token`, ``<store_dir>/.grant-revoked``, re-read when it changes).
  Export packages are sealed with a separate symmetric key (:func:`package_key`).
- **Sharing.** :func:`export_frame` and :func:`import_frame` copy one frame
  from a context to another explicitly: read on the source, admin on the
  destination, a sealed package in between, an audit entry in both actors,
  and a provenance envelope in the new frame's body.
- **Guard.** :class:`Guard` checks the capability of each call to a context actor
  (when the context enforces them) and makes the audit entries of denials;
  :func:`guarded` wraps an actor method with that check, writing a denial to
  the durable audit log before it is answered.

No Ray import here; the handle functions only call :class:`~actors.client.handle.ContextHandle`.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import os
import secrets
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actors.client.replies import failed
from actors.server.metrics import ContextMetrics
from protocol import capabilities
from protocol.capabilities import Capability, PermissionDenied
from protocol.errors import MorphzError, RequestError
from protocol.governance import MAX_AUDIT_TEXT, audit_entry, printable
from storage import context_path

if TYPE_CHECKING:
    from actors.client.handle import ContextHandle

SIGNING_KEY_ENV = "MORPHZ_GRANT_SIGNING_KEY_FILE"
"""Environment variable naming the grant signing key file (issuers only)."""
PUBLIC_KEYS_ENV = "MORPHZ_GRANT_PUBLIC_KEYS"
"""Environment variable holding the public keys actors verify tokens with (hex, commas)."""
PUBLIC_FILE = ".grant-public-keys"
REVOKED_FILE = ".grant-revoked"
PACKAGE_KEY_ENV = "MORPHZ_PACKAGE_KEY"
"""Environment variable holding the key that seals export packages (at least 16 bytes)."""
PACKAGE_FILE = ".package-key"
SCOPE_FILE = "scope.json"
DEFAULT_TENANT = "default"
DEFAULT_PROJECT = "default"
MAX_SCOPE_NAME = 128
MAX_VERIFIED = 1024
"""Most verified capability tokens one guard caches (expiry is still checked per call)."""


def signing_key_path() -> Path:
    """Where the grant signing key lives: ``$MORPHZ_GRANT_SIGNING_KEY_FILE``, else
    ``<key dir>/grant-signing.key`` (:func:`storage.keys.key_dir`). Keep it on the machine
    that issues tokens, never on a cluster node."""
    from storage.keys import key_dir

    named = os.environ.get(SIGNING_KEY_ENV)
    return Path(named) if named else key_dir() / "grant-signing.key"


def grant_key(store_dir: str | os.PathLike[str]) -> bytes:
    """The grant *signing* key (an Ed25519 seed), read or made once; for issuing tokens.

    Its public key is published to *store_dir* (:func:`publish_public_key`) so the
    context actors serving that store verify what it signs. The actors themselves
    never call this: they hold public keys only.
    """
    from storage.keys import key_at

    seed = key_at(signing_key_path())
    publish_public_key(store_dir, capabilities.public_key(seed))
    return seed


def publish_public_key(store_dir: str | os.PathLike[str], public: bytes) -> None:
    """Add *public* to ``<store_dir>/.grant-public-keys`` (one hex key a line) if absent."""
    path = Path(store_dir) / PUBLIC_FILE
    line = public.hex()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        if line in path.read_text(encoding="ascii").split():
            return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    with os.fdopen(fd, "a", encoding="ascii") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def grant_public_keys(store_dir: str | os.PathLike[str]) -> dict[str, bytes]:
    """The public keys tokens are verified with, by key id: ``$MORPHZ_GRANT_PUBLIC_KEYS``
    (hex keys separated by commas) and the lines of ``<store_dir>/.grant-public-keys``."""
    texts = [t for t in os.environ.get(PUBLIC_KEYS_ENV, "").replace(",", " ").split() if t]
    with contextlib.suppress(FileNotFoundError):
        texts += (Path(store_dir) / PUBLIC_FILE).read_text(encoding="ascii").split()
    out: dict[str, bytes] = {}
    for text in texts:
        try:
            raw = bytes.fromhex(text)
        except ValueError:
            continue
        if len(raw) == capabilities.SEED_BYTES:
            out[capabilities.key_id(raw)] = raw
    return out


def revoked_tokens(store_dir: str | os.PathLike[str]) -> frozenset[str]:
    """The token ids listed in ``<store_dir>/.grant-revoked`` (one a line)."""
    try:
        return frozenset((Path(store_dir) / REVOKED_FILE).read_text(encoding="utf-8").split())
    except FileNotFoundError:
        return frozenset()


def revoke_token(store_dir: str | os.PathLike[str], token_id: str) -> None:
    """Revoke the token *token_id* for every context of *store_dir* (checked on each call)."""
    if not token_id or not token_id.isalnum() or len(token_id) > 64:
        raise RequestError("a token id is 1 to 64 letters or digits", code="bad_argument")
    path = Path(store_dir) / REVOKED_FILE
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as f:
        f.write(token_id + "\n")
        f.flush()
        os.fsync(f.fileno())


def package_key(store_dir: str | os.PathLike[str]) -> bytes:
    """The key that seals export packages between actors: ``$MORPHZ_PACKAGE_KEY``, else
    ``<store_dir>/.package-key`` (made once, 0600). Every actor that exports to or imports
    from another must see the same key: set the variable, or share the store directory."""
    env = os.environ.get(PACKAGE_KEY_ENV)
    if env:
        key = env.encode("utf-8")
        if len(key) < capabilities.MIN_KEY_BYTES:
            raise RequestError(
                f"{PACKAGE_KEY_ENV} must hold at least {capabilities.MIN_KEY_BYTES} bytes",
                code="bad_grant_key",
            )
        return key
    path = Path(store_dir) / PACKAGE_FILE
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
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
        time.sleep(0.01)
    raise RequestError(f"package key file {path} is malformed", code="bad_grant_key")


def issue_capability(
    store_dir: str | os.PathLike[str],
    *,
    holder: str,
    tenant: str,
    grants: Iterable[tuple[str, Iterable[str]]],
    issued_by: str = "admin",
    expires: float | None = None,
    ttl: float | None = capabilities.DEFAULT_TTL,
    audience: str | None = None,
) -> bytes:
    """A capability token signed with the grant signing key (protocol.capabilities.issue),
    its public key published to *store_dir*; a random token id (for revocation)."""
    return capabilities.issue(
        grant_key(store_dir),
        holder=holder,
        tenant=tenant,
        grants=grants,
        issued_by=issued_by,
        expires=expires,
        ttl=ttl,
        audience=audience,
        token_id=secrets.token_hex(16),
        now=time.time(),
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


def holder_of(token: Any) -> str | None:
    """The holder a token claims (unverified: for the audit log only)."""
    try:
        return capabilities.decode(token).holder
    except MorphzError:
        return None


class Guard:
    """The capability check of one served context (tenant *tenant*, name *context*).

    Free when *enforce* is off. Otherwise a call needs a token signed with the
    grant key of *store_dir* (:func:`grant_key`), not expired, granting the
    call's operation on this context; verified tokens are cached (at most
    :data:`MAX_VERIFIED`), their expiry checked on every call.
    """

    def __init__(
        self, store_dir: str, context: str, *, tenant: str, project: str, enforce: bool
    ) -> None:
        self.store_dir = store_dir
        self.context = context
        self.tenant = tenant
        self.project = project
        self.enforce = enforce
        self.metrics = ContextMetrics("", record=False)
        """Where each denial is counted (the hosting actor's metrics, once it hosts)."""
        self._key: bytes | None = None
        self._verified: dict[bytes, Capability] = {}
        self._public: dict[str, bytes] = {}
        self._revoked: tuple[float, frozenset[str]] = (-1.0, frozenset())

    def key(self) -> bytes:
        """The package key that seals exports (read or made once)."""
        if self._key is None:
            self._key = package_key(self.store_dir)
        return self._key

    def public_keys(self, kid: str | None = None) -> dict[str, bytes]:
        """The public keys tokens verify with (read again when *kid* is not among them)."""
        if not self._public or (kid is not None and kid not in self._public):
            self._public = grant_public_keys(self.store_dir)
        return self._public

    def revoked(self) -> frozenset[str]:
        """The revoked token ids (read again when the file changed)."""
        try:
            stamp = os.stat(Path(self.store_dir) / REVOKED_FILE).st_mtime
        except FileNotFoundError:
            stamp = 0.0
        if stamp != self._revoked[0]:
            self._revoked = (stamp, revoked_tokens(self.store_dir))
        return self._revoked[1]

    def check(
        self, op: str, method: str, token: Any
    ) -> tuple[PermissionDenied, dict[str, Any]] | None:
        """None when the call may run; else the denial and its audit entry (to write
        before answering). Without a usable key every call is denied, never allowed."""
        if not self.enforce:
            return None
        cap: Capability | None = None
        try:
            cap = self.verify(token)
            if not capabilities.allows(cap, self.tenant, self.context, op):
                raise PermissionDenied(
                    f"{cap.holder!r} holds no {op} grant on context {self.context!r}"
                    f" of tenant {self.tenant!r}"
                )
        except PermissionDenied as e:
            self.metrics.denied(op)
            if cap is not None:  # a verified holder without the grant
                return e, self.entry(method, op, cap.holder, allowed=False, why=e.message)
            # An unverified token names whoever it likes: kept apart, as claimed.
            claimed = holder_of(token)
            extra = {} if claimed is None else {"claimed": printable(claimed[:MAX_AUDIT_TEXT])}
            return e, self.entry(method, op, None, allowed=False, why=e.message, **extra)
        except MorphzError as e:
            self.metrics.denied(op)
            denied = PermissionDenied(f"cannot check capabilities: {e.message}")
            return denied, self.entry(method, op, None, allowed=False, why=denied.message)
        return None

    def verify(self, token: Any) -> Capability:
        """*token* verified (signature, revocation; cached), not expired; PermissionDenied
        otherwise. Whether it grants an operation here is :func:`protocol.capabilities.allows`."""
        now = time.time()
        revoked = self.revoked()
        cap = self._verified.get(token) if isinstance(token, bytes) else None
        if cap is None:
            claimed = capabilities.decode(token)
            keys = self.public_keys(claimed.kid)
            cap = capabilities.verify(token, keys, now=now, revoked=revoked)
            if len(self._verified) >= MAX_VERIFIED:
                self._verified.pop(next(iter(self._verified)))
            self._verified[token] = cap
        elif cap.token_id in revoked:
            raise PermissionDenied(f"capability {cap.token_id} was revoked")
        elif cap.expires is not None and now >= cap.expires:
            raise PermissionDenied("capability expired")
        return cap

    def permits(self, op: str, token: Any) -> bool:
        """Whether *token* grants *op* here (always, without enforcement); no audit entry:
        for what a call answers (a receipt shows frame bodies only to a reader)."""
        if not self.enforce:
            return True
        try:
            return capabilities.allows(self.verify(token), self.tenant, self.context, op)
        except MorphzError:
            return False

    def entry(
        self,
        method: str,
        op: str,
        holder: str | None,
        *,
        allowed: bool,
        why: str,
        outcome: str | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """An audit entry of this context, made now (:func:`protocol.governance.audit_entry`)."""
        return audit_entry(
            method,
            op,
            holder=holder,
            allowed=allowed,
            why=why,
            at=time.time(),
            outcome=outcome,
            context=self.context,
            tenant=self.tenant,
            **extra,
        )


OPERATION_OF: dict[str, str] = {}
"""Each guarded method's operation (read, commit, recall, admin); filled by :func:`guarded`."""


def guarded(op: str, *, raises: bool = False) -> Callable[[Callable[..., Any]], Any]:
    """Check the call's capability for *op* before running the actor method.

    The method gains a keyword argument ``capability`` (token bytes). A denial
    is written to the durable audit table (the first few of one holder and method
    in a window before the answer, the rest in batches:
    :meth:`~actors.server.inbox.AuditBuffer.deny`), then answered as
    ``failed(PermissionDenied)``, or raised when *raises* (methods that answer
    plain values); nothing else runs. The actor offers ``guard`` (a
    :class:`Guard`), ``audit_buffer`` (an :class:`~actors.server.inbox.AuditBuffer`)
    and ``_ensure_worker()``.
    """

    def wrap(fn: Callable[..., Any]) -> Any:
        OPERATION_OF[fn.__name__] = op
        sig = inspect.signature(fn)
        wants = "capability" in sig.parameters  # the method reads the token itself
        params = list(sig.parameters.values())
        if not wants:
            params.append(
                inspect.Parameter("capability", inspect.Parameter.KEYWORD_ONLY, default=None)
            )
        method: Any
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def method(self: Any, *args: Any, capability: Any = None, **kwargs: Any) -> Any:
                self._ensure_worker()
                refused = self.guard.check(op, fn.__name__, capability)
                if refused is not None:
                    denied, entry = refused
                    # durable before the answer, within the caller's allowance (rate-limited)
                    await self.audit_buffer.deny(entry)
                    if raises:
                        raise denied
                    return failed(denied)
                if wants:
                    kwargs["capability"] = capability
                return await fn(self, *args, **kwargs)
        else:

            @functools.wraps(fn)
            def method(self: Any, *args: Any, capability: Any = None, **kwargs: Any) -> Any:
                refused = self.guard.check(op, fn.__name__, capability)
                if refused is not None:
                    self.audit_buffer.append_blocking(refused[1])
                    raise refused[0]
                return fn(self, *args, **kwargs)

        # Ray reads an actor method's signature from the innermost ``__wrapped__``:
        # drop it, so that the ``capability`` parameter stays visible.
        del method.__wrapped__
        method.__signature__ = sig.replace(parameters=params)
        return method

    return wrap


__all__ = [
    "DEFAULT_PROJECT",
    "DEFAULT_TENANT",
    "PACKAGE_KEY_ENV",
    "PUBLIC_KEYS_ENV",
    "SIGNING_KEY_ENV",
    "MAX_VERIFIED",
    "OPERATION_OF",
    "Guard",
    "check_scope_name",
    "export_frame",
    "grant_key",
    "grant_public_keys",
    "package_key",
    "publish_public_key",
    "revoke_token",
    "revoked_tokens",
    "guarded",
    "holder_of",
    "import_frame",
    "issue_capability",
    "settle_scope",
]
