"""The embedded API answers the typed reply models a Ray handle answers (docs/api.md).

:func:`script` is one script body, written once against whatever context it is
given; ``tests/actors/test_shapes_ray.py`` runs it on an embedded context and a
``ContextHandle`` and compares the replies. Here it runs embedded (on LMDB
files and in memory), and each reply must survive the trip the actor gives it
(``plain`` → msgpack → the model's ``decode``) unchanged.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

from protocol import replies
from protocol.errors import NotFound, OutOfRange, WireError
from protocol.receipts import Receipt
from protocol.replies import (
    ClaimReply,
    Counter,
    DeliverReply,
    EventPage,
    EventReply,
    FrameReply,
    HistoryEntry,
    MetaReply,
    ObserveReply,
    RecallReply,
    Reply,
    SearchReply,
    SnapshotReply,
    StateReply,
    plain,
)
from protocol.wire import pack, unpack
from service.context import Context
from service.store import open_context

EXPECTED: dict[str, type] = {
    "observe": ObserveReply,
    "claim": ClaimReply,
    "submit": Receipt,
    "version": int,
    "tick": int,
    "deliver": DeliverReply,
    "frame": FrameReply,
    "event": EventReply,
    "read_event": EventPage,
    "state": StateReply,
    "history": HistoryEntry,
    "snapshot": SnapshotReply,
    "meta": MetaReply,
    "observe_many": ObserveReply,
    "search": SearchReply,
    "recall_observation": RecallReply,
}
"""The reply type of each call of :func:`script` (of the items, for lists)."""


def script(ctx: Any, *, search: bool = True) -> list[tuple[str, Any]]:
    """One script body for an embedded ``Context`` or a ``ContextHandle``: the calls and
    their replies, in order. Nothing in it knows which port it runs on."""
    out: list[tuple[str, Any]] = []
    report = ctx.observe("tool_result", "regression suite: 412 passed, 0 failed")
    request = ctx.observe("user_message", "Ship v1 once the regression tests pass.")
    out += [("observe", report), ("observe", request)]
    out.append(("claim", ctx.claim()))
    receipt = ctx.submit(
        f"(context-tx (base-version {ctx.version()})"
        f" (derive test-result (from {report.ref}) (tests passed))"
        f" (derive release (from {request.ref}) (stage ready))"
        " (relate test-result supports release)"
        f" (retire {report.ref}))"
    )
    out.append(("submit", receipt))
    out.append(("version", ctx.version()))
    out.append(("tick", ctx.tick()))
    out.append(("deliver", ctx.deliver(request.ref)))
    out.append(("frame", ctx.frame("test-result")))
    out.append(("event", ctx.event(report.ref)))
    out.append(("read_event", ctx.read_event(report.ref, 0, 16)))
    out.append(("state", ctx.state()))
    out.append(("history", ctx.history("test-result")))
    out.append(("snapshot", ctx.snapshot(["test-result", "nope"])))
    out.append(("meta", ctx.meta()))
    more = ctx.observe_many([("tool_result", "lint: clean", "main"), ("external", "x", "side")])
    out.append(("observe_many", more))
    recalled = ctx.recall_observation({"frame_id": "test-result", "depth": 1}, session="main")
    out.append(("recall_observation", recalled))
    if search:
        out.append(("search", ctx.search({"query": "passed"}, "main")))
    return out


VOLATILE = frozenset({"time", "created", "client_id", "who", "settings"})
"""Keys that differ between two runs, or between ports by design (``settings``: how the
port serving a context records it, None embedded)."""


def normalise(value: Any) -> Any:
    """*value* as plain data without what differs between two runs: random event ids and
    client ids, wall-clock times, the writer, and the serving port's settings."""
    if isinstance(value, Receipt):
        value = value.to_dict()
    value = plain(value)
    if isinstance(value, dict):
        return {k: normalise(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [normalise(v) for v in value]
    if isinstance(value, str) and value.startswith("ev:"):
        return "ev:…"
    if isinstance(value, bytes):  # a sealed package: sealed at a moment, with a port's key
        return "bytes…"
    return value


def check_types(replies: list[tuple[str, Any]]) -> None:
    """Each reply (each item of a list reply) is exactly the model of its call."""
    for call, reply in replies:
        items = reply if isinstance(reply, list) else [reply]
        assert items, call
        for item in items:
            assert isinstance(item, EXPECTED[call]), (call, type(item).__name__)
            if isinstance(item, Reply):
                assert type(item) is EXPECTED[call], (call, type(item).__name__)


@pytest.fixture
def lmdb_ctx(tmp_path: Path) -> Any:
    ctx = open_context(tmp_path / "store", "default", sync=False)
    yield ctx
    ctx.close()


def test_the_embedded_api_answers_the_handles_models(lmdb_ctx: Context) -> None:
    replies = script(lmdb_ctx)
    check_types(replies)
    got = dict(replies)
    assert got["observe"].keys() == ["ref", "id", "duplicate"]
    assert got["claim"].claimed == ["@e1", "@e2"] and got["claim"].advanced
    assert got["frame"].body == "(tests passed)" and got["frame"]["sources"] == ["@e1"]
    assert got["read_event"].text == "regression suite"
    assert got["event"].lifecycle == "retired" and got["deliver"].delivered
    assert [h.op for h in got["history"]] == ["derive"]
    assert got["snapshot"].frames["nope"] is None
    assert "test-result" in got["search"].recalled and got["search"].hits >= 1
    assert got["version"] == 1 and got["tick"] == 1
    assert got["recall_observation"].recalled == ["test-result", "release"]
    assert got["recall_observation"].next_cursor is None


def test_every_reply_survives_the_actors_wire_unchanged(lmdb_ctx: Context) -> None:
    """What the actor packs (``plain``) decodes on the handle into an equal model."""
    for call, reply in script(lmdb_ctx):
        for item in reply if isinstance(reply, list) else [reply]:
            if isinstance(item, Reply):
                back = type(item).decode(unpack(pack(plain(item))))
                assert back == item and back.keys() == item.keys(), call
                assert normalise(back) == normalise(item)


def test_the_script_runs_the_same_on_both_backends(make_ctx: Any, tmp_path: Path) -> None:
    """Memory and LMDB answer the same dumps (search needs a store directory)."""
    other = open_context(tmp_path / "other", "default", sync=False)
    try:
        here, there = script(make_ctx(), search=False), script(other, search=False)
    finally:
        other.close()
    check_types(here)
    assert [(c, type(r)) for c, r in here] == [(c, type(r)) for c, r in there]
    assert [(c, normalise(r)) for c, r in here] == [(c, normalise(r)) for c, r in there]


def test_version_and_tick_are_methods_and_the_bare_form_still_reads(ctx: Context) -> None:
    assert type(ctx.version()) is int and type(ctx.tick()) is int and ctx.version() == 0
    ctx.submit("(context-tx (base-version 0) (derive a (x 1)))")
    assert ctx.version() == 1 and ctx.meta().version == 1
    bare = ctx.version
    assert isinstance(bare, Counter)
    assert plain({"v": bare}) == {"v": 1} and type(plain(bare)) is int  # no warning: no bare use


def test_the_bare_counter_warns_once_per_process(
    ctx: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(replies, "_BARE_WARNED", False)
    bare = ctx.version
    with pytest.warns(DeprecationWarning, match=r"ctx\.version\(\)"):
        assert bare == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second bare use says nothing
        assert f"{ctx.tick}" == "0" and ctx.version + 1 == 1


def test_replies_are_frozen_mappings(ctx: Context) -> None:
    report = ctx.observe("tool_result", "x")
    assert report["ref"] == report.ref == "@e1" and dict(report)["duplicate"] is False
    assert report == {"ref": "@e1", "id": report.id, "duplicate": False}
    assert report.to_dict() == report.as_dict() == dict(report)
    with pytest.raises(TypeError):
        report["ref"] = "@e9"  # type: ignore[index]
    with pytest.raises(ValueError):
        report.ref = "@e9"
    with pytest.raises(KeyError):
        ctx.claim()["nope"]


def test_bad_input_gets_the_same_typed_errors_and_changes_nothing(ctx: Context) -> None:
    ctx.observe("tool_result", "x")
    before = normalise(ctx.state())
    with pytest.raises(NotFound):
        ctx.frame("nope")
    with pytest.raises(NotFound):
        ctx.event("@e99")
    with pytest.raises(NotFound):
        ctx.history("nope")
    with pytest.raises(OutOfRange):
        ctx.read_event("@e1", -1, 4)
    with pytest.raises(OutOfRange):
        ctx.snapshot(["f"] * 5000)
    assert normalise(ctx.state()) == before


def test_a_reply_of_another_shape_is_refused_at_the_boundary() -> None:
    with pytest.raises(WireError, match="malformed ObserveReply"):
        ObserveReply.decode({"ref": "@e1", "id": "ev:1"})
    with pytest.raises(WireError, match="malformed HistoryEntry"):
        HistoryEntry.decode(
            {
                "version": 1,
                "base_version": 0,
                "kind": "model",
                "reason": None,
                "op": "derive",
                "extra": 1,
            }
        )
    with pytest.raises(WireError, match="malformed SearchReply"):
        SearchReply.decode({"ref": "@e1", "hits": "2", "recalled": [], "lag": 0})


def every_operation(ctx: Any) -> list[tuple[str, Any]]:
    """:func:`script`, then every registered operation once, in declaration order, as the
    example its declaration gives (service/operations.py); fails when one has none."""
    from service.operations import operations

    missing = [op.name for op in operations() if op.example is None]
    assert not missing, f"give these operations an example in their declaration: {missing}"
    script(ctx, search=False)
    # A candidate frame for the governance examples: derived from a risky observation.
    risky = ctx.observe("external", "the deploy window is Friday", risky=True)
    ctx.claim()
    ctx.submit(
        f"(context-tx (base-version {ctx.version()}) (derive draft (from {risky.ref}) (window fri)))"
    )
    # Embedded, the port's sealing key is the caller's to give (the actor uses its own).
    port = ctx.acting(key=b"shape-test-key" * 3) if isinstance(ctx, Context) else ctx
    return [(op.name, op.example.run(port, op.name)) for op in operations() if op.example]


def test_every_registered_operation_answers_its_declared_reply(lmdb_ctx: Any) -> None:
    from pydantic import TypeAdapter

    from service.operations import Operations

    for name, reply in every_operation(lmdb_ctx):
        TypeAdapter(getattr(Operations, name).reply).validate_python(reply)
        assert normalise(reply) == normalise(unpack(pack(plain(reply)))), name
