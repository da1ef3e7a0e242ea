"""Hypothesis strategies for forms and context transactions, shared by the protocol tests.

Everything generated is valid: frame ids pass ``is_frame_id``, labels ``is_label``,
bodies ``check_form(…, 1)`` and hold no reserved form (``misplaced_form``); strings
are valid Unicode (no lone surrogates).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from protocol.forms import MAX_DEPTH, Symbol, is_atom_text
from protocol.ids import is_frame_id, is_label
from protocol.tx import (
    FIELD_EDIT_CLASSES,
    ContextTx,
    Derive,
    Envelope,
    Protect,
    Relate,
    Restore,
    Retire,
    Revise,
    Unprotect,
    Unrelate,
    misplaced_form,
)

_LETTERS = st.characters(categories=["Lu", "Ll", "Lo"])
_WORD = st.one_of(
    st.sampled_from("abcxyz09-_."),
    st.characters(categories=["Lu", "Ll", "Lo", "Nd"]),
)

frame_ids: st.SearchStrategy[str] = st.one_of(
    st.sampled_from(
        ["release", "test-result", "deployment/target-v2", "部署/目标", "发布/流程", "a", "x.y_z"]
    ),
    st.builds(
        lambda first, rest, segments: first + rest + "".join("/" + s for s in segments),
        _LETTERS,
        st.text(_WORD, max_size=8),
        st.lists(st.text(_WORD, min_size=1, max_size=6), max_size=2),
    ),
).filter(is_frame_id)

event_refs: st.SearchStrategy[str] = st.one_of(st.integers(1, 99), st.integers(1, 10**18 - 1)).map(
    lambda n: f"@e{n}"
)

refs: st.SearchStrategy[str] = st.one_of(frame_ids, event_refs)

_ATOM_CHARS = st.one_of(
    st.sampled_from("abz-+*/.@:<>=!?_01239"),
    st.characters(exclude_categories=["C", "Z"], exclude_characters='()";\\'),
)

atom_texts: st.SearchStrategy[str] = st.one_of(
    st.sampled_from(["from", "-", "1.5", "+1", "-01", "00", "@e1", "cn-shanghai", "上海", "é"]),
    st.text(_ATOM_CHARS, min_size=1, max_size=12),
).filter(is_atom_text)

labels: st.SearchStrategy[str] = atom_texts.filter(is_label)

symbols: st.SearchStrategy[Symbol] = atom_texts.map(Symbol)

texts: st.SearchStrategy[str] = st.one_of(
    st.sampled_from(
        ["", '"', "\\", "\n", "\t\r", "\x00\x1b\x7f\x85", "上海", "a;b (c)", "\\u0041"]
    ),
    st.text(st.characters(codec="utf-8"), max_size=20),
)

ints: st.SearchStrategy[int] = st.one_of(
    st.integers(-1000, 1000),
    st.integers(-(10**40) + 1, 10**40 - 1),
)

leaves: st.SearchStrategy[Any] = st.one_of(symbols, texts, ints)


def forms(max_leaves: int = 12) -> st.SearchStrategy[Any]:
    """Nested forms (Symbol, str, int, tuples) of moderate size and depth."""
    return st.recursive(
        leaves, lambda children: st.lists(children, max_size=4).map(tuple), max_leaves=max_leaves
    )


def nested(depth: int, leaf: Any) -> Any:
    """*leaf* wrapped in *depth* one-element lists."""
    form = leaf
    for _ in range(depth):
        form = (form,)
    return form


_body_starts = st.sampled_from(
    [
        (),
        (("from", Symbol("x")),),  # a string head is content; only the atom `from` is reserved
        ((Symbol("steps"), (Symbol("retire"), Symbol("x"))),),  # an op name deeper is content
        (nested(MAX_DEPTH - 1, 1),),
    ]
)

bodies: st.SearchStrategy[tuple[Any, ...]] = st.builds(
    lambda start, rest: start + tuple(rest), _body_starts, st.lists(forms(), max_size=3)
).filter(lambda body: misplaced_form("derive", "a", body, has_sources=False) is None)

_sources = st.lists(refs, max_size=3).map(tuple)

field_names: st.SearchStrategy[str] = labels.filter(lambda name: name != "from")


def _edit_values(op: str) -> st.SearchStrategy[tuple[Any, ...]]:
    if op == "incr":
        return ints.map(lambda n: (n,))
    if op == "unset":
        return st.just(())
    return st.lists(forms(6), min_size=op != "set", max_size=3).map(tuple)


def _valid_edit(op: str, frame: str, sources: Any, field: str, values: Any) -> Any:
    try:
        edit = {"id": frame, "sources": sources, "field": field, "values": values}
        return FIELD_EDIT_CLASSES[op].model_validate(edit)
    except ValueError:  # a reserved form in the values: (from …) somewhere
        return None


field_edits: st.SearchStrategy[Any] = (
    st.sampled_from(sorted(FIELD_EDIT_CLASSES))
    .flatmap(
        lambda op: st.builds(
            _valid_edit, st.just(op), frame_ids, _sources, field_names, _edit_values(op)
        )
    )
    .filter(lambda edit: edit is not None)
)
"""Valid field edits (``set``, ``append``, ``remove``, ``incr``, ``unset``) of any frame."""


ops: st.SearchStrategy[Any] = st.one_of(
    field_edits,
    st.builds(Derive, id=frame_ids, sources=_sources, body=bodies),
    st.builds(Revise, id=frame_ids, sources=_sources, body=bodies.filter(bool)),
    st.builds(Relate, subject=frame_ids, label=labels, object=frame_ids),
    st.builds(Unrelate, subject=frame_ids, label=labels, object=frame_ids),
    st.builds(Retire, refs=st.lists(refs, min_size=1, max_size=3).map(tuple)),
    st.builds(Restore, ref=refs),
    st.builds(Protect, id=frame_ids),
    st.builds(Unprotect, id=frame_ids),
    st.builds(
        Envelope,
        id=frame_ids,
        kind=st.none() | st.sampled_from(["working", "episodic", "semantic", "procedural", "meta"]),
        tenant=st.none() | labels,
        project=st.none() | labels,
        valid_from=st.none()
        | st.floats(-1e11, 1e11, allow_nan=False, allow_infinity=False)
        | st.integers(0, 10**10).map(float),
        valid_to=st.none(),
        keys=st.none() | st.lists(labels, max_size=3).map(tuple),
        risk=st.none() | st.sampled_from(["low", "medium", "high"]),
        trust=st.none()
        | st.sampled_from(["candidate", "accepted", "rejected", "retired", "quarantined"]),
        reviewed_by=st.none() | texts.filter(lambda s: 1 <= len(s) <= 200),
    ),
)

transactions: st.SearchStrategy[ContextTx] = st.builds(
    ContextTx,
    base_version=st.one_of(st.integers(0, 100), st.integers(0, (1 << 63) - 1)),
    reason=st.none() | texts,
    client_id=st.none() | texts.filter(lambda s: 1 <= len(s) <= 200),
    ops=st.lists(ops, min_size=1, max_size=5).map(tuple),
)


def typed(form: Any) -> Any:
    """*form* with every leaf tagged by its type, so that ``Symbol("a") != "a"`` shows."""
    if isinstance(form, (tuple, list)):
        return (type(form).__name__, tuple(typed(x) for x in form))
    return (type(form).__name__, form)


def strict_key(tx: ContextTx) -> Any:
    """A value equal for two transactions only if they agree on every type as well."""
    ops = []
    for op in tx.ops:
        fields = {}
        for name, value in op:
            if name == "body":
                fields[name] = typed(value)
            elif isinstance(value, tuple):
                fields[name] = tuple((type(v).__name__, v) for v in value)
            else:
                fields[name] = (type(value).__name__, value)
        ops.append((type(op).__name__, fields))
    return (
        tx.base_version,
        (type(tx.reason).__name__, tx.reason),
        (type(tx.client_id).__name__, tx.client_id),
        ops,
    )
