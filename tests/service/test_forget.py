"""Forgetting (issue 11, item 9): an observation's text or a frame's body erased everywhere.

Every read path — reads, as-of reads, history, the log, export, recall, traces,
compiled inputs, the audit log, search, a fork made afterwards — is walked for
the forgotten text on both backends; bad input gets a typed error and changes
nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from protocol.errors import NotFound, RequestError, StoreError
from protocol.forget import ForgetReport, content_digest, is_tombstone_body
from service.context import Context
from service.forget import erasure_key_of
from storage import LmdbStore
from storage.memory import MemoryBackend

SECRET = "sk-live-ZEBRAQUOKKA42"
BODY_SECRET = "QUOKKAPASSPHRASE77"


def _dump(value: Any) -> str:
    return json.dumps(
        value, default=lambda o: o.model_dump() if hasattr(o, "model_dump") else repr(o)
    )


def leaks(ctx: Context, needle: str) -> list[str]:
    """Every read path of *ctx* that still shows *needle*."""
    found: list[str] = []

    def check(where: str, value: Any) -> None:
        text = value if isinstance(value, str) else _dump(value)
        if needle in text:
            found.append(where)

    state = ctx.state()
    check("state", state)
    version = state["version"]
    for f in state["frames"]:
        fid = f["id"]
        check(f"frame {fid}", ctx.frame(fid))
        check(f"history {fid}", ctx.history(fid))
        for v in range(version + 1):
            try:
                check(f"frame_at {fid} {v}", ctx.frame_at(fid, v))
            except NotFound:
                pass
        check(
            f"recall {fid}",
            ctx.recall({"frame_id": fid, "depth": 3, "direction": "both", "include_events": True}),
        )
        check(f"frames_valid_at {fid}", ctx.frames_valid_at(0.0, include_retired=True))
        package = ctx.acting(key=b"k" * 32).export_frame(fid)
        if needle.encode() in package:
            found.append(f"export_frame {fid}")
    for e in state["events"]:
        check(f"event {e['ref']}", ctx.event(e["ref"]))
        check(f"read_event {e['ref']}", ctx.read_event(e["ref"]))
    for v in range(1, version + 1):
        check(f"txlog {v}", ctx.txlog(v))
        check(f"influence {v}", ctx.influence(version=v))
    check("export", ctx.export())
    check("traces", ctx.traces())
    check("audit", ctx.audit())
    check("compile", ctx.compile("main").model_dump())
    return found


def _story(ctx: Context) -> tuple[str, str]:
    """A leaked key in a tool result, a frame that quotes another secret and cites it,
    a revision, a frame citing that frame, and a model-call trace."""
    report = ctx.observe("tool_result", f"deploy log: key {SECRET} accepted")
    ctx.claim()
    ctx.commit(
        f"(context-tx (base-version {ctx.version()})"
        f' (derive cfg (from {report.ref}) (pass "{BODY_SECRET}")))'
    )
    ctx.commit(
        f'(context-tx (base-version {ctx.version()}) (revise cfg (pass "{BODY_SECRET}-v2")))'
    )
    ctx.commit(
        f"(context-tx (base-version {ctx.version()}) (derive plan (from cfg) (step deploy)))"
    )
    ctx.record_trace({"session": "main", "frames_present": ["cfg", "plan"], "committed": [2]})
    return report.ref, "cfg"


def test_a_forgotten_text_and_body_are_found_by_no_read(ctx: Context) -> None:
    ref, fid = _story(ctx)
    before = ctx.version()
    # The walk does see them first, on every kind of path.
    assert {"history cfg", "frame_at cfg 1", "txlog 1", "export", "compile", "recall plan"} <= set(
        leaks(ctx, BODY_SECRET)
    )
    assert {"event @e1", "read_event @e1", "export", "compile"} <= set(leaks(ctx, SECRET))

    first = ctx.forget(ref, reason="leaked deploy key")
    assert isinstance(first, ForgetReport)
    assert first.kind == "event" and first.target == ref and not first.duplicate
    key = erasure_key_of(ctx.meta())
    assert first.digest == content_digest(key, f"deploy log: key {SECRET} accepted")
    second = ctx.forget(fid, reason="leaked passphrase", by="alice")
    assert second.kind == "frame" and second.log_versions == [1, 2] and second.history_rows == 2

    assert leaks(ctx, SECRET) == []
    assert leaks(ctx, BODY_SECRET) == []
    assert ctx.version() == before  # forgetting rewrites history, it adds no version

    # The records keep their ids, a digest, who, when and why.
    event = ctx.event(ref)
    assert event["forgotten"]["reason"] == "leaked deploy key"
    assert event["forgotten"]["by"] == "embedded"
    frame = ctx.frame(fid)
    assert frame["revision"] == 2 and frame["sources"] == [ref]
    assert frame["envelope"]["forgotten"]["by"] == "alice"
    assert frame["forgotten_sources"] == [ref]
    assert is_tombstone_body(ctx.frame_record(fid).body)
    assert [h["body"] for h in ctx.history(fid)] == [frame["body"], frame["body"]]
    # Frames that cite it keep the reference and show it as forgotten.
    plan = ctx.frame("plan")
    assert plan["sources"] == ["cfg"] and plan["forgotten_sources"] == ["cfg"]
    compiled = _dump(ctx.compile("main").model_dump())
    assert "(forgotten" in compiled and "from cfg" in compiled
    # The audit entries, written with the forget.
    rows = [r for r in ctx.audit() if r["method"] == "forget"]
    assert [(r["target"], r["why"], r["holder"]) for r in rows] == [
        (ref, "leaked deploy key", "embedded"),
        (fid, "leaked passphrase", "embedded"),
    ]
    assert rows[1]["by"] == "alice" and rows[1]["digest"] == second.digest


def test_a_fork_made_afterwards_never_carries_it(ctx: Context) -> None:
    ref, fid = _story(ctx)
    ctx.forget(ref, reason="leak")
    ctx.forget(fid, reason="leak")
    fork = ctx.fork(MemoryBackend())
    try:
        assert fork.version() == ctx.version()
        assert leaks(fork, SECRET) == [] and leaks(fork, BODY_SECRET) == []
        assert fork.frame(fid)["body"] == ctx.frame(fid)["body"]
        assert fork.event(ref)["forgotten"] == ctx.event(ref)["forgotten"]
        older = ctx.fork(MemoryBackend(), at_version=1)
        assert leaks(older, BODY_SECRET) == [] and leaks(older, SECRET) == []
        older.close()
    finally:
        fork.close()


def test_forgetting_twice_is_idempotent_and_writes_nothing(ctx: Context) -> None:
    ref, fid = _story(ctx)
    first = ctx.forget(fid, reason="leak")
    audit = ctx.audit()
    again = ctx.forget(fid, reason="another reason", by="bob")
    assert again.duplicate and again.digest == first.digest
    assert again.reason == "leak" and again.by == first.by and again.at == first.at
    assert ctx.audit() == audit
    assert ctx.forget(ref, reason="leak").duplicate is False
    assert ctx.forget(ref, reason="leak").duplicate is True


@pytest.mark.parametrize(
    ("target", "reason", "by", "error", "code"),
    [
        ("@e99", "leak", None, NotFound, "not_found"),
        ("nosuch", "leak", None, NotFound, "not_found"),
        ("ev:0123456789abcdef0123", "leak", None, NotFound, "not_found"),
        ("not a ref!", "leak", None, NotFound, "not_found"),
        ("cfg", None, None, RequestError, "missing_reason"),
        ("cfg", "   ", None, RequestError, "missing_reason"),
        ("cfg", "x" * 513, None, RequestError, "bad_argument"),
        ("cfg", "leak", "", RequestError, "bad_argument"),
        ("cfg", "leak", "bad\nname", RequestError, "bad_argument"),
    ],
)
def test_bad_input_is_a_typed_error_and_changes_nothing(
    ctx: Context, target: str, reason: str | None, by: str | None, error: type, code: str
) -> None:
    _story(ctx)
    before = (ctx.export(), ctx.audit())
    with pytest.raises(error) as err:
        ctx.forget(target, reason=reason, by=by)
    assert err.value.code == code
    assert (ctx.export(), ctx.audit()) == before


def test_a_non_text_target_is_refused(ctx: Context) -> None:
    with pytest.raises(RequestError) as err:
        ctx.forget(42, reason="leak")  # type: ignore[arg-type]
    assert err.value.code == "bad_argument"


def test_recall_and_search_results_that_carried_it_are_forgotten_too(tmp_path: Path) -> None:
    ctx = Context(LmdbStore.open(tmp_path / "c", sync=False))
    try:
        ref, fid = _story(ctx)
        found = ctx.search({"query": SECRET})
        assert found["hits"] >= 1
        page, recalled = ctx.recall_recorded({"frame_id": fid, "depth": 1})
        unrelated = ctx.observe("user_message", "nothing secret here")
        assert BODY_SECRET in ctx.read_event(recalled.ref)["text"]
        report = ctx.forget(fid, reason="leak")
        assert report.cascade == [recalled.ref]  # it recalled the frame
        report = ctx.forget(ref, reason="leak")
        assert report.cascade == [found["ref"]]  # it quoted the event
        assert leaks(ctx, SECRET) == [] and leaks(ctx, BODY_SECRET) == []
        assert ctx.event(unrelated.ref).get("forgotten") is None
        # The search index no longer finds it (it was rebuilt without it).
        index = ctx.searcher.index
        for needle in (SECRET, BODY_SECRET, "ZEBRAQUOKKA42", "QUOKKAPASSPHRASE77-v2"):
            assert index.search(needle).hits == (), needle
        # A fresh index built from the store alone agrees.
        index.rebuild()
        assert index.search(BODY_SECRET).hits == () and index.search(SECRET).hits == ()
        assert ctx.search({"query": BODY_SECRET})["hits"] == 0  # as a model searches
    finally:
        ctx.close()


def test_a_read_only_context_cannot_forget(tmp_path: Path) -> None:
    path = tmp_path / "c"
    with Context(LmdbStore.open(path, sync=False)) as ctx:
        ref, _ = _story(ctx)
    with Context(LmdbStore.open(path, readonly=True)) as ro:
        with pytest.raises(StoreError) as err:
            ro.forget(ref, reason="leak")
        assert err.value.code == "store_error"
        assert ro.event(ref).get("forgotten") is None


def test_logs_in_dict_form_and_client_ids_replay_after_a_forget(ctx: Context) -> None:
    from protocol.tx import ContextTx, Derive

    ctx.commit(
        ContextTx(base_version=0, ops=(Derive(id="cfg", body=(("pass", BODY_SECRET),)),)),
        client_id="agent-1/tx-1",
    )
    assert ctx.backend.read(lambda v: v.txlog(1))["text"] is None  # logged in dict form
    ctx.commit(
        f'(context-tx (base-version 1) (client-id "agent-1/tx-2") (revise cfg (pass "{BODY_SECRET}")))'
    )
    ctx.commit("(context-tx (base-version 2) (derive other (from cfg) (kept fine)))")
    report = ctx.forget("cfg", reason="leak")
    assert report.log_versions == [1, 2]
    assert leaks(ctx, BODY_SECRET) == []
    # A retry of a committed client id still answers its original receipt.
    retry = ctx.commit(
        ContextTx(base_version=0, ops=(Derive(id="cfg", body=(("pass", BODY_SECRET),)),)),
        client_id="agent-1/tx-1",
    )
    assert retry.duplicate and retry.version == 1
    fork = ctx.fork(MemoryBackend())
    try:
        assert fork.version() == 3 and leaks(fork, BODY_SECRET) == []
        assert fork.frame("other")["body"] == "(kept fine)"
        assert fork.txlog(1)["client_id"] == "agent-1/tx-1"
    finally:
        fork.close()


def test_field_edits_of_a_forgotten_frame_are_redacted_and_a_fork_replays(ctx: Context) -> None:
    ctx.commit("(context-tx (base-version 0) (derive cfg (keys) (n 0)))")
    ctx.commit(f'(context-tx (base-version 1) (append cfg (keys "{BODY_SECRET}")))')
    ctx.commit(f'(context-tx (base-version 1) (set cfg (note "{BODY_SECRET}")))')  # merged
    ctx.commit("(context-tx (base-version 3) (incr cfg (n 2)) (derive other (kept fine)))")
    report = ctx.forget("cfg", reason="leak")
    assert report.log_versions == [1, 2, 3, 4]
    assert leaks(ctx, BODY_SECRET) == []
    fork = ctx.fork(MemoryBackend())
    try:
        assert fork.version() == 4 and leaks(fork, BODY_SECRET) == []
        assert fork.frame("cfg")["body"] == ctx.frame("cfg")["body"]
        assert fork.frame("cfg")["revision"] == 4
        assert fork.frame("other")["body"] == "(kept fine)"
    finally:
        fork.close()


def test_reasons_quoting_it_are_scrubbed_and_frames_still_holding_it_reported(
    ctx: Context,
) -> None:
    """A reason that quotes the forgotten text is scrubbed from the log (both the record's
    reason and the transaction it keeps); another frame that copied the text is named in
    the report, left as it is, and goes too when forgotten in turn."""
    phone = "+1-555-0100-7788"
    report = ctx.observe("tool_result", phone)
    ctx.claim()
    ctx.commit(
        f'(context-tx (base-version {ctx.version()}) (reason "copied {phone} from the page")'
        f' (derive contact (from {report.ref}) (phone "{phone}")))'
    )
    ctx.commit(
        f'(context-tx (base-version {ctx.version()}) (reason "note the number")'
        f' (derive note (from contact) (remember "call {phone} first")))'
    )
    ctx.commit(f"(context-tx (base-version {ctx.version()}) (derive plain (from contact) (ok)))")
    version = ctx.version()
    done = ctx.forget(report.ref, reason="a customer's number", by="ops")
    assert done.scrubbed == [1] and sorted(done.still_in) == ["contact", "note"]
    logged = ctx.txlog(1)
    assert logged["reason"] == "copied [forgotten] from the page"
    assert '(reason "copied [forgotten] from the page")' in logged["text"]
    assert phone in ctx.frame("contact").body  # reported, not changed
    assert ctx.version() == version
    again = ctx.forget("contact", reason="the copy", by="ops")
    assert again.still_in == ["note"]
    ctx.forget("note", reason="the other copy", by="ops")
    assert leaks(ctx, phone) == []
    fork = ctx.fork(MemoryBackend())  # a replay of the scrubbed log makes the same frames
    assert [f["id"] for f in fork.state()["frames"]] == [f["id"] for f in ctx.state()["frames"]]


def test_short_texts_are_not_looked_for_elsewhere(ctx: Context) -> None:
    report = ctx.observe("tool_result", "yes")
    ctx.claim()
    ctx.commit(
        f'(context-tx (base-version {ctx.version()}) (reason "yes, it said yes")'
        f" (derive answer (from {report.ref}) (said yes)))"
    )
    done = ctx.forget(report.ref, reason="tidy", by="ops")
    assert done.scrubbed == [] and done.still_in == []
    assert ctx.txlog(1)["reason"] == "yes, it said yes"
