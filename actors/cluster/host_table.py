"""The context directory's table of context hosts, and placing contexts on them.

Each context host (:mod:`actors.server.hosting`) reports its load to its
namespace's directory every tick (``report_host``); the directory keeps the
latest report of each host in memory only — a restarted directory has a full
table again one tick later. :meth:`HostTable.place_hosted` places a new context
on the host :func:`~actors.cluster.placement.choose_host` picks and records it
like any placed context: its entry's primary is the host's actor
(``host:<name>``), its store root the host's, so :func:`~actors.client.lookup.lookup`
and every handle reach it through that host, which activates it on its next call.

A mixin of :class:`~actors.cluster.directory.DirectoryActor`, kept in its own module.
"""

from __future__ import annotations

import time
from typing import Any

from actors.client.names import ContextEntry, Member, is_host
from actors.client.nodes import alive_nodes
from actors.client.replies import failed, ok
from actors.cluster.placement import POLICY_SPREAD, check_policy, choose_host
from protocol.errors import MorphzError, RequestError
from storage import check_context_name

HOST_STALE = 10.0
"""Seconds after its last report at which a host no longer counts for placement."""

__all__ = ["HOST_STALE", "HostTable"]


class HostTable:
    """The directory's host reports and hosted placement (mixed into the directory actor,
    which provides ``entries``, ``_guard``, ``_entry`` and ``_save_entry``)."""

    entries: dict[str, ContextEntry]
    _hosts: dict[str, tuple[float, dict[str, Any]]]

    def _host_table(self) -> dict[str, tuple[float, dict[str, Any]]]:
        table = getattr(self, "_hosts", None)
        if table is None:
            table = self._hosts = {}
        return table

    async def report_host(self, report: dict[str, Any]) -> bytes:
        """Record a host's load report (its ``actor`` name keys it)."""
        if not isinstance(report, dict) or not isinstance(report.get("actor"), str):
            return failed(
                RequestError("a host report is a dict with its actor", code="bad_argument")
            )
        if not is_host(report["actor"]) or len(report) > 64:
            return failed(RequestError("not a context host's report", code="bad_argument"))
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

    async def place_hosted(
        self, name: str, policy: str = POLICY_SPREAD, capability: Any = None
    ) -> bytes:
        """The entry of *name*: the existing one, else a new one on a context host."""
        try:
            async with self._guard():  # type: ignore[attr-defined]
                name = check_context_name(name)
                if name in self.entries:
                    return ok(self.entries[name].model_dump())
                self._admin(capability, name, "place_hosted")  # type: ignore[attr-defined]
                policy = check_policy(policy)
                live = {n["node_id"]: n["resources"] for n in alive_nodes()}
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
                )
                return ok(self._save_entry(entry).model_dump())  # type: ignore[attr-defined]
        except MorphzError as e:
            return failed(e)
