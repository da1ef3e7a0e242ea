"""The OpenAPI description of ``POST …/transactions``, the one route that reads its body and
its ``Idempotency-Key`` header by hand (text/plain or JSON), so FastAPI cannot infer them.

It names the request body (both media types, with the example Swagger's "Try it out"
sends), the header, the typed receipt of a commit and the one error shape
(:class:`servers.operations.ErrorReply`) of every refusal, instead of FastAPI's default
validation error.
"""

from __future__ import annotations

from typing import Any

from protocol.ids import MAX_CLIENT_ID
from protocol.receipts import Receipt
from servers.operations import ERROR_STATUSES, ErrorReply

__all__ = ["MAX_BODY_BYTES", "TX_EXAMPLE", "TX_OPENAPI", "TX_RESPONSES"]

MAX_BODY_BYTES = 1 << 20
"""The largest request body the HTTP API accepts (a transaction's text is far smaller)."""


TX_EXAMPLE = "(context-tx (base-version 0) (derive note (stage one)))"
"""The transaction Swagger's "Try it out" offers."""

TX_OPENAPI: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "text/plain": {
                "schema": {"type": "string", "maxLength": MAX_BODY_BYTES},
                "example": TX_EXAMPLE,
            },
            "application/json": {
                "schema": {
                    "oneOf": [
                        {
                            "title": "TransactionText",
                            "type": "object",
                            "properties": {"text": {"type": "string"}},
                            "required": ["text"],
                            "additionalProperties": False,
                        },
                        {
                            "title": "TransactionForm",
                            "type": "object",
                            "description": "the JSON form of a transaction"
                            " (protocol.txwire.submitted_from_dict)",
                        },
                    ]
                },
                "example": {"text": TX_EXAMPLE},
            },
        },
    },
    "parameters": [
        {
            "name": "Idempotency-Key",
            "in": "header",
            "required": False,
            "schema": {"type": "string", "maxLength": MAX_CLIENT_ID},
            "description": "The client id: a retry with the same key answers the original"
            " receipt (duplicate: true) and commits nothing again.",
            "example": "note-1",
        }
    ],
}
"""What the transactions route reads by hand (its body and header), described for OpenAPI."""

TX_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": Receipt, "description": "committed: the receipt"},
    **{s: {"model": ErrorReply, "description": d} for s, d in ERROR_STATUSES.items()},
    409: {
        "model": ErrorReply,
        "description": "rejected: the first error's code and message, the receipt in"
        " error.receipt (or exists / store_locked …)",
    },
}
"""The transactions route's replies: the receipt, or the one error shape."""
