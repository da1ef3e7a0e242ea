"""The branches example (examples/branch_story.py) runs as written and tells its story."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_branch_story_example_runs(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "branch_story.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    assert "-- try-cache: committed" in out and "-- try-shard: committed" in out
    assert "-- merge try-cache: refused (plan)" in out
    assert "status: base exploring, ours reviewing, theirs adopt-cache" in out
    assert "-- plan: (status adopt-cache) (owner ana) (budget 3)" in out  # both sides kept
    assert "v3 set (merged from try-cache, by embedded)" in out
    assert out.rstrip().endswith("again: nothing")
