"""False conflicts, as the load test counts them: rejections where the colliding
transactions touched disjoint fields or only appended (issue 21)."""

from __future__ import annotations

from typing import Any

from harness.loadtest import conflict_counts


def _commit(version: int, intents: dict[str, list[str]]) -> dict[str, Any]:
    return {"outcome": "committed", "version": version, "intents": intents}


def _reject(conflicts: list[list[Any]], intents: dict[str, list[str]]) -> dict[str, Any]:
    return {
        "outcome": "rejected",
        "error_code": "conflict",
        "conflicts": conflicts,
        "intents": intents,
    }


def test_appends_to_one_list_and_disjoint_fields_are_false_conflicts() -> None:
    records = [
        _commit(5, {"shared/a": ["append:seen"], "t0/x": ["*"]}),
        _commit(6, {"shared/a": ["set:status"]}),
        _reject([["shared/a", 5]], {"shared/a": ["append:seen"], "t1/x": ["*"]}),  # false
        _reject([["shared/a", 6]], {"shared/a": ["set:owner"]}),  # false: other field
        _reject([["shared/a", 6]], {"shared/a": ["set:status"]}),  # true: same field
        _reject([["shared/a", 5]], {"shared/a": ["set:seen"]}),  # true: a set over an append
        _reject([["shared/a", 5]], {"shared/a": ["*"]}),  # true: the whole body
        _reject([["shared/a", 9]], {"shared/a": ["append:seen"]}),  # true: unknown writer
        _reject([], {"shared/a": ["append:seen"]}),  # true: names nothing
        {"outcome": "rejected", "error_code": "frame_exists", "conflicts": []},  # not a conflict
    ]
    assert conflict_counts(records) == {"conflicts": 7, "false_conflicts": 2}


def test_every_named_frame_must_be_disjoint() -> None:
    records = [
        _commit(3, {"shared/a": ["append:seen"], "shared/b": ["*"]}),
        _reject(
            [["shared/a", 3], ["shared/b", 3]], {"shared/a": ["append:seen"], "shared/b": ["*"]}
        ),
    ]
    assert conflict_counts(records) == {"conflicts": 1, "false_conflicts": 0}
    assert conflict_counts([]) == {"conflicts": 0, "false_conflicts": 0}
