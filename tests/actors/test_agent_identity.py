"""Who wrote and who was refused, as an enforcing context actor knows it (the plain actor
class under asyncio, real LMDB files): the log names the holder of the verified capability
a transaction came with, a rejection leaves an audit entry naming it by code, and the
inspector's audit reads need what reading the audit needs."""

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


def token(path: Path, holder: str, ops: list[str]) -> bytes:
    return grants.issue(
        grant_key(path),
        holder=holder,
        tenant="acme",
        grants=[("acme-who", ops)],
        issued_by="ops",
        now=time.time(),
    )


async def submit(actor: ContextActor, text: str, cap: bytes) -> dict[str, Any]:
    _, payload = ContextHandle.prepare(text)
    return dict(unpack(await actor.submit(payload, capability=cap)))


def test_the_log_and_the_rejections_name_the_verified_holder(tmp_path: Path) -> None:
    actor = ContextActor(str(tmp_path), "acme-who", tenant="acme", enforce=True)
    planner = token(tmp_path, "planner", ["read", "commit"])
    critic = token(tmp_path, "critic", ["commit"])
    admin = token(tmp_path, "ops", ["admin", "read"])

    async def run() -> None:
        base = open_reply(await actor.version(capability=planner))
        first = await submit(actor, f"(context-tx (base-version {base}) (derive f (a 1)))", planner)
        v = first["version"]
        second = await submit(actor, f"(context-tx (base-version {v}) (revise f (a 2)))", critic)
        assert second["status"] == "committed"
        stale = await submit(actor, f"(context-tx (base-version {v}) (revise f (a 3)))", critic)
        assert stale["status"] == "rejected"
        _, payload = ContextHandle.prepare(f"(context-tx (base-version {v}) (revise f (a 4)))")
        many = await actor.submit_many([payload], capability=critic)
        assert unpack(many[0])["status"] == "rejected"

        page = open_reply(await actor.inspect("transactions", {"limit": 10}, capability=planner))
        assert [t["agent"] for t in page["transactions"]] == ["critic", "planner"]
        assert page["agents"] == {"critic": 1, "planner": 1}

        rejected = open_reply(await actor.inspect_audit("rejections", {}, capability=admin))
        assert rejected["codes"] == {"conflict": 2}
        assert rejected["agents"] == {"critic": 2}
        assert {r["agent"] for r in rejected["rejections"]} == {"critic"}
        chain = open_reply(await actor.inspect_audit("chain", {}, capability=admin))
        assert chain["ok"], chain

        # the audit's rejections are not for a caller that may only read and commit
        denied = unpack(await actor.inspect_audit("rejections", {}, capability=planner))
        assert denied["error"]["code"] == "permission_denied"
        bad = unpack(await actor.inspect_audit("rejections", {"after": 1}, capability=admin))
        assert bad["error"]["code"] == "bad_argument"

    asyncio.run(run())
    actor.close(capability=admin)


def test_an_open_context_records_no_claimed_identity(tmp_path: Path) -> None:
    actor = ContextActor(str(tmp_path), "acme-who", tenant="acme")
    claimed = token(tmp_path, "someone-else", ["commit"])

    async def run() -> None:
        r = await submit(actor, "(context-tx (base-version 0) (derive f (a 1)))", claimed)
        assert r["status"] == "committed"
        rec = open_reply(await actor.txlog(r["version"]))
        assert "agent" not in rec

    asyncio.run(run())
    actor.close()
