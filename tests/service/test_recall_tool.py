"""Recall as a tool (R30): the result enters as an observation and changes no lifecycle."""

from __future__ import annotations

import json

from service.context import Context


def test_recall_result_is_an_observation_and_restore_brings_a_frame_back(ctx: Context) -> None:
    run = ctx.observe("tool_result", "pnpm --filter web build: ok; apps/web/dist/")
    ctx.claim()
    ctx.commit(f"""(context-tx (base-version 0)
      (derive case-b (from {run.ref}) (artifact "apps/web/dist/"))
      (derive procedure (from case-b) (steps "build then package"))
      (relate procedure supersedes case-b)
      (retire case-b {run.ref}))""")
    assert ctx.frame("case-b")["lifecycle"] == "retired"
    before = ctx.state()

    page, event = ctx.recall_recorded({"frame_id": "procedure", "depth": 2})

    ids = [n["id"] for n in page.nodes]
    assert ids == ["procedure", "case-b", run.ref]
    assert [n["lifecycle"] for n in page.nodes] == ["active", "retired", "retired"]
    assert event.kind == "recall_result"
    assert json.loads(ctx.read_event(event.ref)["text"])["nodes"][1]["id"] == "case-b"
    after = ctx.state()
    assert after["frames"] == before["frames"] and after["version"] == before["version"]
    assert ctx.claim().advanced is False  # a recall result alone does not advance the tick
    ctx.commit(f"(context-tx (base-version {ctx.version()}) (restore case-b))")
    assert ctx.frame("case-b")["lifecycle"] == "active"
