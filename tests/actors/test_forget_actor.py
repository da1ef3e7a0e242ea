"""Forgetting through the context actor: ``admin`` only, audited (denials too), typed errors;
the plain class under asyncio, then once through Ray (the handle and ``morphz forget --address``)."""

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
from actors.server.guard import grant_key
from protocol import capabilities as grants
from protocol.capabilities import PermissionDenied
from protocol.errors import NotFound, RequestError
from protocol.forget import ForgetReport
from tests.actors.cluster import RayCluster

SECRET = "sk-live-ZEBRAQUOKKA42"


async def _story(actor: ContextActor, **kw: Any) -> None:
    from actors.client.handle import ContextHandle
    from protocol.wire import unpack

    open_reply(await actor.observe("tool_result", f"deploy log: key {SECRET} accepted", **kw))
    open_reply(await actor.claim(**kw))
    version = open_reply(await actor.version(**kw))
    text = f'(context-tx (base-version {version}) (derive cfg (from @e1) (key "{SECRET}")))'
    _, payload = ContextHandle.prepare(text)
    assert unpack(await actor.submit(payload, **kw))["status"] == "committed"


def test_forget_needs_admin_and_every_call_is_audited(tmp_path: Path) -> None:
    actor = ContextActor(str(tmp_path), "acme-f", tenant="acme", enforce=True)
    key = grant_key(tmp_path)
    now = time.time()
    admin = grants.issue(
        key, holder="ops", tenant="acme", grants=[("*", ["admin"])], issued_by="x", now=now
    )
    writer = grants.issue(
        key,
        holder="agent-7",
        tenant="acme",
        grants=[("acme-f", ["read", "commit", "recall"])],
        issued_by="x",
        now=now,
    )

    async def run() -> None:
        await _story(actor, capability=writer)
        # No admin grant: refused, nothing changed, the denial audited.
        with pytest.raises(PermissionDenied):
            open_reply(await actor.forget("@e1", "leak", capability=writer))
        with pytest.raises(PermissionDenied):
            open_reply(await actor.forget("cfg", "leak"))  # no capability at all
        page = open_reply(await actor.read_event("@e1", capability=writer))
        assert SECRET in page["text"]
        # Bad input with admin: typed errors, nothing changed.
        for args, error, code in [
            (("@e1", None), RequestError, "missing_reason"),
            (("@e1", ""), RequestError, "missing_reason"),
            (("@e9", "leak"), NotFound, "not_found"),
            (("nosuch", "leak"), NotFound, "not_found"),
            ((7, "leak"), RequestError, "bad_argument"),
        ]:
            with pytest.raises(error) as err:
                open_reply(await actor.forget(*args, capability=admin))
            assert err.value.code == code
        assert SECRET in open_reply(await actor.read_event("@e1", capability=writer))["text"]
        # With admin: forgotten, the holder named as who forgot it.
        report = ForgetReport.decode(
            open_reply(await actor.forget("@e1", "leaked key", capability=admin))
        )
        assert report.kind == "event" and report.by == "ops" and not report.duplicate
        again = ForgetReport.decode(
            open_reply(await actor.forget("@e1", "again", capability=admin))
        )
        assert again.duplicate and again.digest == report.digest
        frame = ForgetReport.decode(open_reply(await actor.forget("cfg", "leak", capability=admin)))
        assert frame.log_versions == [1]
        assert SECRET not in json.dumps(open_reply(await actor.frame("cfg", capability=writer)))
        assert SECRET not in open_reply(await actor.read_event("@e1", capability=writer))["text"]
        history = open_reply(await actor.history("cfg", capability=writer))
        assert SECRET not in json.dumps(history)
        entries = open_reply(await actor.audit(capability=admin))
        rows = [(e["method"], e["holder"], e["outcome"]) for e in entries]
        assert rows == [
            ("forget", "agent-7", "denied"),
            ("forget", None, "denied"),
            ("forget", "ops", "allowed"),
            ("forget", "ops", "allowed"),
        ]
        assert entries[2]["why"] == "leaked key" and entries[2]["digest"] == report.digest

    try:
        asyncio.run(run())
    finally:
        actor.close(capability=admin)


def test_the_actor_answers_the_same_shape_as_the_embedded_api(tmp_path: Path) -> None:
    from service.store import Store

    actor = ContextActor(str(tmp_path), "shape")

    async def run() -> dict[str, Any]:
        await _story(actor)
        return dict(open_reply(await actor.forget("cfg", "leak")))

    try:
        remote = asyncio.run(run())
    finally:
        actor.close()
    assert set(remote) == set(ForgetReport.model_fields)
    with Store(tmp_path).open("shape") as ctx:
        local = ctx.forget("cfg", reason="leak")
    assert local.duplicate and local.digest == remote["digest"]
    assert set(local.as_dict()) == set(remote)


@pytest.mark.ray
def test_forget_through_the_handle_and_the_cli_address(
    ray_cluster: RayCluster, tmp_path: Path, context_name: str, namespace: str
) -> None:
    from actors import connect
    from morphz.cli import cli

    ctx = connect(context_name, store_dir=tmp_path, namespace=namespace)
    try:
        report = ctx.observe("tool_result", f"deploy log: key {SECRET} accepted")
        ctx.claim()
        text = f'(derive cfg (from {report["ref"]}) (key "{SECRET}"))'
        assert ctx.submit(f"(context-tx (base-version {ctx.version()}) {text})").committed
        with pytest.raises(RequestError) as err:
            ctx.forget("cfg", reason="")  # refused before any remote call
        assert err.value.code == "missing_reason"
        done = ctx.forget(report["ref"], reason="leaked key")
        assert isinstance(done, ForgetReport) and done.kind == "event"
        assert SECRET not in ctx.read_event(report["ref"])["text"]
        with pytest.raises(NotFound):
            ctx.forget("nosuch", reason="leak")

        runner = CliRunner()
        base = ["--store", str(tmp_path), "--context", context_name, "--json"]
        args = ["forget", "cfg", "--reason", "leaked key"]
        locked = runner.invoke(cli, [*base, *args])
        assert locked.exit_code == 1 and "store_locked" in locked.output
        through = runner.invoke(cli, [*base, *args, "--address", "auto", "--namespace", namespace])
        assert through.exit_code == 0, through.output
        doc = json.loads(through.stdout)
        assert doc["via"] == "actor" and doc["kind"] == "frame"
        assert SECRET not in json.dumps(ctx.frame("cfg").as_dict())
        compact = runner.invoke(cli, [*base, "compact"])
        assert compact.exit_code == 1 and "store_locked" in compact.output
    finally:
        ctx.shutdown()
