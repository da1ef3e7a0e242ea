"""The context directory's table of context hosts, and placing contexts on them.

Each context host (:mod:`actors.server.hosting`) reports its load to its
namespace's directory every tick (``report_host``); the directory keeps the
latest report of each host in memory only — a restarted directory has a full
table again one tick later. :meth:`HostTable.place_hosted` places a new context
on the host :func:`~actors.cluster.placement.choose_host` picks and records it
like any placed context: its entry's primary is the host's actor
(``host:<name>``), its store root the host's, so :func:`~actors.client.lookup.lookup`
and every handle reach it through that host, which activates it on its next call.

A hosted context moves between the hosts of one node that serve the same store
root (its store stays where it is): :meth:`HostTable.rehost` when its host no
longer runs or is full and it is idle there (a handle asks, on ``host_full`` or a
host gone for good), :meth:`HostTable.move_hosted` on request, and
:meth:`HostTable.rebalance` moves idle contexts off full hosts. The old host
releases it first (it answers ``context_moved`` from then on, so handles ask the
directory again), the new one adopts it, then the entry names the new host; it is
activated there by its next call.

A mixin of :class:`~actors.cluster.directory.DirectoryActor`, kept in its own module.
"""

from __future__ import annotations

import time
from typing import Any

from actors.client.joining import ray_module
from actors.client.names import ContextEntry, Member, is_host
from actors.client.nodes import alive_nodes
from actors.client.replies import failed, ok
from actors.cluster.leadership import leading
from actors.cluster.placement import POLICY_SPREAD, check_policy, choose_host
from protocol.capabilities import OPERATIONS
from protocol.errors import MorphzError, NotFound, RequestError
from storage import check_context_name

HOST_STALE = 10.0
"""Seconds after its last report at which a host no longer counts for placement."""

__all__ = ["HOST_STALE", "HostTable"]


class HostTable:
    """The directory's host reports and hosted placement (mixed into the directory actor,
    which provides ``entries``, ``_guard``, ``_entry`` and ``_save_entry``)."""

    entries: dict[str, ContextEntry]
    namespace: str
    down: set[str]
    _hosts: dict[str, tuple[float, dict[str, Any]]]

    def _host_table(self) -> dict[str, tuple[float, dict[str, Any]]]:
        table = getattr(self, "_hosts", None)
        if table is None:
            table = self._hosts = {}
        return table

    @leading
    async def report_host(self, report: dict[str, Any], capability: Any = None) -> bytes:
        """Record a host's load report (its ``actor`` name keys it). A closed directory takes
        it only with the operator's admin capability (the one the host was started with):
        a forged report could steer placements to an actor of the forger's."""
        if not isinstance(report, dict) or not isinstance(report.get("actor"), str):
            return failed(
                RequestError("a host report is a dict with its actor", code="bad_argument")
            )
        if not is_host(report["actor"]) or len(report) > 64:
            return failed(RequestError("not a context host's report", code="bad_argument"))
        try:
            self._admin(capability, "*", "report_host")  # type: ignore[attr-defined]
        except MorphzError as e:
            return failed(e)
        self._host_table()[report["actor"]] = (time.monotonic(), report)
        return ok(None)

    def _fresh_hosts(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        return [r for seen, r in self._host_table().values() if now - seen <= HOST_STALE]

    def _assigned(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for entry in self.entries.values():
            actor = entry.primary.actor
            if is_host(actor):
                counts[actor] = counts.get(actor, 0) + 1
        return counts

    @leading
    async def hosts(self) -> bytes:
        """The hosts that reported recently, each with ``placed`` (contexts the directory
        has placed on it), by actor name."""
        assigned = self._assigned()
        return ok(
            [
                {**r, "placed": assigned.get(r["actor"], 0)}
                for r in sorted(self._fresh_hosts(), key=lambda r: r["actor"])
            ]
        )

    @leading
    async def place_hosted(
        self, name: str, policy: str = POLICY_SPREAD, capability: Any = None
    ) -> bytes:
        """The entry of *name*: the existing one, else a new one on a context host."""
        try:
            async with self._guard():  # type: ignore[attr-defined]
                name = check_context_name(name)
                if name in self.entries:
                    return ok(self.entries[name].model_dump())
                tenant = self._placer(capability, name, "place_hosted")  # type: ignore[attr-defined]
                policy = check_policy(policy)
                live = {n["node_id"]: n["resources"] for n in alive_nodes()
                        if n["node_id"] not in self.down}  # fmt: skip
                host = choose_host(policy, self._fresh_hosts(), self._assigned(), live)
                entry = ContextEntry(
                    name=name,
                    epoch=0,
                    follower_count=0,
                    acks=0,
                    primary=Member(
                        node_id=str(host["node_id"]),
                        actor=str(host["actor"]),
                        store_dir=str(host["store_dir"]),
                    ),
                    followers=(),
                    policy=policy,
                    tenant=tenant,
                )
                return ok(self._save_entry(entry).model_dump())  # type: ignore[attr-defined]
        except MorphzError as e:
            return failed(e)

    # -- moving hosted contexts between the hosts of a node ----------------------------

    def _host(self, actor: str) -> Any | None:
        """The running host *actor* of this namespace, or None."""
        try:
            return ray_module().get_actor(actor, namespace=self.namespace)
        except ValueError:
            return None

    async def _move(
        self, entry: ContextEntry, *, idle_only: bool, to: str | None = None
    ) -> ContextEntry:
        """Move the hosted *entry* to host *to* (else the one :func:`choose_host` picks among
        the others on its node serving its store root): released by its host (if running;
        with *idle_only* only when idle there, else the entry is answered unchanged),
        adopted by the new one, then recorded."""
        old = entry.primary
        others = [
            r
            for r in self._fresh_hosts()
            if r["node_id"] == old.node_id
            and r["store_dir"] == old.store_dir
            and r["actor"] != old.actor
            and (to is None or r["actor"] == to)
        ]
        live = {n["node_id"]: n["resources"] for n in alive_nodes()}
        if to is not None and not others:
            raise NotFound(f"no running host {to!r} serving {old.store_dir} on node {old.node_id}")
        chosen = choose_host(f"node:{old.node_id}", others, self._assigned(), live)
        new = self._host(str(chosen["actor"]))
        if new is None:
            raise RequestError(f"context host {chosen['actor']!r} is gone", code="no_host")
        current = self._host(old.actor)
        if current is not None:
            released = await current.release.remote(entry.name, idle_only)
            if idle_only and not released:  # active there: it stays
                return entry
        await new.adopt.remote(entry.name)
        moved = entry.model_copy(
            update={
                "primary": Member(
                    node_id=old.node_id, actor=str(chosen["actor"]), store_dir=old.store_dir
                )
            }
        )
        return self._save_entry(moved)  # type: ignore[attr-defined, no-any-return]

    @leading
    async def rehost(self, name: str, actor: str, capability: Any = None) -> bytes:
        """Move the hosted context *name* off its host *actor* when that host cannot serve
        it: it no longer runs, or it reports itself full and *name* is idle there. The
        entry, moved or as it is (*actor* is not its host any more, or can serve it);
        ``no_host`` when no other host of its node and store root has room. A closed
        directory asks for a capability granting any operation on *name* in its tenant."""
        try:
            async with self._guard():  # type: ignore[attr-defined]
                entry = self._entry(name)  # type: ignore[attr-defined]
                self._admin(  # type: ignore[attr-defined]
                    capability, entry.name, "rehost", tenant=entry.tenant, ops=OPERATIONS
                )
                if entry.primary.actor != actor or not is_host(actor):
                    return ok(entry.model_dump())
                if self._host(actor) is None:
                    return ok((await self._move(entry, idle_only=False)).model_dump())
                seen = self._host_table().get(actor)
                if seen is None or not seen[1].get("full"):
                    return ok(entry.model_dump())
                return ok((await self._move(entry, idle_only=True)).model_dump())
        except MorphzError as e:
            return failed(e)

    @leading
    async def move_hosted(self, name: str, to: str | None = None, capability: Any = None) -> bytes:
        """Move the hosted context *name* to host *to* (an actor name; default: the host
        with the least weight among the others of its node and store root), active or
        not: its host finishes the calls in flight and closes it first."""
        try:
            async with self._guard():  # type: ignore[attr-defined]
                entry = self._entry(name)  # type: ignore[attr-defined]
                self._admin(  # type: ignore[attr-defined]
                    capability, entry.name, "move_hosted", tenant=entry.tenant
                )
                if not is_host(entry.primary.actor):
                    raise RequestError(f"context {name!r} is not hosted", code="bad_argument")
                if to is not None and (not isinstance(to, str) or not is_host(to)):
                    raise RequestError("to names a context host (host:<name>)", code="bad_argument")
                if to == entry.primary.actor:
                    return ok(entry.model_dump())
                return ok((await self._move(entry, idle_only=False, to=to)).model_dump())
        except MorphzError as e:
            return failed(e)

    @leading
    async def rebalance(self, limit: int = 100, capability: Any = None) -> bytes:
        """Move up to *limit* idle contexts off the hosts that report themselves full, each
        to the host with the least weight and room on the same node and store root: the
        names moved, by host they left."""
        try:
            async with self._guard():  # type: ignore[attr-defined]
                self._admin(capability, "*", "rebalance")  # type: ignore[attr-defined]
                if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
                    raise RequestError("limit must be an integer >= 0", code="bad_argument")
                moved: dict[str, list[str]] = {}
                for report in self._fresh_hosts():
                    actor = str(report["actor"])
                    host = self._host(actor) if report.get("full") else None
                    if host is None:
                        continue
                    placed = {n for n, e in self.entries.items() if e.primary.actor == actor}
                    active = {
                        c["name"] for c in await host.contexts.remote() if c["state"] == "active"
                    }
                    idle = sorted(placed - active)
                    for name in idle:
                        if limit <= 0:
                            break
                        try:
                            entry = await self._move(self.entries[name], idle_only=True)
                        except RequestError as e:
                            if e.code == "no_host":  # nowhere to go: none of the others either
                                break
                            raise
                        if entry.primary.actor != actor:
                            moved.setdefault(actor, []).append(name)
                            limit -= 1
                return ok(moved)
        except MorphzError as e:
            return failed(e)
