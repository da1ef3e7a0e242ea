"""``morphz demo``: the seed stories at once on the session's Ray cluster, checks included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.actors.cluster import RayCluster

MORPHZ = [sys.executable, "-c", "from morphz.cli import main; main()"]


@pytest.mark.ray
def test_the_demo_runs_and_its_checks_hold(ray_cluster: RayCluster, tmp_path: Path) -> None:
    from harness.demo import run_demo

    snapshots: list[dict[str, object]] = []
    doc = run_demo(4, str(tmp_path), progress=snapshots.append)
    assert doc["ok"] is True, doc["checks"]
    assert doc["threads"] == 4 and doc["rejected"] >= 1 and doc["commits"] >= 6
    frames = {f["id"]: f for f in doc["frames"]}
    assert "(stage paused)" in frames["release"]["body"]
    assert "(tests passed)" in frames["release"]["body"]
    assert frames["deployment/target-v1"]["lifecycle"] == "retired"
    assert frames["release-procedure"]["lifecycle"] == "active"
    assert ["demo", "deployment/target-v2", "supersedes", "deployment/target-v1"] in doc[
        "relations"
    ]
    assert doc["groups"][0]["traces"] == sum(doc["groups"][0]["steps"].values())
    why = {w["frame"]: w for w in doc["groups"][0]["why"]}
    # The pause's resolution and the deployment successor were traced with what they cited.
    assert why["release"]["thread"] == "pause", why
    assert why["release"]["cited_frames"] or why["release"]["cited_events"], why
    assert "deployment/target-v1" in why["deployment/target-v2"]["cited_frames"]
    assert snapshots and {t["thread"] for t in snapshots[-1]["threads"]} == {  # type: ignore[index, union-attr]
        "release",
        "deployment",
        "consolidation",
        "pause",
    }


@pytest.mark.ray
def test_the_command_prints_one_json_document(ray_cluster: RayCluster, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "MORPHZ_STORE"}
    env["RAY_ADDRESS"] = ray_cluster.cluster.address
    p = subprocess.run(
        [*MORPHZ, "--json", "demo", "--no-live", "--threads", "6", "--store", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 1, p.stdout
    doc = json.loads(lines[0])
    for key in ("threads", "commits", "rebased", "rejected", "deferred", "seconds"):
        assert isinstance(doc[key], (int, float)), key
    assert doc["threads"] == 6 and [g["context"] for g in doc["groups"]] == ["demo", "demo-2"]
    assert doc["ok"] is True and all(doc["checks"].values())
    assert Path(doc["dot"]).read_text().startswith('digraph "morphz-demo"')
    assert {f["context"] for f in doc["frames"]} == {"demo", "demo-2"}
