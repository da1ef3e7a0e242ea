"""The engine's and the wire's fast paths give exactly what the plain paths gave.

``tx_digest`` is stored for every client id (a retry is told from a reused id by
it), so its input must stay ``repr(tx.model_dump())`` value for value; the wire
decoder skips the model's second walk over a body it checked already, so a bad
body must still be refused.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from protocol.engine.conflicts import _dump, tx_digest
from protocol.errors import WireError
from protocol.forms import Symbol, check_form, is_atom_text
from protocol.sexpr import print_form, read_forms
from protocol.tx import ContextTx, Revise, new_tx
from protocol.txwire import tx_from_msgpack, tx_to_msgpack
from protocol.wire import ext_default
from tests.examples import examples
from tests.protocol.strategies import forms, transactions


@settings(max_examples=examples(300), deadline=None)
@given(transactions)
def test_the_digest_input_is_model_dump_value_for_value(tx: ContextTx) -> None:
    assert repr(_dump(tx)) == repr(tx.model_dump())
    old = hashlib.blake2b(repr(tx.model_dump()).encode(), digest_size=16).digest()
    assert tx_digest(tx) == old


@settings(max_examples=examples(300), deadline=None)
@given(forms())
def test_printing_and_checking_a_form_agree_with_reading_it_back(form: object) -> None:
    check_form(form)
    assert read_forms(print_form(form)) == [form]


def test_atom_text_is_decided_as_per_character() -> None:
    for text in ("a", "w1-3", "é", "漢字", "a b", "a\u00a0b", "a\u2028", "x(", 'x"', "x;", "x\\y"):
        per_char = not any(ch in '()";\\' or ch.isspace() or not ch.isprintable() for ch in text)
        assert is_atom_text(text) == per_char, text
    assert not is_atom_text("12") and not is_atom_text("")


def test_the_wire_still_refuses_a_bad_atom_in_a_body() -> None:
    tx = ContextTx(base_version=0, ops=(Revise(id="a", body=((Symbol("n"), 1),)),))
    good = tx_to_msgpack(tx)
    assert tx_from_msgpack(good) == tx
    bad = good.replace(b"\xa1n", b"\xa3a b")  # the atom n becomes "a b": not an atom
    with pytest.raises(WireError, match="not a valid atom"):
        tx_from_msgpack(bad)


def _plain_reference(form: object) -> object:
    """The frame record's body encoding as it was before its exact-type fast path."""
    if isinstance(form, Symbol):
        return str(form)
    if isinstance(form, str):
        return {"s": form}
    if isinstance(form, tuple):
        return [_plain_reference(x) for x in form]
    return form


class _Sym(Symbol):
    """A Symbol subclass: the fast path must leave it to the isinstance checks."""


class _Str(str):
    pass


class _Tuple(tuple):  # type: ignore[type-arg]
    pass


def _typed(value: object) -> object:
    """*value* with the exact type of every part beside it (1 and True differ here)."""
    if isinstance(value, list):
        return ("list", [_typed(v) for v in value])
    if isinstance(value, dict):
        return ("dict", {k: _typed(v) for k, v in value.items()})
    return (type(value).__name__, value)


@settings(max_examples=examples(300), deadline=None)
@given(forms())
def test_a_frame_body_record_is_what_it_was_before_the_fast_path(form: object) -> None:
    from protocol.state import _plain

    assert _typed(_plain(form)) == _typed(_plain_reference(form))


@pytest.mark.parametrize(
    "form",
    [
        True,
        False,
        0,
        -7,
        2.5,
        None,
        "text",
        Symbol("s"),
        _Sym("sub"),
        _Str("x"),
        _Tuple((Symbol("a"), 1)),
        (Symbol("run"), (True, _Str("q")), "t"),
    ],
)
def test_the_body_fast_path_keeps_bools_and_subclasses(form: object) -> None:
    from protocol.state import _plain

    got, want = _plain(form), _plain_reference(form)
    assert _typed(got) == _typed(want)
    assert msgpack.packb(got) == msgpack.packb(want)


@pytest.mark.parametrize(
    "ref",
    [
        "@e1",
        "@e42",
        "@e" + "9" * 18,
        "@e" + "1" * 19,
        "@e0",
        "@e01",
        "@e",
        "@e-1",
        "@e+1",
        "@e 1",
        "@e1 ",
        "@e1\n",
        "@e²",
        "@e١٢",
        "@ex",
        "e1",
        "frame/base",
        "@E1",
    ],
)
def test_an_event_ref_is_read_as_ref_seq_reads_it(ref: str) -> None:
    from protocol.engine.operations import _event_seq
    from protocol.ids import ref_seq

    try:
        want: int | None = ref_seq(ref)
    except ValueError:
        want = None
    assert _event_seq(ref) == want


@settings(max_examples=examples(200), deadline=None)
@given(forms(), st.sampled_from([None, (), ["k"], ("k", "j")]), st.booleans())
def test_a_frame_record_for_encoding_packs_as_its_record(
    form: object, keys: object, reasons_missing: bool
) -> None:
    from protocol.state import Frame, default_envelope

    env = default_envelope()
    env["keys"] = keys
    if reasons_missing:
        del env["review_reasons"]
    frame = Frame(id="f", revision=2, body=(form,), sources=("@e1",), envelope=env)
    shared = frame.record_for_encoding()
    assert _typed(shared) == _typed(frame.to_record())

    def pack(record: object) -> bytes:
        return msgpack.packb(record, use_bin_type=True, default=ext_default)  # type: ignore[no-any-return]

    assert pack(shared) == pack(frame.to_record())
    copied = frame.to_record()
    assert copied["envelope"] is not frame.envelope
    assert copied["envelope"]["keys"] is not frame.envelope.get("keys")


def _made(make: Callable[[], ContextTx]) -> object:
    try:
        tx = make()
    except ValidationError as e:
        return e.errors(include_url=False)
    return (tx, tx.model_fields_set, tx.model_dump())


@settings(max_examples=examples(200), deadline=None)
@given(transactions, st.data())
def test_new_tx_is_the_validated_constructor(tx: ContextTx, data: st.DataObject) -> None:
    """``new_tx`` skips pydantic's pass over operations that are models already: the
    model, its set fields and its dump are the validated constructor's, and out-of-bounds
    fields get the very same errors."""
    fields: dict[str, Any] = {"base_version": tx.base_version}
    if tx.reason is not None or data.draw(st.booleans()):
        fields["reason"] = tx.reason
    if tx.client_id is not None:
        fields["client_id"] = tx.client_id
    bad: dict[str, Any] = data.draw(
        st.sampled_from(
            [
                {},
                {"base_version": 1 << 63},
                {"base_version": -1},
                {"base_version": True},
                {"reason": "r" * 4097},
                {"client_id": ""},
                {"client_id": "c" * 201},
                {"reason": Symbol("atom")},
            ]
        )
    )
    ops: Any = data.draw(st.sampled_from([tx.ops, (), tx.ops * 300, tx.ops + ("no op",)]))
    fields = {**fields, **bad}
    got = _made(lambda: new_tx(ops, **fields))
    assert got == _made(lambda: ContextTx(ops=ops, **fields))
