"""Receipts that let a writer keep going without a read: ``changed_since_base`` on a rebased
commit, ``current`` on a conflict rejection; and the one consistent read to base on."""

from __future__ import annotations

from typing import Any

import pytest

from actors.client.updates import Updater
from harness.agent_threads import learn
from protocol.errors import OutOfRange, RequestError
from protocol.forms import Symbol
from protocol.receipts import MAX_CHANGES_LISTED, Conflict, Current, Receipt
from protocol.tx import ContextTx, Derive, Revise
from service.context import Context


def _derive(ctx: Context, fid: str, n: int = 0) -> Receipt:
    base = ctx.version()
    return ctx.commit(
        ContextTx(base_version=base, ops=(Derive(id=fid, body=((Symbol("count"), n),)),))
    )


def _revise(base: int, fid: str, n: int) -> ContextTx:
    return ContextTx(base_version=base, ops=(Revise(id=fid, body=((Symbol("count"), n),)),))


def test_a_commit_lists_nothing_and_a_far_behind_rejection_lists_nothing(ctx: Context) -> None:
    _derive(ctx, "a")
    _derive(ctx, "b")
    base = ctx.version()
    ctx.commit(_revise(base, "b", 1))
    r = ctx.commit(_revise(base, "a", 1))
    assert r.committed and r.rebased and r.changed_since_base == () and r.current == ()
    assert Receipt.from_dict(ctx.txlog(r.version)["receipt"]) == r
    start = ctx.version()
    for n in range(MAX_CHANGES_LISTED + 1):
        ctx.commit(_revise(start + n, "b", n + 2))
    far = ctx.commit(_revise(start, "b", 0))
    assert far.errors[0].code == "conflict" and far.changed_since_base == ()
    assert far.current[0].body == f"(count {MAX_CHANGES_LISTED + 2})"


def test_a_rejection_in_a_group_lists_the_earlier_members(ctx: Context) -> None:
    _derive(ctx, "a")
    _derive(ctx, "b")
    base = ctx.version()
    first, second, third = ctx.commit_many(
        [_revise(base, "b", 1), _revise(base, "a", 1), _revise(base, "a", 2)]
    )
    assert first.committed and second.committed and not third.committed
    assert third.changed_since_base == (
        Conflict(id="a", version=base + 2),
        Conflict(id="b", version=base + 1),
    )
    assert third.current[0].body == "(count 1)"


def test_conflict_rejection_carries_the_frame_as_it_stands_now(ctx: Context) -> None:
    _derive(ctx, "a")
    base = ctx.version()
    won = ctx.commit(_revise(base, "a", 7))
    lost = ctx.commit(_revise(base, "a", 8))
    assert not lost.committed and lost.errors[0].code == "conflict"
    assert lost.version == won.version
    assert lost.current == (
        Current(id="a", version=won.version, revision=2, lifecycle="active", body="(count 7)"),
    )
    assert lost.changed_since_base == (Conflict(id="a", version=won.version),)
    # Rebuilt from the receipt alone (no read), the retry commits.
    again = ctx.commit(_revise(lost.version, "a", 8))
    assert again.committed and not again.rebased
    # Other rejections carry nothing.
    bad = ctx.commit(_revise(ctx.version(), "missing", 1))
    assert not bad.committed and bad.current == ()


def test_receipts_stay_backward_compatible_on_the_wire(ctx: Context) -> None:
    _derive(ctx, "a")
    base = ctx.version()
    ctx.commit(_revise(base, "a", 1))
    lost = ctx.commit(_revise(base, "a", 2))
    doc = lost.to_dict()
    assert Receipt.from_dict(doc) == lost
    old = {k: v for k, v in doc.items() if k not in ("changed_since_base", "current")}
    parsed = Receipt.from_dict(old)
    assert parsed.changed_since_base == () and parsed.current == ()
    with pytest.raises(ValueError):
        Receipt.from_dict({**doc, "current": [{"id": "a"}]})  # version is required


def test_read_for_update_gives_version_and_bodies_from_one_read(ctx: Context) -> None:
    _derive(ctx, "a", 3)
    r = ctx.commit(_revise(ctx.version(), "a", 4))
    got = ctx.read_for_update(["a", "missing"])
    assert got.version == r.version
    a: dict[str, Any] = got.frames["a"]  # type: ignore[assignment]
    assert a["body"] == "(count 4)" and a["body_forms"] == [["count", 4]]
    assert a["revision"] == 2 and a["version"] == r.version
    assert got.frames["missing"] is None
    with pytest.raises(OutOfRange):
        ctx.read_for_update([f"f{i}" for i in range(1025)])


def test_updater_rebuilds_from_a_rejection_without_reading(ctx: Context) -> None:
    _derive(ctx, "a", 0)
    start = ctx.read_for_update(["a"])

    def bump(frame: dict[str, Any] | None) -> tuple[Any, ...]:
        assert frame is not None
        return ((Symbol("count"), frame["body_forms"][0][1] + 1),)

    up = Updater("a", bump, "inc", 5)
    up.read(start)
    tx = up.tx()
    ctx.commit(_revise(start.version, "a", 10))  # another writer wins
    receipt = ctx.commit(tx)
    assert up.outcome(tx, receipt) is None
    assert up.rebased(receipt)
    tx2 = up.tx()
    receipt2 = ctx.commit(tx2)
    assert up.outcome(tx2, receipt2) is True
    assert ctx.frame("a")["body"] == "(count 11)"
    result = up.result(receipt2)
    assert (result.attempts, result.rejections, result.reads) == (2, 1, 1)
    assert result.frame is not None and result.frame["version"] == receipt2.version


@pytest.mark.parametrize(
    "args",
    [
        ("a", "not callable", "r", 5),
        ("a", lambda f: (), "r", 0),
        ("a", lambda f: (), "r", 10_001),
        ("a", lambda f: (), "r", True),
        ("a", lambda f: (), 3, 5),
    ],
)
def test_updater_refuses_bad_arguments(args: tuple[Any, ...]) -> None:
    with pytest.raises(RequestError):
        Updater(*args)


def test_updater_refuses_a_bad_body_and_a_bad_known_state() -> None:
    up = Updater("a", lambda f: ("not a form", object()), "r", 3)
    with pytest.raises(RequestError):
        up.tx()
    with pytest.raises(RequestError):
        Updater("a", lambda f: (), "r", 3).known({"body": "(x)"})


def test_a_writer_learns_from_receipts_what_a_read_would_tell(ctx: Context) -> None:
    _derive(ctx, "mine")
    base = ctx.version()
    theirs = _derive(ctx, "theirs")
    known: dict[str, bool] = {"mine": True}
    r = ctx.commit(_revise(base, "mine", 1))
    assert learn(known, r) is None and known == {"mine": True}  # a commit: read as planned
    won = ctx.commit(_revise(r.version, "theirs", 5))
    lost = ctx.commit(_revise(theirs.version, "theirs", 6))
    assert learn(known, lost) == won.version
    assert known == {"theirs": True, "mine": True}
    gone = ctx.commit(_revise(ctx.version(), "missing", 1))
    assert learn(known, gone) is None
    # Rebuilt on the receipt's version, with no read, the retry commits.
    assert ctx.commit(_revise(won.version, "theirs", 6)).committed
