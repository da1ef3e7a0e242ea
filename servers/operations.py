"""The MCP tools and HTTP routes made from the operation registry (:mod:`service.operations`).

An operation declared with ``mcp=Tool(...)`` becomes an MCP tool whose input
schema is its argument model (:func:`operation_tool`); one declared with
``http=Route(...)`` becomes an HTTP route (:func:`add_routes`) whose OpenAPI
entry carries the argument model as the request (path, query or JSON body),
the reply type as the 200 answer and the ``{"error": …}`` map of every
refusal. Neither checks an argument: the call goes to the port's method of the
same name, which checks them once (:meth:`service.registry.Operation.bind`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from service.registry import Operation

__all__ = ["operation_tool"]


def operation_tool(
    op: Operation[Any, Any],
    call: Callable[..., Any],
    run: Callable[[Callable[[], Any]], Any],
    returns: Any,
) -> Callable[..., Any]:
    """The MCP tool function of *op*: keyword parameters are its arguments (so the SDK's
    input schema is the argument model's), it answers *returns* (the type *run* answers);
    its body is ``run(lambda: call(op.name, **args))``."""

    def tool(**kwargs: Any) -> Any:
        return run(lambda: call(op.name, **kwargs))

    tool.__name__ = op.name
    tool.__doc__ = op.doc
    tool.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        list(op.parameters), return_annotation=returns
    )
    tool.__annotations__ = {p.name: p.annotation for p in op.parameters}
    tool.__annotations__["return"] = returns
    return tool
