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

The reads of :mod:`service.queries` are declared there, beside their functions, in
:class:`~service.queries.Reads` (a base of :class:`Operations`). Adding a read-only
operation: write its service function in :mod:`service.queries` (``fn(ctx, …) ->
reply``, bounds in the annotations), declare it in ``Reads`` with one example call
(the shape tests run it on every port), write its test, and regenerate
``docs/api.md`` (``python -m service.apidoc``): three files.
"""

from __future__ import annotations

from typing import Any

import service.admin as admin
import service.asof as asof
import service.branches as branches
import service.diffs as diffs
import service.inspection as inspection
import service.inspection_audit as inspection_audit
import service.observations as observations
import service.search as searching
import service.sharing as sharing
import service.traces as tracing
import service.transactions as transactions
from service.compile import compile_input
from service.queries import Reads
from service.registry import OPERATIONS, Ask, Carry, Example, Operation, Route, Tool

__all__ = ["Operations", "operations"]


class Operations(Reads):
    """The registered operations, as methods of whatever port derives from this class.

    A port supplies ``invoke(op, args)``: the embedded context runs the service
    function, a handle sends the checked arguments to the context actor.
    """

    submit = Operation(
        transactions.submit,
        permission="commit",
        writes=True,
        carry=Carry(transactions.wire_payload),
        example=Example("(context-tx (base-version 1) (append release (notes shipped)))"),
    )
    submit_many = Operation(
        transactions.submit_many,
        permission="commit",
        writes=True,
        carry=Carry(transactions.wire_payloads),
        example=Example(
            [
                "(context-tx (base-version 2) (append release (notes again)))",
                "(context-tx (base-version 0) (derive note (x 1)))",
            ]
        ),
    )
    check = Operation(
        transactions.check,
        permission="read",
        writes=False,
        example=Example("(context-tx (base-version 0) (revise release (stage done)))"),
    )
    observe = Operation(
        observations.observe,
        permission="commit",
        writes=True,
        step=observations.observe_in,
        keyed=observations.keyed,
        example=Example("tool_result", "one more", session="side"),
    )
    observe_many = Operation(
        observations.observe_many,
        permission="commit",
        writes=True,
        step=observations.observe_many_in,
        keyed=observations.keyed,
        example=Example([("tool_result", "a", "main"), ("external", "b", "x")]),
    )
    claim = Operation(
        observations.claim,
        permission="commit",
        writes=True,
        step=observations.claim_in,
        example=Example(),
    )
    observe_and_claim = Operation(
        observations.observe_and_claim,
        permission="commit",
        writes=True,
        step=observations.observe_and_claim_in,
        keyed=observations.keyed,
        example=Example("tool_result", "one more", session="side"),
    )
    deliver = Operation(
        observations.deliver,
        permission="commit",
        writes=True,
        step=observations.deliver_in,
        example=Example("@e2"),
    )
    recall_observation = Operation(
        observations.recall_observation,
        permission="recall",
        writes=True,
        step=observations.recall_observation_in,
        example=Example({"frame_id": "release"}, session="s"),
    )
    recall_recorded = Operation(
        observations.recall_recorded,
        permission="recall",
        writes=True,
        step=observations.recall_recorded_in,
        example=Example({"frame_id": "release"}, session="s"),
    )
    search = Operation(
        searching.search,
        permission="recall",
        writes=True,
        prepare=searching.find_for_model,
        indexed=True,
        example=Example({"query": "passed"}, "main"),
    )
    # -- the web inspector's reads (servers/inspector) ------------------------------
    inspect = Operation(
        inspection.inspect,
        permission="read",
        writes=False,
        example=Example("graph", {"center": "release", "radius": 1}),
    )
    inspect_audit = Operation(
        inspection_audit.audit_view,
        permission="admin",
        writes=False,
        example=Example("rejections", {"limit": 5}),
    )
    inspect_search = Operation(
        inspection.inspect_search,
        permission="recall",
        writes=False,
        prepare=inspection.find_hits,
        indexed=True,
        example=Example("regression", 5),
    )
    # -- the agent loop: model inputs and usage traces ------------------------------
    compile = Operation(
        compile_input,
        permission="read",
        writes=False,
        example=Example("main"),
    )
    record_trace = Operation(
        tracing.record_trace,
        permission="commit",
        writes=True,
        example=Example({"session": "main", "frames_present": ["release"], "action": "idle"}),
    )
    # -- governance and history (docs/governance.md, docs/forget.md) -----------------
    export = Operation(
        admin.export,
        permission="admin",
        writes=False,
        example=Example(0, 2),
    )
    pending = Operation(
        admin.pending,
        permission="admin",
        writes=False,
        http=Route("GET", "/review"),
        example=Example(),
    )
    review = Operation(
        admin.review,
        permission="admin",
        writes=True,
        http=Route("POST", "/review/{frame_id}"),
        example=Example("draft", "accept", "ana", reason="checked"),
    )
    admit = Operation(
        admin.admit,
        permission="admin",
        writes=True,
        example=Example(),
    )
    quarantine_scan = Operation(
        admin.quarantine_scan,
        permission="admin",
        writes=True,
        prepare=admin.scan_observations,
        example=Example(failed_uses=2),
    )
    forget = Operation(
        admin.forget,
        permission="admin",
        writes=True,
        example=Example("@e3", "pasted by mistake"),
    )

    # -- sharing one frame between contexts (docs/permissions.md) ------------------------
    export_frame = Operation(
        sharing.export_frame,
        permission="read",
        writes=True,
        example=Example("release"),
    )
    import_frame = Operation(
        sharing.import_frame,
        permission="admin",
        writes=True,
        example=Example(Ask("export_frame", "release"), "copied"),
    )

    # -- branches of memory: tags, as-of reads, diff, merge (docs/branches.md) ----------
    state_at = Operation(
        asof.state_at,
        permission="read",
        writes=False,
        http=Route("GET", "/state/at/{at}"),
        example=Example(1),
    )
    recall_at = Operation(
        asof.recall_at,
        permission="read",
        writes=False,
        example=Example(1, {"frame_id": "test-result"}),
    )
    tag = Operation(
        asof.tag,
        permission="commit",
        writes=True,
        http=Route("POST", "/tags", 201),
        mcp=Tool(),
        example=Example("first", 1),
    )
    tags = Operation(
        asof.tags,
        permission="read",
        writes=False,
        http=Route("GET", "/tags", key="tags"),
        mcp=Tool(),
        example=Example(),
    )
    untag = Operation(asof.untag, permission="commit", writes=True, example=Example("first"))
    branch = Operation(
        branches.branch,
        permission="admin",
        writes=True,
        http=Route("POST", "/branch", 201),
        mcp=Tool(),
        example=Example("alt"),
    )
    diff = Operation(
        diffs.diff,
        permission="read",
        writes=False,
        http=Route("GET", "/diff/{source}"),
        mcp=Tool("diff_context"),
        example=Example("alt"),
    )
    changes = Operation(
        diffs.changes,
        permission="read",
        writes=False,
        http=Route("GET", "/changes"),
        mcp=Tool("changes_between"),
        example=Example(0, 1),
    )
    merge = Operation(
        branches.merge,
        permission="commit",
        writes=True,
        http=Route("POST", "/merge"),
        mcp=Tool("merge_context"),
        example=Example("alt", dry_run=True),
    )
    pick = Operation(
        branches.pick,
        permission="commit",
        writes=True,
        http=Route("POST", "/pick"),
        mcp=Tool(),
        example=Example("alt", frames=["release"]),
    )
    revert = Operation(
        branches.revert,
        permission="commit",
        writes=True,
        http=Route("POST", "/revert"),
        mcp=Tool(),
        example=Example(1, 1, dry_run=True, strategy="theirs"),
    )


def operations() -> list[Operation[Any, Any]]:
    """Every declared operation, in declaration order."""
    return list(OPERATIONS.values())
