"""What the session's Ray cluster fixture hands to tests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

NODE2 = "node2"
"""The custom resource only the second node offers."""


@dataclass(frozen=True)
class RayCluster:
    """The session's cluster and the ids of its two nodes."""

    cluster: Any
    head_node_id: str
    node2_id: str
