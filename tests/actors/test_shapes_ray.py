"""One script body against an embedded context and a Ray handle: the same reply types and
the same dumps (docs/api.md), and the same typed errors for the same bad input."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from actors import ContextHandle
from protocol.errors import MorphzError
from service.context import Context
from service.store import open_context
from tests.service.test_shapes import check_types, every_operation, normalise, script

pytestmark = pytest.mark.ray


@pytest.fixture
def embedded(tmp_path: Path, context_name: str) -> Iterator[Context]:
    # The actor settles its scope (tenant and project "default"); open the embedded
    # context in the same scope, so the frames' envelopes compare equal.
    ctx = open_context(
        tmp_path / "embedded", context_name, sync=False, tenant="default", project="default"
    )
    yield ctx
    ctx.close()


def test_one_script_body_gives_the_same_types_and_dumps(
    handle: ContextHandle, embedded: Context
) -> None:
    here, there = script(embedded), script(handle)
    check_types(here)
    check_types(there)
    assert [(c, type(r)) for c, r in here] == [(c, type(r)) for c, r in there]
    for (call, mine), (_, theirs) in zip(here, there, strict=True):
        assert normalise(mine) == normalise(theirs), call
    # The typed form and the mapping form read the same on both.
    for replies in (here, there):
        frame = dict(replies)["frame"]
        assert frame.body == frame["body"] == "(tests passed)"


BAD: list[tuple[str, Callable[[Any], Any]]] = [
    ("unknown frame", lambda c: c.frame("nope")),
    ("unknown event", lambda c: c.event("@e99")),
    ("unknown history", lambda c: c.history("nope")),
    ("negative offset", lambda c: c.read_event("@e1", -1, 4)),
    ("too many snapshot ids", lambda c: c.snapshot(["f"] * 5000)),
    ("deliver a tool result", lambda c: c.deliver("@e1")),
    ("empty kind", lambda c: c.observe("", "x")),
]


def test_bad_input_gets_the_same_typed_error_on_both_and_changes_nothing(
    handle: ContextHandle, embedded: Context
) -> None:
    for ctx in (embedded, handle):
        ctx.observe("tool_result", "x")
    before = [normalise(c.state()) for c in (embedded, handle)]
    for what, call in BAD:
        errors = []
        for ctx in (embedded, handle):
            with pytest.raises(MorphzError) as info:
                call(ctx)
            errors.append((type(info.value), info.value.code))
        assert errors[0] == errors[1], (what, errors)
    assert [normalise(c.state()) for c in (embedded, handle)] == before


def test_every_registered_operation_the_same_on_both(
    handle: ContextHandle, embedded: Context
) -> None:
    here, there = every_operation(embedded), every_operation(handle)
    assert [(c, type(r)) for c, r in here] == [(c, type(r)) for c, r in there]
    for (call, mine), (_, theirs) in zip(here, there, strict=True):
        mine, theirs = normalise(mine), normalise(theirs)
        # The handle submits under a fresh client id, logged in the text of each record.
        records = [mine, theirs] if call == "txlog" else []
        if call == "export":
            records = [*mine["log"], *theirs["log"]]
        for record in records:
            for key in ("text", "tx"):
                record.pop(key)
        if call == "forget":  # when, the store's own digest key, and who (no capability)
            for key in ("at", "digest", "by"):
                mine.pop(key), theirs.pop(key)
        assert mine == theirs, call
