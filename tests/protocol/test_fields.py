"""Field-level edits: keyed bodies, set/append/remove/incr/unset, their conflict rules (R22–R24),
receipts that say applied/rebased/merged, and their three forms (text, JSON, msgpack)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.errors import NotFound, ParseError, WireError
from protocol.fields import (
    apply_edit,
    changed_fields,
    edits_between,
    field_index,
    form_key,
    same_form,
)
from protocol.forms import Symbol
from protocol.receipts import Receipt
from protocol.sexpr import print_form
from protocol.tx import AppendField, ContextTx, Derive, IncrField, SetField
from protocol.txlang import parse_tx, print_tx
from protocol.txwire import tx_from_dict, tx_from_json, tx_from_msgpack, tx_to_json, tx_to_msgpack
from service.context import Context
from storage.memory import MemoryBackend
from tests.examples import examples
from tests.protocol.strategies import field_edits, labels, texts

S = Symbol
FAST = settings(
    max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def _ctx() -> Context:
    return Context(MemoryBackend())


def _commit(ctx: Context, base: int, *ops: str) -> dict[str, Any]:
    return ctx.commit(f"(context-tx (base-version {base}) {' '.join(ops)})").to_dict()


def _body(ctx: Context, frame_id: str) -> str:
    return str(ctx.frame(frame_id).body)


# --- the pure rules -------------------------------------------------------------


def test_a_keyed_body_is_a_set_of_fields_by_head_atom() -> None:
    assert field_index(((S("status"), S("open")), (S("tasks"), "t1", "t2"))) == {
        "status": 0,
        "tasks": 1,
    }
    assert field_index(()) == {}
    for not_keyed in (
        (S("loose"),),
        ("text",),
        ((),),
        (("status", S("x")),),  # a string head is content, not a field name
        ((S("a"), 1), (S("a"), 2)),  # a head twice
    ):
        assert field_index(not_keyed) is None


def test_each_edit_on_a_body() -> None:
    body = ((S("status"), S("open")), (S("tasks"), "t1", S("t1"), "t1"), (S("n"), 4))
    assert apply_edit(body, "set", "f", "status", (S("done"),))[0] == (S("status"), S("done"))
    assert apply_edit(body, "set", "f", "owner", ())[-1] == (S("owner"),)
    assert apply_edit(body, "append", "f", "tasks", ("t2",))[1] == (
        S("tasks"),
        "t1",
        S("t1"),
        "t1",
        "t2",
    )
    assert apply_edit(body, "append", "f", "new", (1, 2))[-1] == (S("new"), 1, 2)
    # remove tells the atom t1 from the string "t1", and removes every occurrence.
    assert apply_edit(body, "remove", "f", "tasks", ("t1",))[1] == (S("tasks"), S("t1"))
    assert apply_edit(body, "remove", "f", "absent", ("x",)) == body
    assert apply_edit(body, "incr", "f", "n", (-10,))[2] == (S("n"), -6)
    assert apply_edit(body, "incr", "f", "fresh", (3,))[-1] == (S("fresh"), 3)
    assert apply_edit(body, "unset", "f", "tasks", ()) == (body[0], body[2])
    assert apply_edit(body, "unset", "f", "absent", ()) == body


@pytest.mark.parametrize(
    ("body", "op", "field", "values", "code"),
    [
        ((S("loose"),), "set", "a", (1,), "not_keyed"),
        (((S("n"), S("x")),), "incr", "n", (1,), "not_a_number"),
        (((S("n"), 1, 2),), "incr", "n", (1,), "not_a_number"),
        (((S("n"), (1 << 63) - 1),), "incr", "n", (1,), "counter_overflow"),
        (((S("n"), -(1 << 63)),), "incr", "n", (-1,), "counter_overflow"),
    ],
)
def test_an_edit_that_cannot_apply_has_a_stable_code(
    body: tuple[Any, ...], op: str, field: str, values: tuple[Any, ...], code: str
) -> None:
    from protocol.fields import FieldError

    with pytest.raises(FieldError) as info:
        apply_edit(body, op, "f", field, values)
    assert info.value.code == code


def test_changed_fields_of_a_whole_body_write() -> None:
    old = ((S("a"), 1), (S("b"), 2), (S("c"), 3))
    new = ((S("a"), 1), (S("b"), 20), (S("d"), 4))
    assert changed_fields(old, new) == {"b", "c", "d"}
    assert changed_fields(None, new) == {"a", "b", "d"}
    assert changed_fields(old, (S("loose"),)) is None
    assert changed_fields((S("loose"),), new) is None
    assert same_form((S("a"), "x"), (S("a"), "x")) and not same_form(S("x"), "x")


# --- the three forms -----------------------------------------------------------


@FAST
@given(st.lists(field_edits, min_size=1, max_size=4))
def test_field_edits_round_trip_through_text_json_and_msgpack(edits: list[Any]) -> None:
    tx = ContextTx(base_version=7, ops=tuple(edits))
    assert parse_tx(print_tx(tx)) == tx
    assert tx_from_json(tx_to_json(tx)) == tx
    assert tx_from_msgpack(tx_to_msgpack(tx)) == tx


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("(append a (items))", "at least one item"),
        ("(remove a (items))", "at least one item"),
        ("(incr a (n two))", "one integer"),
        ("(incr a (n 1 2))", "one integer"),
        ("(unset a (n))", "must be an atom"),
        ("(set a (x) (y))", "exactly one field"),
        ("(set a x)", "a list headed by its name"),
        ('(set a ("x" 1))', "a list headed by its name"),
        ("(set a (x (from @e1)))", "(from …)"),
        ("(set a (from @e1))", "exactly one field"),
        ("(set @e1 (x 1))", "is an event"),
        ("(append a (from (x 1)) (y 2))", "a source must be an atom"),
    ],
)
def test_malformed_field_edits_are_parse_errors(text: str, words: str) -> None:
    with pytest.raises(ParseError, match=re.escape(words)):
        parse_tx(f"(context-tx (base-version 1) {text})")


@pytest.mark.parametrize(
    "op",
    [
        {"op": "set", "id": "a", "field": "x", "values": "nope"},
        {"op": "set", "id": "a", "values": [1]},
        {"op": "append", "id": "a", "field": "x", "values": []},
        {"op": "incr", "id": "a", "field": "x", "values": [True]},
        {"op": "unset", "id": "a", "field": "x", "values": [1]},
        {"op": "set", "id": "a", "field": "from", "values": [1]},
        {"op": "set", "id": "a", "field": "x", "from": ["@e1"]},
        {"op": "set", "id": "a", "field": "x", "values": [["from", "@e1"]]},
        {"op": "set", "id": "a", "field": {"s": "x"}, "values": []},
    ],
)
def test_malformed_dict_forms_are_wire_errors(op: dict[str, Any]) -> None:
    with pytest.raises(WireError):
        tx_from_dict({"base_version": 1, "ops": [op]})


def test_new_operation_names_stay_field_names_in_a_body() -> None:
    tx = parse_tx("(context-tx (base-version 0) (derive a (set 1) (append x) (unset y)))")
    ctx = _ctx()
    assert ctx.submit(tx).committed
    assert _commit(ctx, 1, "(incr a (set 2))")["status"] == "committed"
    assert _body(ctx, "a") == "(set 3) (append x) (unset y)"


# --- conflicts -------------------------------------------------------------------


def test_appends_from_one_stale_base_all_land_and_say_merged() -> None:
    ctx = _ctx()
    _commit(ctx, 0, "(derive shared (tokens))")
    base = ctx.version()
    outcomes = []
    for w in range(8):
        r = _commit(ctx, base, f"(append shared (tokens w{w}-1))")
        assert r["status"] == "committed", r
        outcomes.append(r["edits"][0]["outcome"])
    assert outcomes == ["applied"] + ["merged"] * 7
    assert _body(ctx, "shared") == "(tokens " + " ".join(f"w{w}-1" for w in range(8)) + ")"
    assert ctx.frame("shared").revision == 9


def test_set_of_one_field_conflicts_and_names_the_field() -> None:
    ctx = _ctx()
    _commit(ctx, 0, "(derive release (status open) (owner alice))")
    base = ctx.version()
    first = _commit(ctx, base, "(set release (status blocked))")
    second = _commit(ctx, base, "(set release (status shipped))")
    assert first["status"] == "committed" and second["status"] == "rejected"
    assert second["conflicts"] == [
        {"id": "release", "version": first["version"], "field": "status"}
    ]
    assert second["errors"][0]["code"] == "conflict"
    assert "status of release" in second["errors"][0]["message"]
    assert second["current"][0]["body"] == "(status blocked) (owner alice)"
    # the rejection wrote nothing
    assert ctx.version() == first["version"]
    assert Receipt.from_dict(second).conflicts[0].field == "status"


def test_a_set_after_a_concurrent_append_to_its_field_conflicts() -> None:
    ctx = _ctx()
    _commit(ctx, 0, "(derive f (items a))")
    base = ctx.version()
    assert _commit(ctx, base, "(append f (items b))")["status"] == "committed"
    lost = _commit(ctx, base, "(set f (items a c))")
    assert lost["status"] == "rejected" and lost["conflicts"][0]["field"] == "items"
    assert _commit(ctx, base, "(unset f items)")["status"] == "rejected"


def test_a_revise_conflicts_with_a_concurrent_field_edit_and_sets_see_its_fields() -> None:
    ctx = _ctx()
    _commit(ctx, 0, "(derive f (a 1) (b 1))")
    base = ctx.version()
    assert _commit(ctx, base, "(incr f (a 1))")["status"] == "committed"
    assert _commit(ctx, base, "(revise f (a 1) (b 5))")["status"] == "rejected"
    base = ctx.version()
    assert _commit(ctx, base, "(revise f (a 2) (b 7))")["status"] == "committed"
    assert _commit(ctx, base, "(set f (a 9))")["status"] == "committed"  # a did not change
    assert _commit(ctx, base, "(set f (b 9))")["status"] == "rejected"  # b did
    base = ctx.version()
    assert _commit(ctx, base, '(revise f "no fields now")')["status"] == "committed"
    assert _commit(ctx, base, "(set f (c 1))")["conflicts"] == [
        {"id": "f", "version": ctx.version()}
    ]


def test_a_lifecycle_change_refuses_a_stale_edit_and_an_edit_cancels_a_retirement() -> None:
    ctx = _ctx()
    _commit(ctx, 0, "(derive f (items))")
    base = ctx.version()
    assert _commit(ctx, base, "(retire f)")["status"] == "committed"
    stale = _commit(ctx, base, "(append f (items x))")
    assert stale["status"] == "rejected" and stale["conflicts"] == [{"id": "f", "version": 2}]
    fresh = _commit(ctx, ctx.version(), "(append f (items x))")
    assert fresh["retirement_cancelled"] == ["f"]
    assert ctx.frame("f").lifecycle == "active"
    _commit(ctx, ctx.version(), "(retire f)")
    ctx.observe("tool_result", "t")
    for _ in range(9):
        ctx.observe("tool_result", "t")
        ctx.claim()
    assert ctx.frame("f").lifecycle == "retired"
    refused = _commit(ctx, ctx.version(), "(set f (items))")
    assert refused["errors"][0]["code"] == "retired_frame"


def test_rebased_when_the_frame_did_not_change_since_the_base() -> None:
    ctx = _ctx()
    _commit(ctx, 0, "(derive f (a 1))", "(derive g (b 1))")
    base = ctx.version()
    _commit(ctx, base, "(set g (b 2))")
    r = _commit(ctx, base, "(set f (a 2))")
    assert r["rebased"] is True and r["edits"][0]["outcome"] == "rebased"


def test_edits_grow_sources_and_each_is_a_revision_in_the_history() -> None:
    ctx = _ctx()
    e1 = ctx.observe("tool_result", "cpu hot").ref
    e2 = ctx.observe("tool_result", "disk full").ref
    _commit(ctx, 0, "(derive f (items))")
    _commit(ctx, ctx.version(), f"(append f (from {e1}) (items cpu))")
    _commit(ctx, ctx.version(), f"(append f (from {e2} {e1}) (items disk))", "(incr f (n 1))")
    frame = ctx.frame("f")
    assert frame.revision == 4 and len(frame.sources) == 2
    entries = [(h.op, h.revision) for h in ctx.history("f")]
    assert entries == [("derive", 1), ("append", 2), ("append", 3), ("incr", 4)]


@pytest.mark.parametrize(
    ("setup", "edit", "code"),
    [
        ('(derive f "plain text")', "(append f (items x))", "not_keyed"),
        ("(derive f (n x))", "(incr f (n 1))", "not_a_number"),
        ("(derive f (a 1))", "(set g (a 1))", "unknown_ref"),
        ("(derive f (a 1))", "(set f (from @e99) (a 1))", "unknown_ref"),
        ("(derive f (a 1))", "(set f (from f) (a 1))", "self_source"),
    ],
)
def test_a_refused_edit_rejects_the_whole_transaction(setup: str, edit: str, code: str) -> None:
    ctx = _ctx()
    _commit(ctx, 0, setup)
    before = ctx.version()
    r = _commit(ctx, before, "(derive other (x 1))", edit)
    assert r["status"] == "rejected" and r["errors"][0] == {
        "op": 1,
        "code": code,
        "message": r["errors"][0]["message"],
    }
    assert ctx.version() == before
    with pytest.raises(NotFound):
        ctx.frame("other")


# --- the properties the fleet relies on --------------------------------------------


def _fields(body_text: str) -> dict[str, Any]:
    (op,) = parse_tx(f"(context-tx (base-version 0) (derive x {body_text}))").ops
    assert isinstance(op, Derive)
    return {str(f[0]): f for f in op.body}


def _run(order: list[int], edits: list[str], base_body: str) -> str:
    ctx = _ctx()
    _commit(ctx, 0, f"(derive f {base_body})")
    base = ctx.version()
    for i in order:
        r = _commit(ctx, base, edits[i])
        assert r["status"] == "committed", r
    return _body(ctx, "f")


_items = st.one_of(labels.map(Symbol), texts, st.integers(-(10**6), 10**6))


@FAST
@given(st.data())
def test_appends_and_increments_commute_in_any_order(data: st.DataObject) -> None:
    writers = data.draw(st.integers(2, 5))
    items = data.draw(
        st.lists(st.lists(_items, min_size=1, max_size=3), min_size=writers, max_size=writers)
    )
    deltas = data.draw(st.lists(st.integers(-50, 50), min_size=writers, max_size=writers))
    edits = [
        f"(append f (own{w} {' '.join(print_form(x) for x in items[w])}))"
        + f" (incr f (n {deltas[w]}))"
        + f" (append f (all w{w}))"
        for w in range(writers)
    ]
    order = data.draw(st.permutations(range(writers)))
    one = _run(list(range(writers)), edits, "(n 0) (all)")
    other = _run(list(order), edits, "(n 0) (all)")
    # Appends to different fields and increments commute exactly: the same body, field
    # for field, except the shared list's order, which is commit order.
    fields_one, fields_other = _fields(one), _fields(other)
    assert fields_one.keys() == fields_other.keys()
    for name in fields_one:
        if name == "all":
            assert sorted(map(str, fields_one[name])) == sorted(map(str, fields_other[name]))
        else:
            assert fields_one[name] == fields_other[name]
    assert fields_one["n"] == (S("n"), sum(deltas))
    assert [str(x) for x in fields_other["all"][1:]] == [f"w{w}" for w in order]


@FAST
@given(st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=2, max_size=6), st.data())
def test_sets_from_one_base_conflict_exactly_when_their_fields_meet(
    names: list[str], data: st.DataObject
) -> None:
    ctx = _ctx()
    _commit(ctx, 0, "(derive f (a 0) (b 0) (c 0) (d 0))")
    base = ctx.version()
    seen: set[str] = set()
    for i, name in enumerate(names):
        use_unset = data.draw(st.booleans())
        edit = f"(unset f {name})" if use_unset else f"(set f ({name} {i + 1}))"
        r = _commit(ctx, base, edit)
        if name in seen:
            assert r["status"] == "rejected"
            assert [c.get("field") for c in r["conflicts"]] == [name]
        else:
            assert r["status"] == "committed", r
            seen.add(name)


def test_set_models_hold_the_rules_for_every_port() -> None:
    with pytest.raises(ValueError, match="one integer"):
        IncrField(id="a", field="n", values=("1",))
    with pytest.raises(ValueError, match="at least one item"):
        AppendField(id="a", field="n")
    with pytest.raises(ValueError, match="not a field name"):
        SetField(id="a", field="has space")
    assert SetField(id="a", field="x").values == ()


def test_edits_between_two_bodies_say_what_a_read_modify_write_meant() -> None:
    old = ((S("a"), 1), (S("t"), S("x")), (S("z"), 1, 2, 1, "1"))
    assert edits_between(old, ((S("a"), 2), (S("t"), S("x"), S("y")), (S("z"), 1, 2, 1, "1"))) == [
        ("set", "a", (2,)),
        ("append", "t", (S("y"),)),
    ]
    assert edits_between(old, ((S("a"), 1), (S("z"), 2, "1"))) == [
        ("unset", "t", ()),
        ("remove", "z", (1,)),
    ]
    assert edits_between(old, old) == []
    assert edits_between(old, ((S("n"),), *old)) is None  # a new field before kept ones
    assert edits_between(old, (old[1], old[0], old[2])) is None  # kept fields reordered
    assert edits_between(old, ("loose",)) is None
    assert edits_between(old, (*old, (S("n"), 0))) == [("set", "n", (0,))]


@FAST
@given(
    st.lists(st.sampled_from(["a", "b", "c"]), unique=True).map(
        lambda names: tuple((S(n), *range(len(n) + 2)) for n in names)
    ),
    st.lists(
        st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.lists(_items, max_size=3)),
        max_size=4,
    ),
)
def test_edits_between_then_applied_give_the_new_body_up_to_new_fields_order(
    old: tuple[Any, ...], changes: list[tuple[str, list[Any]]]
) -> None:
    new = old
    for name, values in changes:
        new = apply_edit(new, "set", "f", name, tuple(values))
    edits = edits_between(old, new)
    assert edits is not None
    body = old
    for op, name, values in edits:
        body = apply_edit(body, op, "f", name, values)
    assert _fields_of(body) == _fields_of(new)


def _fields_of(body: tuple[Any, ...]) -> dict[str, Any]:
    return {str(f[0]): [form_key(x) for x in f[1:]] for f in body}
