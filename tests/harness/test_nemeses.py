"""The load test's nemesis options (harness/loadtest/nemeses.py): checked before anything
runs, with a typed error; the runs themselves are in tests/actors/test_faults.py."""

from __future__ import annotations

import pytest
from click.testing import CliRunner


def test_nemesis_options_are_checked() -> None:
    from harness.loadtest.options import check_options
    from protocol.errors import RequestError

    base = {"threads": 2, "duration_s": 5, "followers": 1}
    ok = check_options({**base, "nemesis": {"kind": "pause", "every_s": 4, "for_s": 2}})
    assert ok.nemesis is not None and ok.own_cluster
    assert (ok.nemesis.kind, ok.nemesis.every_s, ok.nemesis.for_s) == ("pause", 4, 2)
    for bad in (
        {"nemesis": {"kind": "pause", "every_s": 4, "for_s": 4}},  # longer than its period
        {"nemesis": {"kind": "pause", "every_s": 4}, "followers": 0},  # nothing to promote
        {"nemesis": {"kind": "partition", "every_s": 4}, "address": "auto"},  # our own cluster
        {"nemesis": {"kind": "partition", "every_s": 4}, "kill_node_every_s": 5},  # one kind
        {"nemesis": {"kind": "flood", "every_s": 4}},  # no such nemesis
        {"nemesis": {"kind": "pause", "every_s": 4, "period": 1}},  # no such field
    ):
        with pytest.raises(RequestError) as e:
            check_options({**base, **bad})
        assert e.value.code == "bad_option"


def test_each_nemesis_of_the_command_line_is_one_the_harness_does() -> None:
    """Every nemesis the CLI declares has its two options and is done by the harness; two
    nemeses at once are a usage error before anything starts."""
    from harness.loadtest.nemeses import FAULTS
    from morphz.cli import cli
    from morphz.cli.nemeses import NEMESES

    assert {n.name for n in NEMESES} == set(FAULTS)
    shown = CliRunner().invoke(cli, ["loadtest", "--help"]).output
    for n in NEMESES:
        assert f"--{n.every_flag}" in shown and f"--{n.for_flag}" in shown
    args = ["loadtest", "--threads", "1", "--duration", "1", "--followers", "1"]
    both = [f"--{n.every_flag}" for n in NEMESES[:2]]
    done = CliRunner().invoke(cli, [*args, both[0], "4", both[1], "4"])
    assert done.exit_code == 2 and "give one of" in done.output, done.output
