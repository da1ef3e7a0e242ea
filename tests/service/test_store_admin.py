"""A store's contexts through the service (`service.store`): opens that never create,
listing, drop under the writer lock, atomic fork, and the dry-run `Context.check`.

Real LMDB stores in a temporary directory; the second writer is a real open of
the same context.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.errors import NotFound, OutOfRange, RequestError, StoreLocked
from service.store import Store, open_context


def seeded(store: Path, name: str = "default") -> None:
    with open_context(store, name, create=True) as ctx:
        e = ctx.observe("user_message", "Ship v1 once the tests pass.")
        ctx.claim()
        assert ctx.commit(f"(context-tx (base-version 0) (derive release (from {e.ref}) (v 1)))")


def test_an_open_that_may_not_create_names_what_exists(tmp_path: Path) -> None:
    seeded(tmp_path, "alpha")
    seeded(tmp_path, "beta")
    for kwargs in ({"readonly": True}, {"create": False}):
        with pytest.raises(NotFound) as err:
            open_context(tmp_path, "alhpa", **kwargs)  # type: ignore[arg-type]
        assert "alpha, beta" in err.value.message and "morphz init" in err.value.message
    with pytest.raises(NotFound) as err:
        Store(tmp_path / "nowhere").open("default", readonly=True)
    assert "there is no store at" in err.value.message
    assert not (tmp_path / "nowhere").exists()
    assert Store(tmp_path).contexts() == ["alpha", "beta"]


def test_a_refused_creation_leaves_no_context(tmp_path: Path) -> None:
    with pytest.raises(OutOfRange):
        open_context(tmp_path, "bad", window=-1)
    assert not (tmp_path / "bad").exists()
    seeded(tmp_path)
    with pytest.raises(OutOfRange):  # an existing context is never removed by a bad open
        open_context(tmp_path, "default", history_keep=0)
    assert Store(tmp_path).exists("default")


def test_info_lists_counters_and_size(tmp_path: Path) -> None:
    seeded(tmp_path)
    with open_context(tmp_path, "empty", create=True, window=3):
        pass
    infos = Store(tmp_path).contexts_info()
    assert [i.name for i in infos] == ["default", "empty"]
    d, e = infos
    assert (d.version, d.tick, d.frames, d.events, d.window) == (1, 1, 1, 1, 8)
    assert (e.version, e.frames, e.events, e.window) == (0, 0, 0, 3)
    assert d.bytes > 0
    with pytest.raises(NotFound):
        Store(tmp_path / "nowhere").contexts_info()
    with pytest.raises(NotFound):
        Store(tmp_path).info("ghost")


def test_drop_is_refused_while_a_writer_holds_it(tmp_path: Path) -> None:
    seeded(tmp_path)
    store = Store(tmp_path)
    with store.open("default", create=False):
        with pytest.raises(StoreLocked):
            store.drop("default")
        assert store.exists("default")
    dropped = store.drop("default")
    assert dropped.events == 1 and store.contexts() == []
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    with pytest.raises(NotFound):
        store.drop("default")


def test_a_failed_fork_leaves_nothing_and_the_retry_works(tmp_path: Path) -> None:
    seeded(tmp_path)
    store = Store(tmp_path)
    with pytest.raises(OutOfRange) as err:
        store.fork("default", "task3", at_version=5)
    assert err.value.code == "future_version"
    with pytest.raises(OutOfRange) as err:
        store.fork("default", "task3", at_version=-1)
    assert err.value.code == "out_of_range"
    with pytest.raises(NotFound):
        store.fork("ghost", "task3")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["default"]
    doc = store.fork("default", "task3", at_version=1)
    assert (doc["context"], doc["version"], doc["origin"]) == ("task3", 1, "default")
    with open_context(tmp_path, "task3", readonly=True) as ctx:
        assert ctx.frame("release")["body"] == "(v 1)"
    with pytest.raises(RequestError) as exists:
        store.fork("default", "task3")
    assert exists.value.code == "exists"
    assert store.contexts() == ["default", "task3"]


def test_check_returns_the_receipt_and_writes_nothing(tmp_path: Path) -> None:
    seeded(tmp_path)
    tx = "(context-tx (base-version 1) (derive note (from @e1) (seen it)))"
    with open_context(tmp_path, "default", readonly=True) as ro:
        would = ro.check(tx, client_id="c-1")
        assert (would.status, would.version, would.client_id) == ("committed", 2, "c-1")
        rejected = ro.check("(context-tx (base-version 1) (retire @e1))")
        assert rejected.status == "rejected"
        assert rejected.errors[0].code == "causally_protected"
        assert ro.version() == 1
    with open_context(tmp_path, "default", create=False) as ctx:
        real = ctx.commit(tx, client_id="c-1")
        assert (real.status, real.version) == ("committed", 2)
        assert real.duplicate is False  # the check recorded no client id
