"""Who holds a locked context: the context actor its advert names, and how to stop it.

Kept apart from the commands (it imports nothing of the CLI), so the error path of
every command (:func:`morphz.cli.console.fail`) can name the holder of a
``store_locked`` context.
"""

from __future__ import annotations

import os

__all__ = ["holder_note"]


def holder_note(store: str, context: str, message: str) -> str:
    """*message* (a ``store_locked`` refusal about *context* of *store*) with who holds the
    context, as its advert says, and how to stop it; unchanged when no actor advertises
    itself or the refusal is about another context."""
    from actors.client.lookup import advertised

    try:
        advert = advertised(store, context)
    except Exception:  # a name the store refuses has no advert
        return message
    if advert is None or f"{os.sep}{context}" not in message:
        return message
    node = str(advert.get("node_id", ""))[:12]
    return (
        f"{message}; held by context actor ctx:{context} (pid {advert.get('pid')} on node"
        f" {node}, Ray at {advert['address']}, namespace {advert['namespace']}):"
        f" stop it with `morphz stop {context}` first"
    )
