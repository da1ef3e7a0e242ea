"""The embedded API offers what every port serves: search, snapshot, export pages,
frame export/import, idempotent observation batches and cached compiles."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.capabilities import PermissionDenied
from protocol.compiler import Compiler, CompilerConfig
from protocol.errors import OutOfRange, RequestError, StoreError
from service.context import Context
from service.protocol_text import PROTOCOL_TEXT
from storage import LmdbStore
from storage.memory import MemoryBackend

KEY = b"k" * 32


@pytest.fixture
def stored(tmp_path: Path) -> Iterator[Context]:
    """A context on LMDB files (the search index lives beside them)."""
    ctx = Context(LmdbStore.open(tmp_path / "ctx", sync=False))
    yield ctx
    ctx.close()


def release(ctx: Context) -> str:
    """A claimed test report and a frame derived from it; the report's reference."""
    e = ctx.observe("tool_result", "regression suite for the eu-west region: 412 passed")
    ctx.claim()
    receipt = ctx.commit(
        f"(context-tx (base-version {ctx.version()})"
        f' (derive deploy-region (from {e.ref}) (region "eu-west") (tests passed)))'
    )
    assert receipt.committed
    return e.ref


def test_search_finds_a_frame_and_an_event_and_records_what_it_found(stored: Context) -> None:
    ref = release(stored)
    found = stored.search({"query": "region"})
    assert set(found) == {"ref", "hits", "recalled", "lag", "results"}
    assert found["hits"] == 2 and found["recalled"] == ["deploy-region"]
    assert found["lag"] == 0
    observed = stored.event(found["ref"])
    assert observed["kind"] == "recall_result"
    text = stored.read_event(found["ref"])["text"]
    assert "deploy-region" in text and ref in text


def test_search_sees_what_was_committed_just_before(stored: Context) -> None:
    release(stored)
    stored.commit(f"(context-tx (base-version {stored.version()}) (derive rollback (plan ready)))")
    assert stored.search({"query": "rollback"})["recalled"] == ["rollback"]


def test_search_respects_its_filters(stored: Context) -> None:
    release(stored)
    frames_only = stored.search({"query": "region", "kinds": ["frame"], "limit": 5})
    assert frames_only["hits"] == 1 and frames_only["recalled"] == ["deploy-region"]
    events_only = stored.search({"query": "region", "kinds": ["tool_result"]})
    assert events_only["hits"] == 1 and events_only["recalled"] == []
    assert stored.search({"query": "region", "id_prefix": "nothing/"})["hits"] == 0
    with pytest.raises(RequestError) as hidden:
        stored.search({"query": "region", "trust": ["quarantined"]})
    assert hidden.value.code == "not_permitted"
    with pytest.raises(OutOfRange):
        stored.search({"query": "region", "limit": 10_000})
    with pytest.raises(RequestError) as unknown:
        stored.search({"query": "region", "colour": "blue"})
    assert unknown.value.code == "bad_argument"


def test_search_needs_a_stored_context() -> None:
    ctx = Context(MemoryBackend())
    with pytest.raises(StoreError):
        ctx.search({"query": "anything"})


def test_snapshot_reads_version_and_frames_at_once(ctx: Context) -> None:
    release(ctx)
    snap = ctx.snapshot(["deploy-region", "missing"])
    assert snap == {
        "version": 1,
        "tick": 1,
        "frames": {
            "deploy-region": {"revision": 1, "lifecycle": "active", "protected": False},
            "missing": None,
        },
    }
    with pytest.raises(OutOfRange):
        ctx.snapshot([f"f{i}" for i in range(1025)])


def test_export_pages_the_log_and_ends_with_the_state(ctx: Context) -> None:
    release(ctx)
    for i in range(3):
        ctx.commit(f"(context-tx (base-version {ctx.version()}) (derive n{i}))")
    first = ctx.export(0, 2)
    assert [r["version"] for r in first["log"]] == [1, 2] and first["more"]
    assert first["frames"] == [] and first["events"] == []
    last = ctx.export(2, 5)
    assert [r["version"] for r in last["log"]] == [3, 4] and not last["more"]
    assert sorted(f["id"] for f in last["frames"]) == ["deploy-region", "n0", "n1", "n2"]
    assert [e["seq"] for e in last["events"]] == [1]
    with pytest.raises(OutOfRange):
        ctx.export(0, 0)


def test_a_frame_exported_from_one_context_imports_into_another(ctx: Context) -> None:
    release(ctx)
    with pytest.raises(RequestError) as no_key:  # the key is the port's, never an argument
        ctx.export_frame("deploy-region")
    assert no_key.value.code == "no_key" and ctx.audit() == []
    with pytest.raises(RequestError) as extra:
        ctx.export_frame("deploy-region", KEY)  # type: ignore[call-arg]
    assert extra.value.code == "bad_argument"
    package = ctx.acting(key=KEY).export_frame("deploy-region")
    other = Context(MemoryBackend(), name="other")
    sealed = other.acting(key=KEY)
    done = sealed.import_frame(package)
    assert done["id"] == "imported/default/deploy-region"
    assert done["receipt"]["status"] == "committed"
    body = other.frame(done["id"])["body"]
    assert body.startswith("(provenance (from-tenant ") and '(region "eu-west")' in body
    assert '(frame "deploy-region")' in body
    again = sealed.import_frame(package)
    assert again["receipt"]["duplicate"] and again["receipt"]["version"] == 1
    named = sealed.import_frame(package, "copy")
    assert named["id"] == "copy" and other.frame("copy")["body"] == body
    with pytest.raises(PermissionDenied):
        other.acting(key=b"x" * 32).import_frame(package)
    with pytest.raises(PermissionDenied):
        sealed.import_frame(b"not a package")
    with pytest.raises(RequestError) as text:  # a package is bytes: refused before any audit
        sealed.import_frame("not bytes")  # type: ignore[arg-type]
    assert text.value.code == "bad_argument"
    methods = [(a["method"], a["outcome"]) for a in other.audit()]
    assert methods == [("import_frame", "allowed")] * 3 + [("import_frame", "refused")] * 2
    assert [a["method"] for a in ctx.audit()] == ["export_frame"]
    assert ctx.audit()[0]["holder"] == "embedded"
    # Another holder and scope, as a remote port names them.
    ctx.acting(key=KEY, holder="curator", tenant="acme").export_frame("deploy-region")
    assert ctx.audit()[-1]["holder"] == "curator" and ctx.audit()[-1]["tenant"] == "acme"


def test_observe_batch_is_idempotent_per_event_id(ctx: Context) -> None:
    eid = "ev:" + "ab" * 10
    first = ctx.observe_batch(
        [("tool_result", "412 passed", "main", eid), ("external", "x", "main", None)]
    )
    assert first[0] == {"ref": "@e1", "id": eid, "duplicate": False}
    assert first[1]["ref"] == "@e2" and not first[1]["duplicate"]
    again = ctx.observe_batch([("tool_result", "412 passed", "main", eid)])
    assert again == [{**first[0], "duplicate": True}]
    with pytest.raises(RequestError) as reused:
        ctx.observe_batch([("tool_result", "another text", "main", eid)])
    assert reused.value.code == "event_id_reused"
    with pytest.raises(RequestError) as bad:
        ctx.observe_batch([("tool_result", "x", "main", "ev:nothex")])
    assert bad.value.code == "bad_event_id"
    assert ctx.version() == 0 and len(ctx.state()["events"]) == 2


def test_the_compile_cache_gives_what_a_fresh_compiler_gives(ctx: Context) -> None:
    config = CompilerConfig()
    release(ctx)
    previous = None
    for step in range(3):
        cached = ctx.compile("main", config, previous)
        fresh = ctx.backend.read(
            lambda v, p=previous: Compiler(config, protocol_text=PROTOCOL_TEXT).compile(
                v, session="main", previous=p
            )
        )
        assert cached == fresh
        ctx.observe("tool_result", f"step {step} done")
        ctx.claim()
        ctx.commit(f"(context-tx (base-version {ctx.version()}) (derive s{step} (done {step})))")
        previous = cached
    assert ctx.compile("main") == ctx.compile("main", CompilerConfig())
