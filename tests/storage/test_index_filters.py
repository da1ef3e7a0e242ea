"""Search filtered by trust and valid time (R41) over real LMDB files.

A frame's trust and valid time live in its document record; every envelope
change and governance decision writes an outbox intent naming the frame, so a
filter is current once the index has caught up, and a rebuild holds the same
records and answers the same.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

import storage.search.format as format_module
from protocol.errors import OutOfRange, RequestError
from tests.storage.contexts import setup_fixture
from tests.storage.test_search_index import Setup, dump

Y2026 = 1767225600.0


s = setup_fixture(Setup, "s")


def rules(s: Setup) -> str:
    """Three signing rules with valid times, and a log event that mentions signing."""
    log = s.ctx.observe("tool_result", "signing failed: the key expired")
    s.ctx.claim()
    s.commit(
        f"""(context-tx (base-version {{base}})
          (derive rule/2025 (from {log.ref}) (rule "sign with the 2025 key"))
          (derive rule/2026 (rule "sign with the 2026 key"))
          (derive rule/any (rule "sign every release"))
          (envelope rule/2025 (valid-from "2025-01-01") (valid-to "2026-01-01"))
          (envelope rule/2026 (valid-from "2026-01-01") (valid-to "2027-01-01")))"""
    )
    return log.ref


def test_valid_at_filters_frames_and_lets_events_pass(s: Setup) -> None:
    log = rules(s)
    s.index.catch_up()
    assert set(s.ids("sign signing")) == {"rule/2025", "rule/2026", "rule/any", log}
    assert set(s.ids("sign signing", valid_at="2025-06-01")) == {"rule/2025", "rule/any", log}
    # valid_from inclusive, valid_to exclusive; ISO and epoch seconds agree. The event
    # ("signing") passes, found through the stem of "sign".
    assert set(s.ids("sign", valid_at="2026-01-01")) == {"rule/2026", "rule/any", log}
    assert set(s.ids("sign", valid_at=Y2026)) == {"rule/2026", "rule/any", log}
    assert set(s.ids("sign", valid_at=Y2026 - 0.001)) == {"rule/2025", "rule/any", log}
    assert s.ids("sign", valid_at="2030-01-01", kinds="frame") == ["rule/any"]


def test_trust_filter_and_the_trust_of_hits(s: Setup) -> None:
    log = rules(s)
    s.commit("(context-tx (base-version {base}) (envelope rule/any (trust candidate)))")
    s.index.catch_up()
    assert set(s.ids("sign signing", trust="accepted")) == {"rule/2025", "rule/2026", log}
    assert s.ids("sign", trust=["candidate"], kinds="frame") == ["rule/any"]
    trust = {h.id: h.trust for h in s.search("sign signing").hits}
    assert trust == {
        "rule/2025": "accepted",
        "rule/2026": "accepted",
        "rule/any": "candidate",
        log: None,
    }
    frame_hit = next(h for h in s.search("sign").hits if h.type == "frame")
    assert frame_hit.to_dict()["trust"] in ("accepted", "candidate")
    event_hit = s.search("expired").hits[0]
    assert event_hit.id == log and "trust" not in event_hit.to_dict()
    both = s.ids("sign", trust=("accepted",), valid_at="2026-06-01", kinds="frame")
    assert both == ["rule/2026"]


def test_quarantine_and_rejection_reach_the_index_through_the_outbox(s: Setup) -> None:
    log = rules(s)
    risky = s.ctx.observe("tool_result", "sign with the leaked key", risky=True)
    s.ctx.claim()
    s.commit(
        f'(context-tx (base-version {{base}}) (derive rule/leaked (from {risky.ref}) (rule "sign with the leaked key")))'
    )
    s.index.catch_up()
    shown = ["candidate", "accepted"]
    assert set(s.ids("sign", trust=shown, kinds="frame")) == {
        "rule/2025",
        "rule/2026",
        "rule/any",
        "rule/leaked",
    }

    assert s.ctx.quarantine(["rule/any"]) == ["rule/any"]
    s.ctx.review("rule/leaked", "reject", "alice")
    # Until the index catches up the filter sees the old trust, and the lag says so.
    stale = s.search("sign", trust=shown, kinds="frame")
    assert stale.lag == 2 and "rule/any" in [h.id for h in stale.hits]

    s.index.catch_up()
    fresh = s.search("sign", trust=shown, kinds="frame")
    assert fresh.lag == 0 and fresh.indexed_version == s.ctx.version()
    assert {h.id for h in fresh.hits} == {"rule/2025", "rule/2026"}
    assert set(s.ids("sign", trust="quarantined")) == {"rule/any", risky.ref, log}  # events pass
    assert s.ids("sign", trust="quarantined", kinds="frame") == ["rule/any"]
    rejected = s.search("leaked", trust="rejected", kinds="frame").hits
    assert [(h.id, h.lifecycle, h.trust) for h in rejected] == [
        ("rule/leaked", "retired", "rejected")
    ]
    # Review back to accepted: the filter follows.
    s.ctx.review("rule/any", "accept", "bob")
    s.index.catch_up()
    assert "rule/any" in s.ids("sign", trust="accepted")


def test_an_envelope_change_alone_updates_the_valid_time(s: Setup) -> None:
    rules(s)
    s.index.catch_up()
    before = s.index.state().documents
    s.commit('(context-tx (base-version {base}) (envelope rule/any (valid-to "2026-01-01")))')
    assert "rule/any" in s.ids("sign", valid_at="2026-06-01")  # not caught up yet
    s.index.catch_up()
    assert "rule/any" not in s.ids("sign", valid_at="2026-06-01")
    assert "rule/any" in s.ids("sign", valid_at="2025-06-01")
    assert s.index.state().documents == before  # the record changed, no new document


@pytest.mark.parametrize(
    "kw, error, code",
    [
        ({"trust": []}, RequestError, "bad_trust"),
        ({"trust": ["trusted"]}, RequestError, "bad_trust"),
        ({"trust": 3}, RequestError, "bad_trust"),
        ({"valid_at": "soon"}, RequestError, "bad_time"),
        ({"valid_at": True}, RequestError, "bad_time"),
        ({"valid_at": 1e13}, OutOfRange, "out_of_range"),
        ({"valid_at": float("nan")}, OutOfRange, "out_of_range"),
    ],
)
def test_bad_filters_are_refused(
    s: Setup, kw: dict[str, Any], error: type[RequestError], code: str
) -> None:
    rules(s)
    s.index.catch_up()
    with pytest.raises(error) as info:
        s.search("sign", **kw)
    assert info.value.code == code


def test_an_index_of_the_previous_format_is_rebuilt(s: Setup) -> None:
    rules(s)
    s.index.catch_up()
    shared = s.index._shared
    with shared.env.begin(write=True) as txn:
        state = format_module._load_state(txn, shared.dbs)
        state.format = 1
        format_module._save_state(txn, shared.dbs, state)
    # Records of another layout are never decoded: an empty answer, everything pending.
    stale = s.search("sign", trust="accepted")
    assert stale.hits == () and stale.indexed_version == 0
    assert stale.lag == s.backend.outbox_last()
    s.ctx.observe("tool_result", "one more intent")
    s.index.catch_up()
    assert s.index.state().format == format_module.INDEX_FORMAT
    assert set(s.ids("sign", valid_at="2025-06-01", kinds="frame")) == {"rule/2025", "rule/any"}


FILTERS: list[dict[str, Any]] = [
    {},
    {"trust": "accepted"},
    {"trust": ["candidate", "quarantined"]},
    {"trust": "rejected"},
    {"valid_at": 150},
    {"valid_at": 50, "trust": "accepted"},
    {"valid_at": 250, "kinds": "frame"},
]
WORDS = "alpha beta gamma 部署 地区 key sign".split()


def governed_churn(s: Setup, rng: random.Random, rounds: int) -> None:
    """Derives, revises, envelope changes, quarantines and reviews in random order."""
    frames: list[str] = []
    for r in range(rounds):
        risky = rng.random() < 0.2
        e = s.ctx.observe("tool_result", " ".join(rng.choices(WORDS, k=4)), risky=risky)
        s.ctx.claim()
        body = " ".join(rng.choices(WORDS, k=rng.randint(1, 5)))
        op = rng.random()
        if op < 0.4 or not frames:
            fid = f"f/{r}"
            frames.append(fid)
            s.commit(
                f'(context-tx (base-version {{base}}) (derive {fid} (from {e.ref}) (note "{body}")))'
            )
        elif op < 0.55:
            fid = rng.choice(frames)
            if s.ctx.frame(fid)["lifecycle"] != "retired":
                s.commit(f'(context-tx (base-version {{base}}) (revise {fid} (note "{body}")))')
        elif op < 0.7:
            lo = rng.choice([0, 100, 200])
            s.commit(
                f"(context-tx (base-version {{base}}) (envelope {rng.choice(frames)} (valid-from {lo}) (valid-to {lo + 100})))"
            )
        elif op < 0.8:
            s.ctx.quarantine([rng.choice(frames)])
        elif op < 0.9:
            fid = rng.choice(frames)
            if s.ctx.frame(fid)["envelope"]["trust"] in ("candidate", "quarantined"):
                s.ctx.review(fid, rng.choice(["accept", "reject"]), "carol")
        else:
            s.ctx.admit()
        if rng.random() < 0.3:
            s.index.apply_intents(limit=rng.randint(1, 4))


def filtered_answers(s: Setup) -> list[list[tuple[str, float, str | None]]]:
    return [
        [(h.id, h.score, h.trust) for h in s.search(q, limit=50, **f).hits]
        for q in ("alpha key", "部署 sign", "beta gamma")
        for f in FILTERS
    ]


def test_rebuild_holds_the_same_records_and_filters_the_same(s: Setup) -> None:
    governed_churn(s, random.Random(11), 80)
    s.index.catch_up()
    incremental = filtered_answers(s)
    assert sum(1 for a in incremental if a) > len(incremental) // 2
    trusts = {t for a in incremental for _, _, t in a}
    assert {"accepted", "quarantined"} <= trusts
    before = dump(s.index)
    s.index.rebuild()
    after = dump(s.index)
    assert after["docs"] == before["docs"] and after["postings"] == before["postings"]
    assert filtered_answers(s) == incremental
