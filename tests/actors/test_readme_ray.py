"""The README's Ray example runs as written against the session's cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.actors.cluster import RayCluster
from tests.readme import python_blocks


@pytest.mark.ray
def test_readme_ray_example_runs(
    ray_cluster: RayCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    block = next(b for b in python_blocks() if "from morphz import connect" in b)
    # The session is already connected to its cluster: that is the README's ray.init().
    assert "ray.init()" in block
    block = block.replace("ray.init()", "pass", 1)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    exec(compile(block, "README.md", "exec"), namespace)
    handle = namespace["ctx"]
    handle.shutdown()  # type: ignore[attr-defined]
