"""Where the tests find STATE-Bench trajectories: the sample this repository ships, or the
whole training set for the checks that need all of it. A test never skips for want of
them: the sample is always there, and a missing whole set fails the test saying where it
was looked for."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.loadtest.trajectories import TRAJECTORIES_ENV

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "tests" / "data" / "state-bench" / "train_task_trajectories"
"""Six trajectories (tasks 1 and 2 of each domain), MIT-licensed (see its README.md)."""
BESIDE = Path("shared") / "data" / "state-bench" / "train_task_trajectories"
"""Where the whole set sits relative to a folder above the checkout."""


def full_trajectories() -> Path:
    """The whole STATE-Bench training set: ``$MORPHZ_TRAJECTORIES``, else
    ``shared/data/state-bench/train_task_trajectories`` in the nearest folder above the
    checkout that has it. Fails the calling test when neither exists."""
    given = os.environ.get(TRAJECTORIES_ENV)
    if given:
        if not Path(given).is_dir():
            pytest.fail(f"${TRAJECTORIES_ENV} is {given!r}, which is not a directory")
        return Path(given)
    for folder in ROOT.parents:
        if (folder / BESIDE).is_dir():
            return folder / BESIDE
    pytest.fail(
        "this test needs the whole STATE-Bench training set (train_task_trajectories/):"
        f" set ${TRAJECTORIES_ENV} to it, or put it at <a folder above the checkout>/{BESIDE}"
    )
