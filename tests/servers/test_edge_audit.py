"""The edge's refusals are audited: one entry each up to a rate, then counted; in batches.

A real client (httpx) against the edge middleware in front of an app that counts what
reaches it; the audit's sink collects what the edge hands it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx

from servers.edge import EdgeMiddleware, EdgePolicy
from servers.edge_audit import FLUSH_EVERY, PER_WINDOW, EdgeAudit


def test_every_refusal_is_audited_rate_limited_and_batched() -> None:
    batches: list[list[dict[str, Any]]] = []
    reached: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    policy = EdgePolicy(max_body_bytes=1024, audit=EdgeAudit(batches.append))
    edge = EdgeMiddleware(app, policy)

    async def attack() -> list[int]:
        transport = httpx.ASGITransport(app=edge, client=("203.0.113.9", 4444))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            forged = await c.get("/v1/contexts", headers={"host": "a\nb.example"})
            codes = [(await c.get("/v1/contexts", headers={"host": "evil.example"})).status_code
                     for _ in range(30)]  # fmt: skip
            for _ in range(3):
                r = await c.get("/v1/contexts", headers={"origin": "http://evil.example"})
                codes.append(r.status_code)
            r = await c.post(
                "/v1/x", content=b"x" * 4096, headers={"content-type": "application/json"}
            )
            codes.append(r.status_code)
            codes.append(forged.status_code)
            assert batches == []  # nothing written on a request's path
            await asyncio.sleep(FLUSH_EVERY * 3)
            return codes

    codes = asyncio.run(attack())
    assert codes == [421] * 30 + [403] * 3 + [413] + [421]
    assert reached == []  # nothing reached the app
    entries = [e for batch in batches for e in batch]
    assert len(batches) == 1, batches  # one batch for the whole burst
    single = [e for e in entries if not e.get("coalesced")]
    by_code = {
        c: sum(1 for e in single if e["code"] == c)
        for c in ("bad_host", "cross_origin", "too_large")
    }
    assert by_code == {"bad_host": PER_WINDOW, "cross_origin": 3, "too_large": 1}, by_code
    (counted,) = [e for e in entries if e.get("coalesced")]
    assert counted["code"] == "bad_host" and counted["count"] == 31 - PER_WINDOW
    assert all(e["client"] == "203.0.113.9" for e in entries)
    assert single[0]["status"] == 421 and single[0]["host"] == "a\\nb.example"  # one line
    assert single[1]["host"] == "evil.example" and single[1]["path"] == "/v1/contexts"


def test_refusals_are_chained_into_a_log_that_verifies_and_names_an_edited_entry(
    tmp_path: Path,
) -> None:
    """What ``morphz serve`` does: the edge's refusals go into the audit log of
    ``<store>/.edge-audit``, chained under the audit key like a context's, and ``morphz
    audit --verify`` exits 0 on it; an entry edited afterwards is named (exit 1). Before,
    they went only to the server's log."""
    import json

    import lmdb
    from click.testing import CliRunner

    from morphz.cli import cli as morphz_cli
    from servers.edge_audit import ChainedSink, edge_log_dir
    from storage.lmdb.records import _pack, _u64, _unpack

    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("a refused request reached the app")

    sink = ChainedSink(tmp_path)
    edge = EdgeMiddleware(app, EdgePolicy(max_body_bytes=1024, audit=EdgeAudit(sink)))

    async def attack() -> None:
        transport = httpx.ASGITransport(app=edge, client=("203.0.113.9", 4444))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            await c.get("/v1/contexts", headers={"host": "a\nb.example"})
            for _ in range(PER_WINDOW + 3):
                await c.get("/v1/contexts", headers={"host": "evil.example"})
            await c.post("/v1/x", content=b"x" * 4096, headers={"content-type": "application/json"})
            await asyncio.sleep(FLUSH_EVERY * 3)

    asyncio.run(attack())
    sink.drain()
    root = edge_log_dir(tmp_path)

    def verify() -> tuple[int, dict[str, Any]]:
        done = CliRunner().invoke(
            morphz_cli, ["--store", str(root), "--json", "audit", "edge", "--verify"]
        )
        return done.exit_code, json.loads(done.output)

    code, report = verify()
    assert code == 0 and report["ok"] and report["checked"] >= 3, report
    listed = CliRunner().invoke(morphz_cli, ["--store", str(root), "--json", "audit", "edge"])
    rows = json.loads(listed.output)["entries"]
    assert {r["code"] for r in rows} == {"bad_host", "too_large"}
    assert sum(r["count"] for r in rows) == PER_WINDOW + 5  # every refusal counted
    assert any(r["host"] == "a\\nb.example" for r in rows)  # escaped: no forged line
    assert all(r["op"] == "edge" and not r["allowed"] and r["mac"] for r in rows)
    env = lmdb.open(str(root / "edge"), max_dbs=32, subdir=True)
    try:
        with env.begin(write=True) as txn:
            db = env.open_db(b"audit", txn=txn)
            rec = _unpack(txn.get(_u64(2), db=db))
            rec["client"] = "198.51.100.1"
            txn.put(_u64(2), _pack(rec), db=db)
    finally:
        env.close()
    code, report = verify()
    assert code == 1 and report["bad"] == 2, report
