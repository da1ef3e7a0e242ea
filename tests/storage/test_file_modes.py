"""A store is its owner's alone: directories 0700, files 0600, whatever the umask lets through
(real LMDB files; the context, its search index and a compacted copy). On main before this
change the files were created 0644 and the directories 0755."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from service.context import Context
from storage import LmdbStore
from storage.lmdb.compact import compact_store


def modes(root: Path) -> dict[str, int]:
    out = {".": stat.S_IMODE(root.stat().st_mode)}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = stat.S_IMODE(p.stat().st_mode)
    return out


def test_a_store_and_its_index_are_private_to_their_owner(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        root = tmp_path / "stores"
        path = root / "ctx"
        with Context(LmdbStore.open(path)) as ctx:
            ctx.observe("tool_result", "deploy log: tests passed")
            assert ctx.search({"query": "deploy"})["hits"] == 1  # builds the index beside it
        compact_store(path)
    finally:
        os.umask(old)
    found = modes(root)
    assert {"ctx/data.mdb", "ctx/lock.mdb", "ctx/writer.lock"} <= set(found)
    assert any(name.startswith("ctx/") and name.count("/") >= 2 for name in found)  # an index
    for name, mode in found.items():
        is_dir = (root / name).is_dir()
        assert mode == (0o700 if is_dir else 0o600), (name, oct(mode))
