"""Searches and recalls recorded as ``recall_result`` observations never feed later
searches unless asked for, and the search reply carries the hits themselves (a real LMDB
store, the embedded service every port calls)."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.errors import RequestError
from service.store import open_context


def test_three_identical_searches_find_the_same_hits(tmp_path: Path) -> None:
    with open_context(tmp_path, "default", create=True) as ctx:
        ctx.observe("tool_result", "the deployment region is eu-west-3")
        ctx.claim()
        counts = [ctx.search({"query": "deployment region"}).hits for _ in range(3)]
        assert counts == [1, 1, 1]  # each search is recorded, none is found again
        reply = ctx.search({"query": "deployment region"})
        assert [r["id"] for r in reply.results or []] == ["@e1"]
        assert reply.results is not None and "eu-west-3" in reply.results[0]["snippet"]
        asked = ctx.search({"query": "deployment region", "include_recalls": True})
        kinds = sorted(r["kind"] for r in asked.results or [])
        assert asked.hits > 1 and "recall_result" in kinds and "tool_result" in kinds
        named = ctx.search({"query": "deployment region", "kinds": ["recall_result"]})
        assert named.hits >= 1 and {r["kind"] for r in named.results or []} == {"recall_result"}
        with pytest.raises(RequestError):
            ctx.search({"query": "x", "include_recalls": "yes"})
