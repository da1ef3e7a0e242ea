"""``morphz actors`` and ``morphz stop`` on the session cluster, and what a running context
actor means for ``compact`` and ``contexts --cluster``.

In-process through click's ``CliRunner``: this process is connected to the session cluster,
so the commands use that connection (and leave it as they found it). The actor is started
detached, as the first ``morphz mcp`` given a Ray address starts it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from actors import connect, lookup
from morphz.cli.main import cli
from protocol.errors import NotFound
from tests.actors.cluster import RayCluster


def morphz(store: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--store", str(store), *args])


def doc(result: Result) -> Any:
    return json.loads(result.stdout)


def test_actors_lists_stop_stops_and_the_advert_goes(
    ray_cluster: RayCluster, tmp_path: Path, context_name: str, namespace: str
) -> None:
    store = tmp_path / "store"
    handle = connect(context_name, store_dir=store, namespace=namespace, lifetime="detached")
    assert handle.submit("(context-tx (base-version 0) (derive f (n 1)))").committed
    advert = store / context_name / "actor.json"
    assert advert.is_file()

    listed = morphz(store, "--json", "actors")
    assert listed.exit_code == 0, listed.output
    rows = doc(listed)["actors"]
    assert [(r["context"], r["namespace"]) for r in rows] == [(context_name, namespace)]
    row = rows[0]
    assert row["pid"] == handle.pid() and row["node_id"] == handle.node_id()
    assert row["age_s"] >= 0 and os.path.realpath(row["store_dir"]) == os.path.realpath(store)
    human = morphz(store, "actors").output
    assert context_name in human and str(handle.pid()) in human and "age" in human

    # compact is refused while the actor holds the store, naming it and how to stop it
    refused = morphz(store, "--json", "--context", context_name, "compact")
    assert refused.exit_code == 1
    err = doc(refused)["error"]
    assert err["code"] == "store_locked"
    assert f"ctx:{context_name}" in err["message"] and f"pid {handle.pid()}" in err["message"]
    assert f"morphz stop {context_name}" in err["message"]

    # contexts --cluster does not say "no context directory" while an actor runs
    cluster = morphz(store, "contexts", "--cluster", "--namespace", namespace)
    assert cluster.exit_code == 0, cluster.output
    assert "no context directory" not in cluster.output
    assert f"{context_name} ({namespace})" in cluster.output

    stopped = morphz(store, "--json", "stop", context_name)
    assert stopped.exit_code == 0, stopped.output
    assert doc(stopped)["advert_removed"] is True and doc(stopped)["pid"] == row["pid"]
    assert not advert.exists()
    with pytest.raises(NotFound):
        lookup(context_name, namespace)
    assert doc(morphz(store, "--json", "actors"))["actors"] == []
    again = morphz(store, "--json", "stop", context_name)
    assert again.exit_code == 1 and doc(again)["error"]["code"] == "not_found"
    compacted = morphz(store, "--context", context_name, "compact")
    assert compacted.exit_code == 0, compacted.output


def test_shutdown_closes_the_store_and_removes_the_advert(
    ray_cluster: RayCluster, tmp_path: Path, context_name: str, namespace: str
) -> None:
    handle = connect(context_name, store_dir=tmp_path, namespace=namespace)
    assert (tmp_path / context_name / "actor.json").is_file()
    handle.shutdown()
    assert not (tmp_path / context_name / "actor.json").exists()


def test_actors_without_any_cluster_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    r = morphz(tmp_path, "actors")
    assert r.exit_code == 0
    assert "no context actor holds a context of" in r.output
    missing = morphz(tmp_path, "--json", "stop", "default")
    assert missing.exit_code == 1 and doc(missing)["error"]["code"] == "not_found"
    bad = morphz(tmp_path, "--json", "stop", "../escape")
    assert bad.exit_code == 2 and doc(bad)["error"]["code"] == "bad_context_name"
