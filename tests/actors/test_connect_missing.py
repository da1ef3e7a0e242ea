"""Ray's ``connect`` follows the create/read rule of docs/cli.md: with ``create=False`` a
missing context is the service's ``NotFound`` (naming what the store holds), and
nothing is created."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors import connect
from protocol.errors import NotFound
from service.store import Store, open_context
from tests.actors.cluster import RayCluster


def test_connect_without_create_names_the_contexts_and_creates_nothing(
    ray_cluster: RayCluster, tmp_path: Path, namespace: str
) -> None:
    with open_context(tmp_path, "alpha", create=True):
        pass
    with pytest.raises(NotFound) as err:
        connect("alhpa", store_dir=tmp_path, namespace=namespace, create=False)
    assert "'alhpa'" in err.value.message and "holds alpha" in err.value.message
    assert "morphz init --context alhpa" in err.value.message
    assert Store(tmp_path).contexts() == ["alpha"]
    assert not (tmp_path / "alhpa").exists()
