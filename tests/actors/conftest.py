"""What the tests of a context actor's class share: a :class:`ContextActor` run in this
process (no Ray) over a real store in the test's directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.server.context_actor import ContextActor


@pytest.fixture
def actor(tmp_path: Path) -> Iterator[ContextActor]:
    """A context actor's class over a real store in the test's directory, closed after."""
    a = ContextActor(str(tmp_path), "ctx")
    yield a
    a.close()
