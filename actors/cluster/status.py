"""The status table of a cluster's placed contexts: each context's members, where they
run, whether their nodes are alive, and how far each follower is behind its primary
(what ``morphz contexts --cluster`` prints).

Every member is asked at once and an unanswered one shows an unknown version, so
one lost node does not hold the table up. Ray is imported when a function runs.
"""

from __future__ import annotations

import builtins
import time
from typing import Any

from actors.client.joining import ray_module
from actors.client.names import Member, is_host
from actors.client.nodes import alive_nodes
from actors.client.replies import open_reply
from actors.cluster.directory_handle import DirectoryHandle
from protocol.errors import MorphzError

STATUS_TIMEOUT = 2.0
"""Seconds :func:`placement_table` waits for the members' versions (all asked at once)."""


def _member_version(raw: Any) -> int | None:
    """A member's version from its ``status()`` / ``version()`` answer, None if unreadable."""
    if isinstance(raw, bytes):
        try:
            raw = open_reply(raw)
        except MorphzError:
            return None
    if isinstance(raw, dict):
        raw = raw.get("applied_version", raw.get("version"))
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    return None


def placement_table(
    handle: DirectoryHandle, timeout: float = STATUS_TIMEOUT
) -> builtins.list[dict[str, Any]]:
    """Every entry of the directory with each member's version and node liveness.

    One row per context: ``name``, ``epoch``, ``follower_count``, ``acks``, ``policy``,
    ``primary`` and ``followers``, each member ``{node_id, actor, store_dir,
    node_alive, version}`` (``version`` None when the member did not answer within
    *timeout* seconds: unreachable, not started, or its node is gone), ``host`` (the
    context host's actor for a hosted context, else None), ``state`` (``active`` /
    ``idle``; None when unknown) and ``last_use`` (a hosted context's last call, wall
    clock; None if unknown: a hosted context's version is not asked, since asking
    would activate it); a follower also has ``lag`` = primary version − its version
    (None when either is unknown). Members are asked all at once (``status()`` if the actor has it,
    else ``version()``).
    """
    ray = ray_module()
    alive = {n["node_id"] for n in alive_nodes()}
    entries = handle.list()
    asked: dict[tuple[str, str], Any] = {}
    hosts: dict[str, Any] = {}
    for entry in entries:
        for m in (entry.primary, *entry.followers):
            if is_host(m.actor):  # asked once per host, and never the context: that would
                hosts.setdefault(m.actor, None)  # activate an idle one
                continue
            try:
                actor = ray.get_actor(m.actor, namespace=handle.namespace)
            except ValueError:
                continue
            method = getattr(actor, "status", None) or actor.version
            asked[(entry.name, m.actor)] = method.remote()
    for name in hosts:
        try:
            hosts[name] = ray.get_actor(name, namespace=handle.namespace).contexts.remote()
        except ValueError:
            continue
    versions: dict[tuple[str, str], int | None] = {}
    deadline = time.monotonic() + timeout
    served: dict[tuple[str, str], dict[str, Any]] = {}
    for name, ref in hosts.items():
        try:
            listed = (
                [] if ref is None else ray.get(ref, timeout=max(0.01, deadline - time.monotonic()))
            )
        except Exception:  # a host that does not answer: its contexts' states are unknown
            continue
        for c in listed:
            served[(name, c["name"])] = c
    for key, ref in asked.items():
        try:
            raw = ray.get(ref, timeout=max(0.01, deadline - time.monotonic()))
        except Exception:  # unreachable, timed out or failing: unknown
            versions[key] = None
            continue
        versions[key] = _member_version(raw)

    def row(name: str, m: Member) -> dict[str, Any]:
        version = versions.get((name, m.actor))
        if is_host(m.actor):
            seen = served.get((m.actor, name))
            answered = hosts.get(m.actor) is not None and (m.actor, name) in served
            state = seen["state"] if answered and seen else ("idle" if m.actor in hosts else None)
            last_use = seen["last_use"] if seen else None
        else:  # a context in its own actor process is active while it answers
            state, last_use = ("active" if version is not None else None), None
        return {
            **m.model_dump(),
            "node_alive": m.node_id in alive,
            "version": version,
            "host": m.actor if is_host(m.actor) else None,
            "state": state,
            "last_use": last_use,
        }

    rows = []
    for entry in entries:
        primary = row(entry.name, entry.primary)
        followers = []
        for m in entry.followers:
            f = row(entry.name, m)
            known = primary["version"] is not None and f["version"] is not None
            f["lag"] = primary["version"] - f["version"] if known else None
            followers.append(f)
        rows.append(
            {
                "name": entry.name,
                "epoch": entry.epoch,
                "follower_count": entry.follower_count,
                "acks": entry.acks,
                "policy": entry.policy,
                "primary": primary,
                "followers": followers,
            }
        )
    return rows


__all__ = ["STATUS_TIMEOUT", "placement_table"]
