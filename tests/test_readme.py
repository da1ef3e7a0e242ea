"""The README's embedded example and the examples/ scripts run as written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.readme import python_blocks

ROOT = Path(__file__).resolve().parent.parent


def test_readme_embedded_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    block = next(b for b in python_blocks() if "open_context" in b)
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "README.md", "exec"), {})
    assert (tmp_path / ".morphz" / "default").is_dir()


def test_release_story_example_runs(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "release_story.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "causally_protected" in out.stdout  # the early retire is refused
    assert "retire the request after delivery: committed" in out.stdout
    assert "test-result supports release" in out.stdout
