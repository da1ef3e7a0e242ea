"""``--valid-at`` and ``--trust`` of ``morphz recall`` and ``morphz search`` (R41).

The commands run in-process through click's ``CliRunner`` over a store on real
LMDB files: a bad ``--valid-at`` is a usage error (exit 2) naming the option,
filters bind recall cursors, and search filters follow governance once caught up.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from morphz.cli import cli
from service.store import Store

MID_2025 = "1748736000"  # 2025-06-01T00:00:00Z


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """top cites a 2025 rule (citing a log), a 2026 rule, a quarantined rule and a candidate."""
    path = tmp_path / "store"
    with Store(path).open(sync=False) as ctx:
        log = ctx.observe("tool_result", "signing failed: the 2024 key expired")
        risky = ctx.observe("tool_result", "sign with the key from the wiki", risky=True)
        ctx.claim()
        for text in (
            f'(derive rule-2025 (from {log.ref}) (rule "sign with the 2025 key"))'
            '(derive rule-2026 (rule "sign with the 2026 key"))'
            '(derive rule-old (rule "sign with any key"))'
            f'(derive rule-wiki (from {risky.ref}) (rule "sign with the wiki key"))'
            '(envelope rule-2025 (valid-from "2025-01-01") (valid-to "2026-01-01"))'
            '(envelope rule-2026 (valid-from "2026-01-01") (valid-to "2027-01-01"))',
            "(derive top (from rule-2025 rule-2026 rule-old) (goal release))",
        ):
            receipt = ctx.commit(f"(context-tx (base-version {ctx.version()}) {text})")
            assert receipt.status == "committed", receipt.errors
        assert ctx.quarantine(["rule-old"]) == ["rule-old"]
    return path


def run(store: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--store", str(store), "--json", *args])


def doc(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, result.stdout
    return json.loads(lines[0])


def ids(page: dict[str, Any]) -> list[str]:
    return [n["id"] for n in page["nodes"]]


TOP = '{"frame_id": "top"}'


# -- recall -------------------------------------------------------------------------------


def test_recall_filters_by_trust_and_valid_time(store: Path) -> None:
    assert ids(doc(run(store, "recall", TOP))) == [
        "top",
        "rule-2025",
        "rule-2026",
        "rule-old",
        "@e1",
    ]
    accepted = doc(run(store, "recall", TOP, "--trust", "accepted"))
    assert ids(accepted) == ["top", "rule-2025", "rule-2026", "@e1"]
    both = doc(run(store, "recall", TOP, "--trust", "accepted", "--trust", "quarantined"))
    assert ids(both) == ["top", "rule-2025", "rule-2026", "rule-old", "@e1"]
    for when in ("2025-06-01", MID_2025, "2025-06-01T08:00:00+08:00"):
        page = doc(run(store, "recall", TOP, "--valid-at", when, "--trust", "accepted"))
        assert ids(page) == ["top", "rule-2025", "@e1"]
    assert ids(doc(run(store, "recall", TOP, "--valid-at", "2026-01-01"))) == [
        "top",
        "rule-2026",
        "rule-old",
    ]


def test_filters_in_the_request_json_work_the_same(store: Path) -> None:
    request = json.dumps({"frame_id": "top", "valid_at": "2025-06-01", "trust": ["accepted"]})
    assert ids(doc(run(store, "recall", request))) == ["top", "rule-2025", "@e1"]


@pytest.mark.parametrize("value", ["soon", "2025-13-01", "", "1e13", "nan"])
def test_a_bad_valid_at_is_a_usage_error(store: Path, value: str) -> None:
    for command in (["recall", TOP], ["search", "sign"]):
        result = run(store, *command, "--valid-at", value)
        assert result.exit_code == 2, result.output
        assert "--valid-at" in result.stderr
        assert "ISO" in result.stderr or "out of range" in result.stderr
        assert "Traceback" not in result.output


def test_a_bad_trust_and_a_filter_given_twice_are_usage_errors(store: Path) -> None:
    result = run(store, "recall", TOP, "--trust", "sure")
    assert result.exit_code == 2 and "--trust" in result.stderr
    result = run(store, "search", "sign", "--trust", "sure")
    assert result.exit_code == 2 and "--trust" in result.stderr
    twice = json.dumps({"frame_id": "top", "trust": ["accepted"]})
    result = run(store, "recall", twice, "--trust", "candidate")
    assert result.exit_code == 2 and "trust" in result.stderr
    bad = json.dumps({"frame_id": "top", "trust": ["sure"]})
    refused = run(store, "recall", bad)
    assert refused.exit_code == 2  # a bad field value is malformed input (was 1)
    assert json.loads(refused.stdout)["error"]["code"] == "bad_request"


def test_recall_cursors_bind_the_filter_flags(store: Path) -> None:
    request = '{"frame_id": "top", "max_nodes": 2}'
    first = doc(run(store, "recall", request, "--trust", "accepted"))
    assert ids(first) == ["top", "rule-2025"] and first["next_cursor"]
    cursor = first["next_cursor"]
    second = doc(run(store, "recall", request, "--trust", "accepted", "--cursor", cursor))
    assert ids(second) == ["rule-2026", "@e1"]
    mismatch = run(store, "recall", request, "--cursor", cursor)
    assert mismatch.exit_code == 1
    assert json.loads(mismatch.stdout)["error"]["code"] == "cursor_mismatch"


def test_recall_as_observation_is_model_facing(store: Path) -> None:
    page = doc(run(store, "recall", TOP, "--as-observation"))
    assert ids(page) == ["top", "rule-2025", "rule-2026", "@e1"]  # no quarantined frame
    ref = page["observation"]["ref"]
    with Store(store).open() as ctx:
        event = ctx.backend.read(lambda v: v.event(int(ref[2:])))
        text = json.loads(ctx.read_event(ref)["text"])
    assert event.extra == {"recalled": ["top", "rule-2025", "rule-2026"]}
    assert text["request"]["trust"] == ["candidate", "accepted"]
    refused = run(store, "recall", TOP, "--as-observation", "--trust", "quarantined")
    assert refused.exit_code == 1
    assert json.loads(refused.stdout)["error"]["code"] == "not_permitted"


# -- search -------------------------------------------------------------------------------


def hits(result: Result) -> dict[str, str | None]:
    return {h["id"]: h.get("trust") for h in doc(result)["hits"]}


def test_search_filters_by_trust_and_valid_time(store: Path) -> None:
    assert hits(run(store, "search", "sign", "--kind", "frame")) == {
        "rule-2025": "accepted",
        "rule-2026": "accepted",
        "rule-old": "quarantined",
        "rule-wiki": "candidate",
    }
    accepted = run(store, "search", "sign", "--kind", "frame", "--trust", "accepted")
    assert set(hits(accepted)) == {"rule-2025", "rule-2026"}
    shown = run(store, "search", "sign signing", "--trust", "accepted", "--trust", "candidate")
    assert set(hits(shown)) == {"rule-2025", "rule-2026", "rule-wiki", "@e1", "@e2"}
    dated = run(store, "search", "sign", "--kind", "frame", "--valid-at", MID_2025)
    assert set(hits(dated)) == {"rule-2025", "rule-old", "rule-wiki"}
    readable = CliRunner().invoke(cli, ["--store", str(store), "search", "sign", "--kind", "frame"])
    assert readable.exit_code == 0 and "quarantined" in readable.stdout

    with Store(store).open() as ctx:  # governance after the index was built
        ctx.review("rule-wiki", "reject", "alice")
        ctx.quarantine(["rule-2026"])
    after = run(
        store, "search", "sign", "--kind", "frame", "--trust", "accepted", "--trust", "candidate"
    )
    assert set(hits(after)) == {"rule-2025"}
    rebuilt = doc(run(store, "reindex"))
    assert rebuilt["documents"] == 7  # two events, five frames
    again = run(
        store, "search", "sign", "--kind", "frame", "--trust", "accepted", "--trust", "candidate"
    )
    assert hits(again) == hits(after)
