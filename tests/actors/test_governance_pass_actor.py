"""The context actor's background governance pass keeps its cursor: after the first pass it
looks only at what changed, and a restarted actor starts over with a full pass."""

from __future__ import annotations

import asyncio
from pathlib import Path

from actors.client.replies import open_reply
from actors.server.context_actor import ContextActor
from tests.actors.test_governance_actor import contradicted, tx


def test_the_worker_passes_from_its_cursor_and_a_new_actor_starts_full(tmp_path: Path) -> None:
    async def first() -> None:
        actor = ContextActor(str(tmp_path), "inc", governance_every=3600)
        try:
            await tx(actor, "(derive hint (x)) (envelope hint (trust candidate))")
            report = await actor._governance_pass()
            assert report is not None and report["full"]
            assert [d["frame"] for d in report["decisions"]] == ["hint"]
            await contradicted(actor)
            await tx(actor, "(derive more (y)) (envelope more (trust candidate) (risk high))")
            report = await actor._governance_pass()
            assert report is not None and not report["full"]
            assert report["quarantined"] == ["old-fact"] and report["held"] == ["more"]
            version = open_reply(await actor.version())
            assert report["cursor"].version == version
            report = await actor._governance_pass()  # nothing changed: nothing written
            assert report is not None and report["versions"] == [] and report["held"] == ["more"]
            assert open_reply(await actor.version()) == version
            assert (await actor.stats())["governance_passes"] == 3
        finally:
            actor.close()

    async def again() -> None:
        actor = ContextActor(str(tmp_path), "inc", governance_every=3600)
        try:
            report = await actor._governance_pass()
            assert report is not None and report["full"] and report["held"] == ["more"]
        finally:
            actor.close()

    asyncio.run(first())
    asyncio.run(again())
