"""What the HTTP API routes to: a :class:`Resolver` gives the handle of a context name and
verifies tokens; :class:`ActorResolver` is the one over the context actors of one store.

:func:`permission_of` names the operation a route needs (the one its context-actor method
is guarded by), so the edge (:mod:`servers.edge`) checks a token before reading a body
without a second table of permissions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from fastapi import FastAPI

from protocol import capabilities
from protocol.capabilities import Capability, PermissionDenied
from protocol.errors import MorphzError, NotFound, RequestError

if TYPE_CHECKING:
    from actors.client.handle import ContextHandle
    from actors.server.guard import Guard

__all__ = ["ActorResolver", "Resolver", "permission_of", "sees"]


class Resolver(Protocol):
    """What the app asks for the context actors it routes to."""

    @property
    def enforced(self) -> bool:
        """True if every context this resolver gives is served with capabilities enforced."""
        ...

    def handle(self, name: str) -> ContextHandle:
        """The handle of context *name* (NotFound if the store does not hold it)."""
        ...

    def contexts(self) -> list[dict[str, Any]]:
        """The contexts that can be reached: ``[{"name", "served"}]``."""
        ...

    def create(self, name: str, window: int | None, capability: bytes | None) -> ContextHandle:
        """Create context *name* and answer its handle; RequestError ``exists`` if it is there."""
        ...

    @property
    def tenant(self) -> str | None:
        """The tenant of the contexts served (None: not enforced)."""
        ...

    def verify(self, token: bytes) -> Capability:
        """*token* verified (signature, expiry, revocation); PermissionDenied otherwise."""
        ...


@dataclass
class ActorResolver:
    """Context actors of one store directory in one Ray namespace, created on first use.

    A context the store holds but no actor serves yet is opened by a new actor
    (``connect(create=False)``) pinned to *node_id* (the node whose disk holds
    the store). With *enforce*, contexts are created enforcing capabilities, of
    *tenant* and *project*; a creation over HTTP then needs a token whose
    ``admin`` grant covers the new name (checked by :mod:`protocol.capabilities`).
    """

    store_dir: str
    namespace: str
    node_id: str | None = None
    enforce: bool = False
    tenant: str | None = None
    project: str | None = None
    handles: dict[str, ContextHandle] = field(default_factory=dict)
    _guard: Guard | None = None

    @property
    def enforced(self) -> bool:
        """See :class:`Resolver`."""
        return self.enforce

    def verify(self, token: bytes) -> Capability:
        """See :class:`Resolver` (one guard of the store's keys, caching what it verified)."""
        if self._guard is None:
            from actors.server.guard import Guard

            self._guard = Guard(
                self.store_dir, "", tenant=self.tenant or "", project="", enforce=True
            )
        try:
            return self._guard.verify(token)
        except PermissionDenied:
            raise
        except MorphzError as e:
            raise PermissionDenied(f"not a capability token: {e.message}") from e

    def handle(self, name: str) -> ContextHandle:
        """See :class:`Resolver`; cached per name."""
        cached = self.handles.get(name)
        if cached is not None:
            return cached
        from actors.client.lookup import lookup
        from actors.server.connect import connect

        try:
            found = lookup(name, self.namespace, store_dir=self.store_dir)
            if self.enforce and not found.handshake()["enforce"]:
                raise RequestError(
                    f"context {name!r} is served without enforcement; this server routes"
                    " only to enforcing context actors",
                    code="scope_mismatch",
                )
        except NotFound:
            from service.search import embedder_from_env

            found = connect(
                name,
                store_dir=self.store_dir,
                node_id=self.node_id,
                create=False,
                namespace=self.namespace,
                tenant=self.tenant,
                project=self.project,
                enforce=self.enforce,  # an existing context is served enforcing too (sticky)
                embedder=embedder_from_env(),  # MORPHZ_EMBED_*: hybrid search
            )
        self.handles[name] = found
        return found

    def contexts(self) -> list[dict[str, Any]]:
        """See :class:`Resolver`."""
        from service.store import Store

        return [{"name": n, "served": n in self.handles} for n in Store(self.store_dir).contexts()]

    def create(self, name: str, window: int | None, capability: bytes | None) -> ContextHandle:
        """See :class:`Resolver`."""
        from actors.server.connect import connect
        from service.store import Store

        if Store(self.store_dir).exists(name):
            raise RequestError(f"context {name!r} exists", code="exists")
        if self.enforce:
            self._check_admin(name, capability)
        from service.search import embedder_from_env

        handle = connect(
            name,
            store_dir=self.store_dir,
            node_id=self.node_id,
            create=True,
            namespace=self.namespace,
            window=window,
            tenant=self.tenant,
            project=self.project,
            enforce=self.enforce,
            embedder=embedder_from_env(),  # MORPHZ_EMBED_*: hybrid search
        )
        self.handles[name] = handle
        return handle

    def _check_admin(self, name: str, capability: bytes | None) -> None:
        if capability is None:
            raise PermissionDenied("creating a context needs a capability")
        cap = self.verify(capability)
        if self.tenant is None or not capabilities.allows(cap, self.tenant, name, "admin"):
            raise PermissionDenied(f"the capability does not grant admin on {name!r}")


def permission_of(app: FastAPI, method: str, path: str) -> str | None:
    """The operation (``read``, ``commit``, ``recall``, ``admin``) the route of *method* *path*
    needs: the one its context-actor method is guarded by (each route is named after the
    method it calls); None when no route matches."""
    from starlette.routing import Match

    from actors.server import context_actor  # noqa: F401  (its methods fill OPERATION_OF)
    from actors.server.guard import OPERATION_OF

    scope = {"type": "http", "method": method, "path": path, "root_path": ""}
    for route in app.router.routes:
        match, _ = route.matches(scope)
        if match == Match.FULL:
            return OPERATION_OF.get(getattr(route, "name", ""), "admin")
    return None


def sees(cap: Capability, tenant: str | None, context: str) -> bool:
    """Whether *cap* grants any operation on *context*."""
    return any(
        capabilities.allows(cap, tenant or "", context, op) for op in capabilities.OPERATIONS
    )
