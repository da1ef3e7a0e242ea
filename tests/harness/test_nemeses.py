"""The load test's nemesis options (harness/loadtest/nemeses.py): checked before anything
runs, with a typed error; the runs themselves are in tests/actors/test_faults.py."""

from __future__ import annotations

import pytest


def test_nemesis_options_are_checked() -> None:
    from harness.loadtest.options import check_options
    from protocol.errors import RequestError

    base = {"threads": 2, "duration_s": 5, "followers": 1}
    ok = check_options({**base, "pause_primary_every_s": 4, "pause_for_s": 2})
    assert ok.nemesis == ("pause", 4, 2) and ok.own_cluster
    for bad in (
        {"pause_primary_every_s": 4, "pause_for_s": 4},  # a fault longer than its period
        {"pause_primary_every_s": 4, "followers": 0},  # nothing to promote
        {"partition_every_s": 4, "address": "auto"},  # signals and cuts need our own cluster
        {"partition_every_s": 4, "kill_node_every_s": 5},  # one fault kind per run
    ):
        with pytest.raises(RequestError) as e:
            check_options({**base, **bad})
        assert e.value.code == "bad_option"
