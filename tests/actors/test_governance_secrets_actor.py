"""Secrets in accepted memory through the context actor: ``quarantine_scan`` and the background
pass find them in frames and in tool results, located and masked, and audit them; the plain
class under asyncio, then once through Ray (the handle and ``morphz review scan --address``)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from actors.client.replies import open_reply
from actors.server.context_actor import ContextActor
from protocol.replies import plain
from tests.actors.cluster import RayCluster

KEY = "AKIAIOSFODNN7EXAMPLE"
SECRET = "IOSFODNN7EXAMPLE"


async def tx(actor: ContextActor, text: str) -> None:
    from actors.client.handle import ContextHandle
    from protocol.wire import unpack

    version = open_reply(await actor.version())
    _, payload = ContextHandle.prepare(f"(context-tx (base-version {version}) {text})")
    assert unpack(await actor.submit(payload))["status"] == "committed"


def test_the_actor_scan_reports_frames_and_tool_results_masked(tmp_path: Path) -> None:
    actor = ContextActor(str(tmp_path), "sec")

    async def run() -> None:
        await tx(actor, f'(derive creds (aws "{KEY}"))')
        seen = open_reply(await actor.observe("tool_result", f"export AWS_KEY={KEY}"))
        scan = open_reply(await actor.quarantine_scan())
        assert scan["quarantined"] == ["creds"]
        assert sorted((s["record"], s["ref"], s["field"]) for s in scan["sensitive"]) == [
            ("frame", "creds", "body"),
            ("observation", seen["ref"], "text"),
        ]
        entries = open_reply(await actor.audit())
        flagged = [e for e in entries if e["outcome"] == "flagged"]
        assert len(flagged) == 1 and flagged[0]["method"] == "quarantine_scan"
        assert SECRET not in json.dumps([scan, entries])
        actor.close()

    asyncio.run(run())


def test_the_background_pass_quarantines_a_secret_and_reports_a_tool_result(
    tmp_path: Path,
) -> None:
    async def run() -> None:
        actor = ContextActor(str(tmp_path), "bg", governance_every=0.02)
        await tx(actor, "(derive fine (ok))")
        seen = open_reply(await actor.observe("tool_result", f"printenv: password=hunter22 {KEY}"))
        await tx(actor, f'(revise fine (aws "{KEY}"))')  # an accepted frame gets a key later
        deadline = time.monotonic() + 10
        while True:
            trust = open_reply(await actor.frame("fine"))["envelope"]["trust"]
            flagged = [e for e in open_reply(await actor.audit()) if e["outcome"] == "flagged"]
            refs = {s["ref"] for e in flagged for s in e["sensitive"]}
            if trust == "quarantined" and refs == {"fine", seen["ref"]}:
                break
            assert time.monotonic() < deadline, (trust, refs)
            await asyncio.sleep(0.02)
        assert {e["holder"] for e in flagged} == {"runtime:governance-worker"}
        assert SECRET not in json.dumps(flagged) and "hunter22" not in json.dumps(flagged)
        actor.close()

    asyncio.run(run())


@pytest.mark.ray
def test_quarantine_scan_through_the_handle_and_the_cli(
    ray_cluster: RayCluster, tmp_path: Path, context_name: str, namespace: str
) -> None:
    from actors import connect
    from morphz.cli import cli

    ctx = connect(context_name, store_dir=tmp_path, namespace=namespace)
    try:
        v = ctx.version()
        assert ctx.submit(f'(context-tx (base-version {v}) (derive creds (aws "{KEY}")))').committed
        report: Any = ctx.observe("tool_result", f"aws configure list: {KEY}")
        scan = ctx.quarantine_scan()
        assert scan["quarantined"] == ["creds"]
        assert {s["ref"] for s in scan["sensitive"]} == {"creds", report["ref"]}
        assert SECRET not in json.dumps(plain(scan))
        base = ["--store", str(tmp_path), "--context", context_name]
        through = ["review", "scan", "--address", "auto", "--namespace", namespace]
        r = CliRunner().invoke(cli, [*base, *through])
        assert r.exit_code == 0, r.output
        assert f"sensitive  {report['ref']} text[" in r.output and "forget" in r.output
        assert SECRET not in r.output
    finally:
        ctx.shutdown()
