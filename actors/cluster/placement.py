"""Where a placed context goes: the placement policies and the rule choosing its nodes.

The node helpers (ids, liveness, pinning) are :mod:`actors.client.nodes`';
the directory (:mod:`actors.cluster.directory`) applies :func:`choose_nodes`.
"""

from __future__ import annotations

from protocol.errors import NotFound, RequestError

POLICY_SPREAD = "spread"
"""Placement policy: the live node holding the fewest context members (ties: smallest id)."""


def check_policy(policy: object) -> str:
    """*policy* if it is ``"spread"``, ``"node:<id>"`` or ``"resource:<name>"``.

    RequestError ``bad_placement`` otherwise (checked before any remote call).
    """
    if isinstance(policy, str):
        kind, _, arg = policy.partition(":")
        if policy == POLICY_SPREAD or (kind in ("node", "resource") and arg.strip() == arg != ""):
            return policy
    raise RequestError(
        f"a placement is 'spread', 'node:<node id>' or 'resource:<name>', not {policy!r}",
        code="bad_placement",
    )


def choose_nodes(
    policy: str,
    followers: int,
    live: dict[str, dict[str, float]],
    load: dict[str, int],
) -> list[str]:
    """The primary's node then *followers* follower nodes, all distinct (a pure rule).

    *live* maps each live node id to the resources it offers, *load* each node id
    to the context members (primaries and followers) it holds. The primary:
    ``node:<id>`` that node (NotFound if it is not live), ``resource:<r>`` the
    least-loaded live node offering *r* (NotFound if none), ``spread`` the
    least-loaded live node. Followers: the least-loaded other live nodes. Ties
    go to the smallest node id. RequestError ``not_enough_nodes`` when fewer
    than ``1 + followers`` nodes are live.
    """
    policy = check_policy(policy)
    if not isinstance(followers, int) or isinstance(followers, bool) or followers < 0:
        raise RequestError(
            f"followers must be an integer >= 0, not {followers!r}", code="bad_argument"
        )

    def by_load(nodes: list[str]) -> list[str]:
        return sorted(nodes, key=lambda n: (load.get(n, 0), n))

    kind, _, arg = policy.partition(":")
    if kind == "node":
        if arg not in live:
            raise NotFound(f"no live node {arg}")
        primary = arg
    elif kind == "resource":
        offering = [n for n, res in live.items() if res.get(arg, 0) > 0]
        if not offering:
            raise NotFound(f"no live node offers the resource {arg!r}")
        primary = by_load(offering)[0]
    else:
        if not live:
            raise NotFound("no live node")
        primary = by_load(list(live))[0]
    if 1 + followers > len(live):
        raise RequestError(
            f"{followers} followers need {1 + followers} live nodes; the cluster has {len(live)}",
            code="not_enough_nodes",
        )
    chosen = by_load([n for n in live if n != primary])[:followers]
    return [primary, *chosen]


def host_weight(assigned: int, report: dict[str, object]) -> float:
    """How loaded a context host looks to placement: the contexts the directory has
    placed on it, each weighted by the host's recent CPU (a host busy at 0.5 cores
    counts each of its contexts as 1.5), so a new context goes where there are fewest
    contexts, and among equally many, where they are least busy."""
    cpu = report.get("cpu")
    busy = float(cpu) if isinstance(cpu, (int, float)) and not isinstance(cpu, bool) else 0.0
    return assigned * (1.0 + max(0.0, busy))


def choose_host(
    policy: str,
    reports: list[dict[str, object]],
    assigned: dict[str, int],
    live: dict[str, dict[str, float]],
) -> dict[str, object]:
    """The context host a new hosted context goes to (a pure rule).

    *reports* are the hosts' recent load reports (``actor``, ``node_id``, ``full``,
    ``cpu`` …), *assigned* the contexts placed on each host (by actor name), *live* the
    live nodes and their resources. Only hosts on live nodes that are not full
    count; *policy* narrows them to a node (``node:<id>``) or to nodes offering a
    resource (``resource:<r>``). The least :func:`host_weight` wins, ties to the
    smallest actor name. RequestError ``no_host`` when none can take it.
    """
    policy = check_policy(policy)
    kind, _, arg = policy.partition(":")
    fit = [
        r
        for r in reports
        if r.get("node_id") in live
        and not r.get("full")
        and (kind != "node" or r.get("node_id") == arg)
        and (kind != "resource" or live[str(r.get("node_id"))].get(arg, 0) > 0)
    ]
    if not fit:
        raise RequestError(
            f"no live context host with room for placement {policy!r} "
            f"({len(reports)} hosts reported)",
            code="no_host",
        )
    return min(
        fit,
        key=lambda r: (host_weight(assigned.get(str(r["actor"]), 0), r), str(r["actor"])),
    )
