"""Lead records without Ray: a record that is too long, unsigned, not JSON, of the wrong
fields or types, or kept under another term's key is skipped with a log line and never
raises; a key that names no term is skipped too. And which idle directories a leader
keeps as its one standby and which it stops."""

from __future__ import annotations

import json
import logging

import pytest

from actors.client.leader import MAX_LEAD_BYTES, Lead, open_lead, term_of
from actors.cluster.leadership import standbys_kept
from protocol import capabilities
from protocol.epochs import sign_record

SEED = bytes(range(32))
PUBLIC = [capabilities.public_key(SEED)]
GOOD = {"term": 3, "actor": "morphz:directory~abc", "node_id": "n1", "incarnation": "i1"}


def _signed(ns: str, term: int, value: str) -> bytes:
    return sign_record(SEED, ns, f"lead/{term}", value)


def _skipped(caplog: pytest.LogCaptureFixture, ns: str, term: int, raw: bytes) -> str:
    """Assert *raw* under *term*'s key is skipped with a warning naming the key; its text."""
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="morphz.directory"):
        assert open_lead(ns, term, raw, PUBLIC) is None
    lines = [r.getMessage() for r in caplog.records if f"'lead/{term}'" in r.getMessage()]
    assert lines, f"no log line for {raw[:60]!r}"
    return lines[0]


def test_lead_records_that_are_no_lead_are_skipped_with_a_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert open_lead("leads", 3, _signed("leads", 3, json.dumps(GOOD)), PUBLIC) == Lead.model_validate(GOOD)
    bad_values = {
        "not json": "\x00\xff garbage {",
        "msgpack": "\x84\xa4term\x03",
        "a list": json.dumps([3, "morphz:directory", "n", "i"]),
        "a field missing": json.dumps({k: v for k, v in GOOD.items() if k != "node_id"}),
        "an extra field": json.dumps({**GOOD, "admin": True}),
        "term as text": json.dumps({**GOOD, "term": "3"}),
        "term as float": json.dumps({**GOOD, "term": 3.0}),
        "term as bool": json.dumps({**GOOD, "term": True}),
        "actor as number": json.dumps({**GOOD, "actor": 7}),
        "deeply nested": '{"term":' + "[" * 5000 + "]" * 5000 + "}",
        "another actor": json.dumps({**GOOD, "actor": "ctx:evil"}),
    }
    # (each case in its own namespace: a key's same reason is logged once per process)
    for why, value in bad_values.items():
        assert _skipped(caplog, why, 3, _signed(why, 3, value)), why
    assert _skipped(caplog, "bool", 1, _signed("bool", 1, json.dumps({**GOOD, "term": True})))
    # a signed record whose term differs from its key's
    assert "another term" in _skipped(caplog, "t4", 4, _signed("t4", 4, json.dumps(GOOD)))
    # moved from term 3's key (the signature covers the key), unsigned, oversized, binary
    assert "signature" in _skipped(caplog, "t5", 5, _signed("t5", 3, json.dumps(GOOD)))
    assert _skipped(caplog, "unsigned", 3, json.dumps(GOOD).encode())
    huge = _signed("huge", 3, json.dumps({**GOOD, "node_id": "n" * MAX_LEAD_BYTES}))
    assert str(MAX_LEAD_BYTES) in _skipped(caplog, "huge", 3, huge)
    scheme = b"morphz-directory-record/1 "
    for i, raw in enumerate([b"", b"\n", b"\xff" * 100, scheme + b"zz\n{}", scheme + b"0" * 128]):
        assert _skipped(caplog, f"raw{i}", 3, raw)
    # signed for another namespace: skipped here
    assert _skipped(caplog, "here", 3, _signed("other", 3, json.dumps(GOOD)))


def test_keys_that_name_no_term_are_skipped_with_one_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ns = "leads-b"
    assert term_of(ns, b"lead/0") == 0 and term_of(ns, "lead/42") == 42
    assert term_of(ns, b"lead/" + b"9" * 18) == 10**18 - 1
    bad = [b"lead/", b"lead/x", b"lead/-1", b"lead/+1", b"lead/01", b"lead/1 ", b"lead/1.0",
           "lead/²".encode(), "lead/١".encode(), b"lead/\xff", b"lead/" + b"9" * 19, b"ctx/a"]  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="morphz.directory"):
        for key in bad:
            assert term_of(ns, key) is None, key
        warned = len(caplog.records)
        assert warned == len(bad)
        assert all("names no term" in r.getMessage() for r in caplog.records)
        for key in bad:  # every look lists them again: no second warning
            assert term_of(ns, key) is None
        assert len(caplog.records) == warned


def test_a_leader_keeps_one_idle_directory_as_its_standby_and_stops_the_others() -> None:
    d, x, y = "morphz:directory", "morphz:directory~x", "morphz:directory~y"
    # after a takeover: its own standby on n2, Ray's restart of the lost directory on n3
    assert standbys_kept(x, {x: "n2", d: "n3"}, {"n2", "n3"}) == (("morphz:directory~x", "n2"), [d])
    # none adopted yet: the first by node, then name; the others stop
    assert standbys_kept(None, {y: "n3", x: "n3", d: "n2"}, {"n2", "n3"}) == ((d, "n2"), [x, y])
    # the current standby's node is no longer eligible (the leader's own, or down)
    assert standbys_kept(x, {x: "n1", y: "n2"}, {"n2"}) == ((y, "n2"), [x])
    # no eligible node: none kept, every idle one stops; nothing idle: nothing to do
    assert standbys_kept(x, {x: "n1", d: "n1"}, set()) == (None, [d, x])
    assert standbys_kept(x, {}, {"n2"}) == (None, [])
    assert standbys_kept(None, {x: "n2"}, {"n2"}) == ((x, "n2"), [])
