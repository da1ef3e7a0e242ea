"""A full store: a commit that cannot be written gets ``store_full``, nothing of it applied
or acknowledged; reads go on; writes resume once there is room. Two ways to be full, on
real LMDB files: the map at its ceiling (``max_map_size``, ``MORPHZ_MAX_MAP_SIZE``), and a
small real filesystem (a 2 MiB tmpfs mounted in a private mount namespace of a child
process: ``unshare -m``, which needs root, as this machine and CI run)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from actors.client.replies import open_reply
from actors.server.context_actor import ContextActor
from protocol.errors import NotFound, StoreError, StoreFull
from service.context import Context
from storage import LmdbStore

BODY = "x" * 3000  # a few frames fill a small map quickly


def fill(ctx: Context, limit: int = 10_000) -> tuple[int, StoreFull]:
    """Commit until the store is full: the number acknowledged and the refusal."""
    for i in range(limit):
        try:
            receipt = ctx.commit(
                f'(context-tx (base-version {ctx.version()}) (derive f{i} (text "{BODY}{i}")))',
                client_id=f"c{i}",
            )
        except StoreFull as full:
            return i, full
        assert receipt.committed, receipt.to_dict()
    raise AssertionError(f"{limit} commits and the store is still not full")


def test_a_store_at_its_map_ceiling_refuses_with_store_full_and_resumes(tmp_path: Path) -> None:
    path = tmp_path / "c"
    store = LmdbStore.open(path, sync=False, map_size=1 << 20, max_map_size=2 << 20)
    ctx = Context(store, name="c")
    acked, full = fill(ctx)
    assert full.code == "store_full" and isinstance(full, StoreError) and acked > 10
    version = ctx.version()
    assert version == acked  # nothing of the refused commit applied
    # The refused commit again, under its client id: refused the same way, nothing applied.
    retry = f'(context-tx (base-version {version}) (derive late (text "{BODY}late")))'
    with pytest.raises(StoreFull):
        ctx.commit(retry, client_id=f"c{acked}")
    assert ctx.version() == version
    with pytest.raises(NotFound):
        ctx.frame("late")
    assert ctx.frame(f"f{acked - 1}") is not None  # reads go on
    ctx.close()
    # room made (a higher ceiling): the same retry commits, every acknowledged commit is there
    store = LmdbStore.open(path, sync=False, max_map_size=8 << 20)
    with Context(store, name="c") as ctx:
        receipt = ctx.commit(retry, client_id=f"c{acked}")
        assert receipt.committed and receipt.version == version + 1
        assert all(ctx.frame(f"f{i}") is not None for i in range(acked))


def test_a_context_actor_answers_store_full_and_keeps_serving_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MORPHZ_MAX_MAP_SIZE", str(1 << 20))  # the store's ceiling: 1 MiB

    async def run() -> None:
        actor = ContextActor(str(tmp_path), "full")
        try:
            assert actor._open_error is None
            refused = None
            for i in range(2000):
                version = open_reply(await actor.version())
                try:
                    await actor_commit(actor, version, i)
                except StoreFull as e:
                    refused = e
                    break
            assert refused is not None and refused.code == "store_full"
            assert open_reply(await actor.version()) == version  # nothing half-applied
            assert open_reply(await actor.frame(f"f{version - 1}"))["id"] == f"f{version - 1}"
        finally:
            actor.close()

    asyncio.run(run())


async def actor_commit(actor: ContextActor, version: int, i: int) -> None:
    from actors.client.handle import ContextHandle, decode_receipt

    _, payload = ContextHandle.prepare(
        f'(context-tx (base-version {version}) (derive f{i} (t "{BODY}")))', f"c{i}"
    )
    receipt = decode_receipt(await actor.submit(payload))  # raises the refusal it answers
    assert receipt.committed, receipt


FULL_DISK = textwrap.dedent(
    """
    import json, os, sys
    from protocol.errors import StoreFull
    from service.store import open_context
    root, filler = sys.argv[1], sys.argv[2]
    ctx = open_context(root, "c")
    acked, refusal, body = 0, None, "x" * 3000
    for i in range(100_000):
        try:
            r = ctx.commit(
                f'(context-tx (base-version {ctx.version()}) (derive f{i} (t "{body}{i}")))',
                client_id=f"c{i}",
            )
        except StoreFull as e:
            refusal = e.code
            break
        assert r.committed
        acked += 1
    version_after = ctx.version()
    readable = all(ctx.frame(f"f{i}")["id"] == f"f{i}" for i in range(acked))
    os.remove(filler)  # room made
    r = ctx.commit(f"(context-tx (base-version {version_after}) (derive late (y)))", client_id="l")
    print(json.dumps({"acked": acked, "refusal": refusal, "version_after": version_after,
                      "readable": readable, "resumed": r.committed, "final": ctx.version()}))
    ctx.close()
    """
)


@pytest.mark.subprocess
def test_a_full_filesystem_gives_store_full_and_writes_resume_when_space_is_freed(
    tmp_path: Path,
) -> None:
    unshare = shutil.which("unshare")
    assert unshare is not None, "util-linux's unshare is needed to mount a small filesystem"
    mount = tmp_path / "fs"
    mount.mkdir()
    script = tmp_path / "fill.py"
    script.write_text(FULL_DISK)
    shell = (
        f"mount -t tmpfs -o size=2m tmpfs {mount} && "
        f"dd if=/dev/zero of={mount}/filler bs=1k count=512 2>/dev/null && "
        f"{sys.executable} {script} {mount}/store {mount}/filler"
    )
    done = subprocess.run(
        [unshare, "-m", "sh", "-c", shell],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stderr[-3000:]
    import json

    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["refusal"] == "store_full" and out["acked"] > 0
    assert out["version_after"] == out["acked"] and out["readable"]
    assert out["resumed"] and out["final"] == out["acked"] + 1
