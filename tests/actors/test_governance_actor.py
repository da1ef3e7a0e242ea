"""Governance through the context actor: audited admin methods, the durable audit log, the
background worker; the plain class under asyncio, then two Ray tests (SIGKILL, unattended)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
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
from protocol.errors import NotFound, OutOfRange, RequestError
from protocol.governance import Decision
from protocol.state import Frame
from protocol.view import ReadView
from tests.actors.cluster import RayCluster


async def tx(actor: ContextActor, text: str, **kw: Any) -> dict[str, Any]:
    from actors.client.handle import ContextHandle
    from protocol.wire import unpack

    version = open_reply(await actor.version(**kw))
    _, payload = ContextHandle.prepare(f"(context-tx (base-version {version}) {text})")
    receipt = unpack(await actor.submit(payload, **kw))
    assert receipt["status"] == "committed", receipt
    return dict(receipt)


async def contradicted(actor: ContextActor, **kw: Any) -> None:
    await tx(actor, "(derive old-fact (region cn-beijing))", **kw)
    await tx(actor, "(derive new-fact (region cn-shanghai))", **kw)
    await tx(actor, "(relate new-fact contradicts old-fact)", **kw)


def test_admin_methods_decide_audit_durably_and_refuse_bad_input(tmp_path: Path) -> None:
    actor = ContextActor(str(tmp_path), "gov")

    async def run() -> None:
        await tx(actor, "(derive risky (drop table users))")
        await tx(actor, "(envelope risky (trust candidate) (risk high))")
        await contradicted(actor)
        scan = open_reply(await actor.quarantine_scan())
        assert scan["quarantined"] == ["old-fact"] and scan["findings"][0]["rule"] == "contradicted"
        admitted = open_reply(await actor.admit())
        assert admitted == {
            "decisions": [
                {
                    "frame": "risky",
                    "verdict": "hold",
                    "reasons": ["high risk: waits for a human decision"],
                    "reviewer": "policy:default-admission-v1",
                }
            ],
            "version": None,
        }
        waiting = open_reply(await actor.pending())
        assert [(i["frame"], i["awaits"]) for i in waiting["items"]] == [
            ("risky", "human"),
            ("old-fact", "human"),
        ]
        version = open_reply(await actor.version())
        for call, error in [
            (actor.review("risky", "maybe", "alice"), RequestError),
            (actor.review("risky", "accept", ""), RequestError),
            (actor.review("nope", "accept", "alice"), NotFound),
            (actor.review("new-fact", "accept", "alice"), RequestError),
            (actor.admit("nope"), NotFound),
            (actor.admit("new-fact"), RequestError),
            (actor.audit(limit=0), OutOfRange),
            (actor.quarantine_scan(failed_uses=0), OutOfRange),
        ]:
            with pytest.raises(error):
                open_reply(await call)
        assert open_reply(await actor.version()) == version
        done = open_reply(await actor.review("risky", "accept", "alice", "checked the plan"))
        assert done["decision"]["reviewer"] == "human:alice" and done["version"] == version + 1
        entries = open_reply(await actor.audit())
        assert [(e["method"], e["allowed"]) for e in entries] == [
            ("quarantine_scan", True),
            ("review", True),
        ]
        assert open_reply(await actor.audit(after=1, limit=1))[0]["seq"] == 2

    try:
        asyncio.run(run())
    finally:
        actor.close()
    again = ContextActor(str(tmp_path), "gov")  # a restarted actor reads the same log
    try:
        assert len(open_reply(asyncio.run(again.audit()))) == 2
    finally:
        again.close()


def test_denials_are_durable_and_coalesced(tmp_path: Path) -> None:
    actor = ContextActor(str(tmp_path), "acme-g", tenant="acme", enforce=True)
    key = grant_key(tmp_path)
    admin = grants.issue(
        key, holder="ops", tenant="acme", grants=[("*", ["admin"])], issued_by="x", now=time.time()
    )
    reader = grants.issue(
        key,
        holder="r",
        tenant="acme",
        grants=[("acme-g", ["read"])],
        issued_by="x",
        now=time.time(),
    )

    async def run() -> None:
        for _ in range(20):
            with pytest.raises(PermissionDenied):
                open_reply(await actor.admit(capability=reader))
        with pytest.raises(PermissionDenied):
            open_reply(await actor.review("x", "accept", "r", capability=reader))
        with pytest.raises(PermissionDenied):
            await actor.stats(capability=reader)

    try:
        asyncio.run(run())
    finally:
        with pytest.raises(PermissionDenied):
            actor.close(capability=reader)  # a synchronous method's denial is audited too
        actor.close(capability=admin)
    again = ContextActor(str(tmp_path), "acme-g", tenant="acme")
    try:
        entries = open_reply(asyncio.run(again.audit(capability=admin)))
        # Each denial was durable before it was answered, so each later one in the window is
        # a new row counting on top of the first (a written row is never rewritten).
        firsts = [e for e in entries if not e.get("coalesces")]
        totals = {e["seq"]: e["count"] for e in firsts}
        for e in entries:
            if e.get("coalesces"):
                totals[e["coalesces"]] += e["count"]
        assert [(e["method"], e["holder"], totals[e["seq"]]) for e in firsts] == [
            ("admit", "r", 20),
            ("review", "r", 1),
            ("stats", "r", 1),
            ("close", "r", 1),
        ]
        assert all(e["outcome"] == "denied" and e["tenant"] == "acme" for e in entries)
    finally:
        again.close(capability=admin)


def test_the_background_task_quarantines_unattended_and_survives_a_failing_pass(
    tmp_path: Path,
) -> None:
    class FailsOnce:
        name = "fails-once"
        failed = False

        def review(self, frame: Frame, view: ReadView) -> Decision:
            if not self.failed:
                self.failed = True
                raise ValueError("policy bug")
            return Decision(frame.id, "accept", ("fine",))

    async def run() -> ContextActor:
        actor = ContextActor(
            str(tmp_path), "bg", governance_every=0.02, admission=FailsOnce()
        )  # built on the loop: the task starts at once
        await tx(actor, "(derive hint (x))")
        await tx(actor, "(envelope hint (trust candidate))")
        await contradicted(actor)
        deadline = time.monotonic() + 10
        while True:
            old = open_reply(await actor.frame("old-fact"))["envelope"]["trust"]
            hint = open_reply(await actor.frame("hint"))["envelope"]["trust"]
            if (old, hint) == ("quarantined", "accepted"):
                break
            assert time.monotonic() < deadline, (old, hint)
            await asyncio.sleep(0.02)
        stats = await actor.stats()
        assert stats["governance_errors"] == 1 and stats["governance_passes"] >= 1
        entries = open_reply(await actor.audit())
        assert entries[0]["outcome"] == "error" and "policy bug" in entries[0]["why"]
        assert {e["holder"] for e in entries} == {"runtime:governance-worker"}
        actor.close()
        passes = stats["governance_passes"]
        await asyncio.sleep(0.1)
        assert (await actor.stats())["governance_passes"] <= passes + 1  # stopped at close
        return actor

    asyncio.run(run())


def test_a_context_the_actor_creates_carries_its_scope_for_the_embedded_api(
    tmp_path: Path,
) -> None:
    from service.store import open_context

    actor = ContextActor(str(tmp_path), "scoped", tenant="acme", project="payroll")
    try:

        async def run() -> None:
            await tx(actor, "(derive hint (x))")
            await tx(actor, "(envelope hint (trust candidate))")
            assert open_reply(await actor.meta())["tenant"] == "acme"
            assert open_reply(await actor.admit())["decisions"][0]["verdict"] == "accept"

        asyncio.run(run())
    finally:
        actor.close()
    with open_context(tmp_path, "scoped", create=False) as ctx:
        assert ctx.frame("hint")["envelope"]["project"] == "payroll"
        ctx.quarantine(["hint"])
        entries = ctx.audit()
    assert [(e["holder"], e["method"], e["tenant"]) for e in entries] == [
        (None, "admit", "acme"),
        ("embedded", "quarantine", "acme"),
    ]


def test_an_existing_context_without_a_scope_in_its_meta_keeps_none(tmp_path: Path) -> None:
    from service.store import open_context

    with open_context(tmp_path, "old") as ctx:
        ctx.commit("(context-tx (base-version 0) (derive hint (x)))")
    actor = ContextActor(str(tmp_path), "old", tenant="acme")
    try:
        assert open_reply(asyncio.run(actor.meta()))["tenant"] is None
    finally:
        actor.close()
    bad = ContextActor(str(tmp_path), "never", tenant="")
    try:
        with pytest.raises(RequestError):
            open_reply(asyncio.run(bad.version()))
    finally:
        bad.close()
    assert not (tmp_path / "never").exists()  # a bad scope creates nothing


def test_worker_options_are_checked(tmp_path: Path) -> None:
    actor = ContextActor(str(tmp_path), "opts", governance_every=-1)
    try:
        with pytest.raises(OutOfRange):
            open_reply(asyncio.run(actor.version()))
    finally:
        actor.close()


# -- on Ray ---------------------------------------------------------------------------


@pytest.mark.ray
def test_a_denial_audited_before_the_answer_survives_sigkill(
    ray_cluster: RayCluster, tmp_path: Path, namespace: str
) -> None:
    from actors import connect

    key = grant_key(tmp_path)
    admin = grants.issue(
        key,
        holder="ops",
        tenant="acme",
        grants=[("acme-*", ["admin"])],
        issued_by="x",
        now=time.time(),
    )
    thief = grants.issue(
        key,
        holder="thief",
        tenant="acme",
        grants=[("other", ["read"])],
        issued_by="x",
        now=time.time(),
    )
    ctx = connect(
        "acme-k",
        store_dir=tmp_path,
        namespace=namespace,
        tenant="acme",
        enforce=True,
        capability=admin,
    )
    try:
        with pytest.raises(PermissionDenied):
            ctx.with_capability(thief).frame("anything")
        old_pid = ctx.pid()
        os.kill(old_pid, signal.SIGKILL)  # right after the denial was answered
        deadline = time.monotonic() + 60
        while True:
            try:
                entries = ctx.audit()
                break
            except Exception:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert ctx.pid() != old_pid
        assert [(e["method"], e["holder"], e["outcome"]) for e in entries] == [
            ("frame", "thief", "denied")
        ]
    finally:
        ctx.shutdown()


@pytest.mark.ray
def test_the_actor_quarantines_unattended_and_the_cli_goes_through_it(
    ray_cluster: RayCluster, tmp_path: Path, context_name: str, namespace: str
) -> None:
    from actors import connect
    from morphz.cli import cli

    ctx = connect(context_name, store_dir=tmp_path, namespace=namespace, governance_every=0.1)
    try:
        for text in (
            "(derive old-fact (region cn-beijing))",
            "(derive new-fact (region cn-shanghai))",
            "(relate new-fact contradicts old-fact)",
        ):
            assert ctx.submit(f"(context-tx (base-version {ctx.version()}) {text})").committed
        deadline = time.monotonic() + 30
        while ctx.frame("old-fact")["envelope"]["trust"] != "quarantined":  # no explicit call
            assert time.monotonic() < deadline, "the worker did not quarantine the frame"
            time.sleep(0.05)
        assert ctx.frame("old-fact")["envelope"]["reviewed_by"] == "runtime:governance-worker"

        runner = CliRunner()
        base = ["--store", str(tmp_path), "--context", context_name, "--json"]
        listed = runner.invoke(cli, [*base, "review", "list"])
        assert listed.exit_code == 0, listed.output
        assert [i["frame"] for i in json.loads(listed.stdout)["items"]] == ["old-fact"]
        args = ["review", "accept", "old-fact", "--reviewer", "carol"]
        locked = runner.invoke(cli, [*base, *args])
        assert locked.exit_code == 1 and "store_locked" in locked.output
        through = runner.invoke(cli, [*base, *args, "--address", "auto", "--namespace", namespace])
        assert through.exit_code == 0, through.output
        assert json.loads(through.stdout)["via"] == "actor"
        assert ctx.frame("old-fact")["envelope"]["reviewed_by"] == "human:carol"
        audit = runner.invoke(cli, [*base, "audit"])  # read-only beside the actor
        entries = json.loads(audit.stdout)["entries"]
        assert [(e["holder"], e["method"]) for e in entries] == [
            ("runtime:governance-worker", "governance_pass"),
            (None, "review"),
        ]
        time.sleep(0.3)  # the worker leaves the human decision alone
        assert ctx.frame("old-fact")["envelope"]["trust"] == "accepted"
    finally:
        ctx.shutdown()
