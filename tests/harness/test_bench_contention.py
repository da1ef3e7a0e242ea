"""Smoke test of benchmarks/bench_contention.py: every workload runs, nothing is lost.

Figures are not asserted; only that the run completes through a real context
actor and a real SQLite database and that its lost/duplicated checks hold.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.ray

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def bench(ray_cluster: Any) -> Any:
    from ray import cloudpickle

    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    import bench_contention

    # Ray workers do not have benchmarks/ on their path: send the writers by value.
    cloudpickle.register_pickle_by_value(bench_contention)
    try:
        yield bench_contention
    finally:
        cloudpickle.unregister_pickle_by_value(bench_contention)


def test_both_workloads_run_beside_sqlite_with_nothing_lost(bench: Any, tmp_path: Path) -> None:
    # Two writers, the least that contend: one writer more per level would only add
    # actor start-ups (the writer-count list itself is parsed in the test below).
    args = bench.parse_args(
        ["--writers", "2", "--updates", "3", "--window", "2", "--dir", str(tmp_path)]
    )
    report = bench.run(args)
    runs = report["runs"]
    seen = {(r["system"], r["workload"], r["writers"]) for r in runs}
    workloads = ("rmw", "own", "append", "fields")
    assert seen == {(s, w, 2) for s in ("sqlite", "morphz") for w in workloads}
    for r in runs:
        assert r["updates"] == 3 * r["writers"], r
        assert (r["lost"], r["duplicated"]) == (0, 0), r
    assert report["loud"] == []
    for r in runs:
        if r["system"] == "morphz" and r["workload"] in ("append", "fields"):
            assert r["rejections"] == 0, r  # field edits from stale bases never collide


def test_the_grow_curve_is_measured(bench: Any, tmp_path: Path) -> None:
    args = bench.parse_args(
        ["--workload", "fields", "--writers", "1", "--updates", "2", "--grow", "1500"]
        + ["--dir", str(tmp_path)]
    )
    report = bench.run(args)
    curve = report["grow"]["curve"]
    assert [p["length"] for p in curve] == [1000, 1500]
    assert all(p["commit_us"] > 0 and p["frame_decode_us"] >= 0 for p in curve)
    assert report["loud"] == []


def test_lost_and_duplicated_tokens_are_counted(bench: Any) -> None:
    check = bench._check_tokens
    assert check(["a", "b"], ["a", "b"]) == {"lost": 0, "duplicated": 0}
    assert check(["a", "b"], ["a"]) == {"lost": 1, "duplicated": 0}
    assert check(["a", "b"], ["a", "b", "b"]) == {"lost": 0, "duplicated": 1}
    # a rejected attempt's token that reached the frame counts as duplicated
    assert check(["a"], ["a", "x"]) == {"lost": 0, "duplicated": 1}


def test_bad_writer_counts_are_refused(bench: Any) -> None:
    assert bench.parse_args(["--writers", "1,2,16"]).writers == [1, 2, 16]
    for bad in ("0", "x", "", "1,-2", "100"):
        with pytest.raises(SystemExit):
            bench.parse_args(["--writers", bad])
    with pytest.raises(SystemExit):
        bench.parse_args(["--updates", "0"])
