"""Every operation of the service, declared once: the registry's table.

Each class attribute of :class:`Operations` is one :class:`~service.registry.Operation`:
the service function that does the work, the permission it needs, whether it
writes, and where it is exposed beside the embedded API and the Ray handle (an
MCP tool, an HTTP route). The argument model and the reply type come from the
service function's signature. :class:`~service.context.Context` (embedded) and
:class:`~actors.client.ContextHandle` (Ray) both derive from :class:`Operations`,
so a call has one signature and one reply type on every port; the context
actor, the MCP server, the HTTP API and the call table of ``docs/api.md``
(``python -m service.apidoc``) are made from this table.

Adding a read-only operation: write its service function (``fn(ctx, …) ->
reply``, bounds in the annotations), add one line here, and a test.
"""

from __future__ import annotations

from typing import Any

import service.asof as asof
import service.branches as branches
import service.observations as observations
import service.queries as queries
from service.registry import OPERATIONS, Operation, Route, Tool

__all__ = ["Operations", "operations"]


class Operations:
    """The registered operations, as methods of whatever port derives from this class.

    A port supplies ``invoke(op, args)``: the embedded context runs the service
    function, a handle sends the checked arguments to the context actor.
    """

    observe = Operation(
        observations.observe,
        permission="commit",
        writes=True,
        keyed=observations.keyed,
    )
    observe_many = Operation(
        observations.observe_many,
        permission="commit",
        writes=True,
        keyed=observations.keyed,
    )
    claim = Operation(observations.claim, permission="commit", writes=True)
    deliver = Operation(observations.deliver, permission="commit", writes=True)
    recall_observation = Operation(
        observations.recall_observation, permission="recall", writes=True
    )
    frame = Operation(queries.frame, permission="read", writes=False)
    frame_at = Operation(queries.frame_at, permission="read", writes=False)
    event = Operation(queries.event, permission="read", writes=False)
    read_event = Operation(queries.read_event, permission="read", writes=False)
    state = Operation(queries.state, permission="read", writes=False, http=Route("GET", "/state"))
    history = Operation(queries.history, permission="read", writes=False)
    frame_history = Operation(
        queries.frame_history,
        permission="read",
        writes=False,
        http=Route("GET", "/frames/{frame_id}/revisions", key="revisions"),
        mcp=Tool(),
    )
    snapshot = Operation(queries.snapshot, permission="read", writes=False)
    read_for_update = Operation(queries.read_for_update, permission="read", writes=False)
    meta = Operation(queries.meta, permission="read", writes=False)
    txlog = Operation(queries.txlog, permission="read", writes=False)
    traces = Operation(queries.traces, permission="read", writes=False)
    audit = Operation(queries.audit, permission="admin", writes=False)
    state_at = Operation(
        asof.state_at, permission="read", writes=False, http=Route("GET", "/state/at/{at}")
    )
    recall_at = Operation(asof.recall_at, permission="read", writes=False)
    tag = Operation(
        asof.tag, permission="commit", writes=True, http=Route("POST", "/tags", 201), mcp=Tool()
    )
    tags = Operation(
        asof.tags,
        permission="read",
        writes=False,
        http=Route("GET", "/tags", key="tags"),
        mcp=Tool(),
    )
    untag = Operation(asof.untag, permission="commit", writes=True)
    branch = Operation(
        branches.branch,
        permission="admin",
        writes=True,
        http=Route("POST", "/branch", 201),
        mcp=Tool(),
    )
    diff = Operation(
        branches.diff,
        permission="read",
        writes=False,
        http=Route("GET", "/diff/{source}"),
        mcp=Tool("diff_context"),
    )
    changes = Operation(
        branches.changes,
        permission="read",
        writes=False,
        http=Route("GET", "/changes"),
        mcp=Tool("changes_between"),
    )
    merge = Operation(
        branches.merge,
        permission="commit",
        writes=True,
        http=Route("POST", "/merge"),
        mcp=Tool("merge_context"),
    )
    pick = Operation(
        branches.pick, permission="commit", writes=True, http=Route("POST", "/pick"), mcp=Tool()
    )
    revert = Operation(
        branches.revert, permission="commit", writes=True, http=Route("POST", "/revert"), mcp=Tool()
    )


def operations() -> list[Operation[Any, Any]]:
    """Every declared operation, in declaration order."""
    return list(OPERATIONS.values())
