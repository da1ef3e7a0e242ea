"""The msgpack and JSON forms: exact layout, round-trips, hostile input raising only WireError."""

from __future__ import annotations

import json
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from protocol.errors import WireError
from protocol.forms import Symbol
from protocol.tx import ContextTx, Derive, Protect, Relate, Restore, Retire, Revise, Unprotect
from protocol.txlang import parse_tx
from protocol.txwire import (
    SubmittedTx,
    submitted_from_dict,
    submitted_from_json,
    submitted_from_msgpack,
    tx_from_dict,
    tx_from_json,
    tx_from_msgpack,
    tx_to_dict,
    tx_to_json,
    tx_to_msgpack,
)
from protocol.wire import EXT_BIGINT, MAX_NESTING, MAX_PAYLOAD_BYTES, WIRE_VERSION, pack, unpack
from tests.examples import examples
from tests.protocol.strategies import strict_key, transactions, typed

S = Symbol

RELEASE_TX = """(context-tx
  (base-version 12)
  (reason "Incorporate the test result and prepare the release")
  (derive test-result (from @e42) (tests passed))
  (revise release (goal ship-v1) (stage packaging))
  (relate test-result supports release)
  (retire @e42))"""

RELEASE_DICT = {
    "base_version": 12,
    "reason": "Incorporate the test result and prepare the release",
    "ops": [
        {"op": "derive", "id": "test-result", "sources": ["@e42"], "body": [["tests", "passed"]]},
        {
            "op": "revise",
            "id": "release",
            "sources": [],
            "body": [["goal", "ship-v1"], ["stage", "packaging"]],
        },
        {"op": "relate", "subject": "test-result", "label": "supports", "object": "release"},
        {"op": "retire", "refs": ["@e42"]},
    ],
}

FAST = settings(
    max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def _same(a: ContextTx, b: ContextTx) -> None:
    assert a == b
    assert strict_key(a) == strict_key(b)


# --- layout -----------------------------------------------------------------------


def test_dict_form_of_the_seed() -> None:
    tx = parse_tx(RELEASE_TX)
    assert tx_to_dict(tx) == RELEASE_DICT
    _same(tx_from_dict(RELEASE_DICT), tx)


def test_msgpack_layout_is_version_byte_then_dict_form() -> None:
    tx = parse_tx(RELEASE_TX)
    data = tx_to_msgpack(tx)
    assert data[0] == WIRE_VERSION == 1
    assert data[1:] == msgpack.packb(RELEASE_DICT, use_bin_type=True)
    _same(tx_from_msgpack(data), tx)
    _same(tx_from_msgpack(bytearray(data)), tx)
    _same(tx_from_msgpack(memoryview(data)), tx)


def test_json_form_keeps_unicode_and_tells_strings_from_symbols() -> None:
    tx = parse_tx('(context-tx (base-version 0) (client-id c1) (derive 部署/目标 (地区 "上海")))')
    text = tx_to_json(tx)
    assert "上海" in text
    assert json.loads(text) == {
        "base_version": 0,
        "client_id": "c1",
        "ops": [
            {"op": "derive", "id": "部署/目标", "sources": [], "body": [["地区", {"s": "上海"}]]}
        ],
    }
    _same(tx_from_json(text), tx)
    _same(tx_from_json(text.encode()), tx)


def test_every_operation_kind() -> None:
    tx = ContextTx(
        base_version=5,
        reason="all",
        client_id="abc",
        ops=(
            Derive(id="a", sources=("@e1",), body=(S("k"), "v", -7, ())),
            Revise(id="a", body=(S("k"),)),
            Relate(subject="a", label="uses", object="b"),
            Retire(refs=("a", "@e2")),
            Restore(ref="@e2"),
            Protect(id="a"),
            Unprotect(id="a"),
        ),
    )
    ops = tx_to_dict(tx)["ops"]
    assert ops[3:] == [
        {"op": "retire", "refs": ["a", "@e2"]},
        {"op": "restore", "ref": "@e2"},
        {"op": "protect", "id": "a"},
        {"op": "unprotect", "id": "a"},
    ]
    _same(tx_from_msgpack(tx_to_msgpack(tx)), tx)
    _same(tx_from_json(tx_to_json(tx)), tx)


def test_optional_fields_may_be_missing_or_null() -> None:
    base = {"base_version": 1, "ops": [{"op": "derive", "id": "a"}]}
    tx = tx_from_dict(base)
    assert (tx.reason, tx.client_id) == (None, None)
    assert tx.ops == (Derive(id="a"),)
    assert tx_from_dict({**base, "reason": None, "client_id": None}) == tx
    assert "reason" not in tx_to_dict(tx) and "client_id" not in tx_to_dict(tx)


_DERIVE = {"op": "derive", "id": "b"}


@pytest.mark.parametrize(
    ("op", "words"),
    [
        # the text's mistakes, in the dict form: provenance in the body is refused
        ({**_DERIVE, "body": [["x", 1], ["from", "@e1"]]}, "(from …) must come right after"),
        ({**_DERIVE, "body": [["x", ["y", ["from", "@e1"]]]]}, "reserved at any depth"),
        ({**_DERIVE, "sources": ["@e1"], "body": [["from", "@e2"]]}, "appears twice"),
        ({**_DERIVE, "body": [["form", "@e2"]]}, "misspelt (from …)"),
        ({**_DERIVE, "body": ["@e2", "x"]}, "write it in (from …)"),
        ({**_DERIVE, "body": [["retire", "@e1"]]}, "(retire …) is inside the body"),
        ({**_DERIVE, "from": ["@e1"]}, "unknown key 'from'; a frame's sources go in \"sources\""),
        ({"op": "revise", "id": "b", "source": ["@e1"]}, "unknown key 'source'"),
        ({"op": "revise", "id": "b", "sources": ["@e1"]}, "revise replaces the whole body"),
        ({"op": "derive", "id": "@e1"}, "'@e1' is an event"),
        ({"op": "relate", "subject": "a", "label": "l", "object": "@e1"}, "is an event"),
    ],
)
def test_the_dict_form_refuses_the_same_mistakes(op: dict[str, Any], words: str) -> None:
    d = {"base_version": 1, "ops": [op]}
    for decode in (
        tx_from_dict,
        lambda x: tx_from_json(json.dumps(x)),
        lambda x: tx_from_msgpack(pack(x)),
    ):
        with pytest.raises(WireError) as info:
            decode(d)
        assert words in info.value.message
        assert info.value.message.startswith("ops[0]")


def test_content_that_merely_looks_reserved_travels() -> None:
    body = [["route", [{"s": "from"}, "Paris"]], ["steps", ["retire", "old"]], ["seen", "@e1"]]
    tx = tx_from_dict({"base_version": 1, "ops": [{**_DERIVE, "body": body}]})
    _same(tx_from_json(tx_to_json(tx)), tx)
    assert tx_to_dict(tx)["ops"][0]["body"] == body


def test_big_integers_travel_as_one_extension_type() -> None:
    big = 10**39 * 7
    tx = ContextTx(base_version=0, ops=(Derive(id="a", body=((S("n"), big, -big),)),))
    _same(tx_from_msgpack(tx_to_msgpack(tx)), tx)
    _same(tx_from_json(tx_to_json(tx)), tx)
    assert unpack(pack([big, -(1 << 63), (1 << 64) - 1])) == [big, -(1 << 63), (1 << 64) - 1]
    small = msgpack.packb(msgpack.ExtType(EXT_BIGINT, b"5"))
    with pytest.raises(WireError, match="64-bit"):
        unpack(b"\x01" + small)
    for junk in (b"05", b"1.5", b"\xff", b"1" * 41):
        with pytest.raises(WireError):
            unpack(b"\x01" + msgpack.packb(msgpack.ExtType(EXT_BIGINT, junk)))
    with pytest.raises(WireError, match="40 digits"):
        pack(10**40)


# --- refusals ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "words"),
    [
        (b"", "empty"),
        (b"\x02\x80", "unsupported wire version 2"),
        (b"\x00", "unsupported wire version 0"),
        (b"\x01", "malformed msgpack"),
        (b"\x01\xc1", "malformed msgpack"),
        (b"\x01\x80\x80", "trailing bytes"),
        (b"\x01" + msgpack.packb(msgpack.ExtType(5, b"x")), "extension type 5"),
        (b"\x01\xd6\xff\x00\x00\x00\x00", "Timestamp"),
        (b"\x01" + msgpack.packb({1: 2}), "map key"),
        (b"\x01" + msgpack.packb([]), "must be a map"),
        (b"\x01" + msgpack.packb({"base_version": 1}), "missing ops"),
        (b"\x01" + msgpack.packb({"base_version": "1", "ops": []}), "base_version"),
        (b"\x01" + msgpack.packb({"base_version": True, "ops": []}), "base_version"),
        (b"\x01" + msgpack.packb({"base_version": 1.0, "ops": []}), "base_version"),
        (b"\x01" + msgpack.packb({"base_version": 1, "ops": []}), "ops"),
        (b"\x01" + msgpack.packb({"base_version": -1, "ops": [{"op": "protect", "id": "a"}]}), "0"),
        (b"\x01" + msgpack.packb({"base_version": 1, "ops": [], "x": 1}), "unknown key 'x'"),
        (b"\x01" + msgpack.packb({"base_version": 1, "ops": [{"op": "frob"}]}), "unknown op"),
        (b"\x01" + msgpack.packb({"base_version": 1, "ops": [7]}), "ops[0]"),
        (
            b"\x01" + msgpack.packb({"base_version": 1, "ops": [{"op": "derive", "id": "9a"}]}),
            "ops[0] (derive): not a frame id: '9a'",
        ),
        (
            b"\x01"
            + msgpack.packb(
                {"base_version": 1, "ops": [{"op": "derive", "id": "a", "body": [1.5]}]}
            ),
            "body",
        ),
        (
            b"\x01"
            + msgpack.packb(
                {"base_version": 1, "ops": [{"op": "derive", "id": "a", "body": [{"s": 1}]}]}
            ),
            "body",
        ),
        (
            b"\x01" + msgpack.packb({"base_version": 1, "ops": [{"op": "retire", "refs": []}]}),
            "at least one",
        ),
        (
            b"\x01"
            + msgpack.packb(
                {"base_version": 1, "ops": [{"op": "protect", "id": b"a"}]}, use_bin_type=True
            ),
            "must be a string",
        ),
    ],
)
def test_bad_payloads(payload: bytes, words: str) -> None:
    with pytest.raises(WireError) as info:
        tx_from_msgpack(payload)
    assert words in str(info.value)


def test_payload_size_limit() -> None:
    with pytest.raises(WireError, match="larger than"):
        tx_from_msgpack(b"\x01" + b"\x00" * MAX_PAYLOAD_BYTES)
    with pytest.raises(WireError, match="larger than"):
        unpack(bytearray(MAX_PAYLOAD_BYTES + 1))
    with pytest.raises(WireError, match="larger than"):
        tx_from_json(" " * (MAX_PAYLOAD_BYTES + 1))
    with pytest.raises(WireError, match="larger than"):
        pack(b"x" * MAX_PAYLOAD_BYTES)


def test_wrong_input_types() -> None:
    wrong: list[Any] = ["text", None, 1, [1]]
    for value in wrong:
        with pytest.raises(WireError):
            tx_from_msgpack(value)
        with pytest.raises(WireError):
            unpack(value)
    with pytest.raises(WireError):
        tx_from_json(None)  # type: ignore[arg-type]
    not_tx: list[Any] = [None, [], "x", {"base_version": 1, "ops": [], 1: 2}]
    for item in not_tx:
        with pytest.raises(WireError):
            tx_from_dict(item)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "malformed JSON"),
        ("{", "malformed JSON"),
        ('{"base_version": 1, "base_version": 2, "ops": []}', "duplicate key"),
        ('{"base_version": NaN, "ops": []}', "NaN"),
        ('{"base_version": 1, "ops": [{"op": "protect", "id": "a"}]} x', "malformed JSON"),
        (
            '{"base_version": 1, "reason": "\\ud800", "ops": [{"op": "protect", "id": "a"}]}',
            "surrogate",
        ),
        ('{"base_version": 1' + "0" * 5000 + ', "ops": []}', "malformed JSON"),
        ("[" * 100_000, "nests too deeply"),
        ("[" * 100 + "]" * 100, "deeper than 64"),
    ],
)
def test_bad_json(text: str, words: str) -> None:
    with pytest.raises(WireError) as info:
        tx_from_json(text)
    assert words in str(info.value)


def test_json_bytes_must_be_utf8() -> None:
    with pytest.raises(WireError, match="UTF-8"):
        tx_from_json(b'{"base_version": 1, "reason": "\xff"}')


def test_deep_nesting_is_a_wire_error() -> None:
    deep = b"\x01" + b"\x91" * 10_000 + b"\xc0"
    for decode in (tx_from_msgpack, unpack):
        with pytest.raises(WireError, match="nests"):
            decode(deep)
    medium = b"\x01" + b"\x91" * (MAX_NESTING + 1) + b"\xc0"
    with pytest.raises(WireError, match="deeper than 64"):
        unpack(medium)
    assert unpack(b"\x01" + b"\x91" * MAX_NESTING + b"\xc0") is not None
    body_deep: Any = "x"
    for _ in range(100):
        body_deep = [body_deep]
    tx = {"base_version": 1, "ops": [{"op": "derive", "id": "a", "body": [body_deep]}]}
    with pytest.raises(WireError, match="deeper"):
        tx_from_msgpack(b"\x01" + msgpack.packb(tx))
    with pytest.raises(WireError):
        tx_from_json(json.dumps(tx))
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    with pytest.raises(WireError):
        pack(cyclic)


def test_encoders_refuse_invalid_unicode() -> None:
    with pytest.raises(ValidationError, match="lone surrogate"):  # the model refuses it first
        Derive(id="a", body=("\ud800",))
    op = Derive.model_construct(id="a", sources=(), body=("\ud800",))
    tx = ContextTx.model_construct(base_version=0, reason=None, client_id=None, ops=(op,))
    with pytest.raises(WireError):
        tx_to_msgpack(tx)
    with pytest.raises(WireError):
        tx_to_json(tx)


# --- generic payloads ---------------------------------------------------------------


def test_pack_closed_set() -> None:
    value: dict[str, Any] = {
        "a": [1, -2, 2.5, None, True, False, b"\x00\xff", "上海", {"k": []}],
        "t": (1, 2),
    }
    assert unpack(pack(value)) == {**value, "t": [1, 2]}
    for bad in ({1: 2}, {"a": {1, 2}}, object(), 1j, {"a": Symbol}, "\udfff"):
        with pytest.raises(WireError):
            pack(bad)


plain_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(10**40) + 1, 10**40 - 1),
        st.floats(allow_nan=False),
        st.text(st.characters(codec="utf-8"), max_size=10),
        st.binary(max_size=10),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.text(st.characters(codec="utf-8"), max_size=5), children, max_size=4),
    ),
    max_leaves=20,
)


@FAST
@given(plain_values)
def test_pack_unpack_roundtrip(value: Any) -> None:
    assert unpack(pack(value)) == value


# --- properties ---------------------------------------------------------------------


@FAST
@given(transactions)
def test_msgpack_roundtrip(tx: ContextTx) -> None:
    _same(tx_from_msgpack(tx_to_msgpack(tx)), tx)


@FAST
@given(transactions)
def test_json_roundtrip(tx: ContextTx) -> None:
    _same(tx_from_json(tx_to_json(tx)), tx)
    _same(tx_from_dict(tx_to_dict(tx)), tx)


def _only_wire_errors(data: Any) -> None:
    try:
        tx = tx_from_msgpack(data)
    except WireError:
        pass
    else:
        _same(tx_from_msgpack(tx_to_msgpack(tx)), tx)
    try:
        value = unpack(data)
    except WireError:
        pass
    else:
        assert pack(unpack(pack(value))) == pack(value)  # bytes, so that NaN compares


@settings(max_examples=examples(300), deadline=None)
@given(st.one_of(st.binary(max_size=64), st.binary(max_size=64).map(lambda b: b"\x01" + b)))
def test_random_bytes_only_raise_wire_error(data: bytes) -> None:
    _only_wire_errors(data)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(transactions)
def test_truncated_payloads_only_raise_wire_error(tx: ContextTx) -> None:
    data = tx_to_msgpack(tx)
    for cut in range(len(data)):
        with pytest.raises(WireError):
            tx_from_msgpack(data[:cut])
    text = tx_to_json(tx)
    for cut in range(0, len(text), max(1, len(text) // 40)):
        with pytest.raises(WireError):
            tx_from_json(text[:cut])


garbage = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(1 << 63), (1 << 64) - 1),
        st.floats(),
        st.text(st.characters(codec="utf-8"), max_size=8),
        st.binary(max_size=8),
        st.sampled_from(["op", "derive", "id", "body", "sources", "refs", "s", "a", "@e1"]),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(
            st.sampled_from(
                ["base_version", "reason", "client_id", "ops", "op", "id", "body", "s", "refs"]
            ),
            children,
            max_size=4,
        ),
    ),
    max_leaves=25,
)


def _replace_somewhere(value: Any, data: st.DataObject) -> Any:
    """*value* with one randomly chosen sub-value replaced by garbage."""
    if isinstance(value, dict) and value and data.draw(st.booleans()):
        key = data.draw(st.sampled_from(sorted(value)))
        return {**value, key: _replace_somewhere(value[key], data)}
    if isinstance(value, list) and value and data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(value) - 1))
        return value[:i] + [_replace_somewhere(value[i], data)] + value[i + 1 :]
    return data.draw(garbage)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(transactions, st.data())
def test_garbage_structures_only_raise_wire_error(tx: ContextTx, data: st.DataObject) -> None:
    mutated = _replace_somewhere(tx_to_dict(tx), data)
    _only_wire_errors(pack(mutated))
    try:
        tx_from_json(json.dumps(mutated, default=repr))
    except WireError:
        pass
    try:
        tx_from_dict(mutated)
    except WireError:
        pass


@settings(max_examples=examples(100), deadline=None)
@given(garbage)
def test_arbitrary_structures_only_raise_wire_error(value: Any) -> None:
    _only_wire_errors(b"\x01" + msgpack.packb(value, use_bin_type=True))


@settings(max_examples=examples(200), deadline=None)
@given(st.text(max_size=80))
def test_random_json_text_only_raises_wire_error(text: str) -> None:
    try:
        tx_from_json(text)
    except WireError:
        pass


def test_typed_helper_sees_symbols() -> None:
    assert typed((S("a"),)) != typed(("a",))


# --- the transaction's original text ---------------------------------------------


def test_the_text_travels_beside_the_parsed_form() -> None:
    tx = parse_tx(RELEASE_TX)
    assert tx_to_dict(tx, RELEASE_TX) == {**RELEASE_DICT, "text": RELEASE_TX}
    data = tx_to_msgpack(tx, RELEASE_TX)
    assert data[0] == WIRE_VERSION == 1  # an optional key: no new version
    assert submitted_from_msgpack(data) == SubmittedTx(tx, RELEASE_TX)
    assert submitted_from_json(tx_to_json(tx, RELEASE_TX)) == SubmittedTx(tx, RELEASE_TX)
    assert submitted_from_dict(tx_to_dict(tx, RELEASE_TX)) == SubmittedTx(tx, RELEASE_TX)
    # decoders of the bare transaction check the text and leave it out
    _same(tx_from_msgpack(data), tx)
    _same(tx_from_json(tx_to_json(tx, RELEASE_TX)), tx)


def test_payloads_without_text_decode_as_before() -> None:
    tx = parse_tx(RELEASE_TX)
    old = b"\x01" + msgpack.packb(RELEASE_DICT)  # a payload made before the text existed
    assert submitted_from_msgpack(old) == SubmittedTx(tx, None)
    with_none = b"\x01" + msgpack.packb({**RELEASE_DICT, "text": None})
    assert submitted_from_msgpack(with_none) == SubmittedTx(tx, None)
    assert submitted_from_json(json.dumps(RELEASE_DICT)) == SubmittedTx(tx, None)
    assert "text" not in tx_to_dict(tx) and tx_to_msgpack(tx) == tx_to_msgpack(tx, None)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (12, "text must be a string"),
        (b"(context-tx)", "text must be a string"),
        ("", "text must not be empty"),
        (["(context-tx"], "text must be a string"),
        ({"s": "x"}, "text must be a string"),
    ],
)
def test_a_malformed_text_is_a_wire_error(text: Any, message: str) -> None:
    doc = {**RELEASE_DICT, "text": text}
    for decode in (submitted_from_msgpack, tx_from_msgpack):
        with pytest.raises(WireError, match=message):
            decode(b"\x01" + msgpack.packb(doc, use_bin_type=True))
    with pytest.raises(WireError, match=message):
        submitted_from_dict(doc)
    if not isinstance(text, bytes):
        with pytest.raises(WireError, match=message):
            submitted_from_json(json.dumps(doc))
    with pytest.raises(WireError):
        tx_to_msgpack(parse_tx(RELEASE_TX), text)


def test_a_text_with_a_lone_surrogate_or_bad_utf8_is_a_wire_error() -> None:
    tx = parse_tx(RELEASE_TX)
    with pytest.raises(WireError):
        tx_to_msgpack(tx, "(context-tx \ud800)")
    with pytest.raises(WireError):
        tx_to_json(tx, "(context-tx \ud800)")
    with pytest.raises(WireError):
        submitted_from_json(json.dumps({**RELEASE_DICT, "text": "\ud800"}))
    raw = msgpack.packb({**RELEASE_DICT, "text": "T"})
    bad = raw.replace(b"\xa1T", b"\xa1\xff")  # the one-character text, now not UTF-8
    assert bad != raw
    with pytest.raises(WireError):
        submitted_from_msgpack(b"\x01" + bad)


@FAST
@given(transactions, st.text(min_size=1, max_size=200))
def test_text_roundtrip(tx: ContextTx, text: str) -> None:
    try:
        data = tx_to_msgpack(tx, text)
    except WireError:  # a lone surrogate in the text
        assert any(0xD800 <= ord(c) <= 0xDFFF for c in text)
        return
    got = submitted_from_msgpack(data)
    _same(got.tx, tx)
    assert got.text == text
    back = submitted_from_json(tx_to_json(tx, text))
    _same(back.tx, tx)
    assert back.text == text


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(transactions, garbage)
def test_garbage_in_the_text_only_raises_wire_error(tx: ContextTx, value: Any) -> None:
    doc = {**tx_to_dict(tx), "text": value}
    try:
        got = submitted_from_msgpack(pack(doc))
    except WireError:
        assert not (isinstance(value, str) and value) and value is not None
    else:
        assert got.text == value or (value is None and got.text is None)
