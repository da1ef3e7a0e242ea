"""A commit grant does not read: a conflict receipt carries the conflicting frames' bodies and
the ids changed since the base only for a caller holding ``read`` (the plain actor class under
asyncio, enforcing, real LMDB files). On main before this change a commit-only token got
``current`` with the bodies."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from actors.client.handle import ContextHandle
from actors.client.replies import open_reply
from actors.server.context_actor import ContextActor
from actors.server.guard import grant_key
from protocol import capabilities as grants
from protocol.wire import unpack

BODY = "payroll-secret-figure-93817"


def token(path: Path, ops: list[str]) -> bytes:
    return grants.issue(
        grant_key(path),
        holder="agent-" + "-".join(ops),
        tenant="acme",
        grants=[("acme-r", ops)],
        issued_by="ops",
        now=time.time(),
    )


async def submit(actor: ContextActor, text: str, cap: bytes) -> dict[str, Any]:
    _, payload = ContextHandle.prepare(text)
    return dict(unpack(await actor.submit(payload, capability=cap)))


def test_conflict_receipts_show_bodies_only_to_readers(tmp_path: Path) -> None:
    actor = ContextActor(str(tmp_path), "acme-r", tenant="acme", enforce=True)
    both, commit_only = token(tmp_path, ["read", "commit"]), token(tmp_path, ["commit"])

    async def run() -> None:
        base = open_reply(await actor.version(capability=both))
        first = await submit(actor, f"(context-tx (base-version {base}) (derive f (a 1)))", both)
        assert first["status"] == "committed"
        v = first["version"]
        r = await submit(actor, f'(context-tx (base-version {v}) (revise f (a "{BODY}")))', both)
        assert r["status"] == "committed"
        other = await submit(actor, f"(context-tx (base-version {v}) (derive g (b 2)))", both)
        assert other["status"] == "committed"
        stale = f"(context-tx (base-version {v}) (revise f (a 3)))"

        seen = await submit(actor, stale, both)
        assert seen["status"] == "rejected" and [c["id"] for c in seen["conflicts"]] == ["f"]
        assert BODY in str(seen["current"]) and seen["changed_since_base"]

        blind = await submit(actor, stale, commit_only)
        assert blind["status"] == "rejected" and [c["id"] for c in blind["conflicts"]] == ["f"]
        assert blind["current"] == [] and blind["changed_since_base"] == []
        assert BODY not in str(blind)

        _, payload = ContextHandle.prepare(stale)
        many = await actor.submit_many([payload, payload], capability=commit_only)
        assert isinstance(many, list)
        for raw in many:
            doc = unpack(raw)
            assert doc["status"] == "rejected" and doc["current"] == [] and BODY not in str(doc)

    asyncio.run(run())
    actor.close(capability=token(tmp_path, ["admin"]))
