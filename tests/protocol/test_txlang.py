"""The S-expression language: the seeds parse, errors carry positions, print/parse round-trips."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.errors import ParseError
from protocol.forms import MAX_DEPTH, Symbol, check_form
from protocol.ids import is_event_ref, is_ref
from protocol.sexpr import MAX_TEXT_BYTES, print_form, read_forms, read_located, read_plain
from protocol.tx import (
    OP_NAMES,
    ContextTx,
    Derive,
    Protect,
    Relate,
    Restore,
    Retire,
    Revise,
    Unrelate,
    misplaced_form,
)
from protocol.txlang import _TxReader, parse_tx, print_tx
from tests.examples import examples
from tests.protocol.strategies import (
    event_refs,
    forms,
    nested,
    refs,
    strict_key,
    transactions,
    typed,
)
from tests.seed_texts import CONSOLIDATE_TX, RELEASE_TX

S = Symbol


DEPLOY_TX = """(context-tx
  (base-version 17)
  (reason "current production configuration confirms cn-shanghai")
  (derive deployment/target-v2 (from @e42 deployment/target-v1) (fact (region cn-shanghai)))
  (relate deployment/target-v2 supersedes deployment/target-v1)
  (retire deployment/target-v1)
  (retire @e42))"""

FAST = settings(
    max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def _roundtrips(tx: ContextTx) -> None:
    again = parse_tx(print_tx(tx))
    assert again == tx
    assert strict_key(again) == strict_key(tx)


# --- the seeds ----------------------------------------------------------------


def test_release_seed_parses_field_by_field() -> None:
    tx = parse_tx(RELEASE_TX)
    assert tx.base_version == 12
    assert tx.reason == "Incorporate the test result and prepare the release"
    assert tx.client_id is None
    derive, revise, relate, retire = tx.ops
    assert isinstance(derive, Derive)
    assert derive.id == "test-result"
    assert derive.sources == ("@e42",)
    assert typed(derive.body) == typed(((S("tests"), S("passed")),))
    assert isinstance(revise, Revise)
    assert revise.id == "release"
    assert revise.sources == ()
    assert typed(revise.body) == typed(((S("goal"), S("ship-v1")), (S("stage"), S("packaging"))))
    assert isinstance(relate, Relate) and not isinstance(relate, Unrelate)
    assert (relate.subject, relate.label, relate.object) == ("test-result", "supports", "release")
    assert isinstance(retire, Retire)
    assert retire.refs == ("@e42",)


def test_release_seed_prints_back_exactly() -> None:
    assert print_tx(parse_tx(RELEASE_TX)) == RELEASE_TX


def test_consolidation_seed_parses_field_by_field() -> None:
    tx = parse_tx(CONSOLIDATE_TX)
    assert tx.base_version == 42
    assert tx.reason == "Consolidate two release experiences into a reusable procedure"
    derive, rel_a, rel_b, retire = tx.ops
    assert isinstance(derive, Derive)
    assert derive.id == "release-procedure"
    assert derive.sources == ("release-case-a", "release-case-b")
    assert typed(derive.body) == typed(
        (
            (S("steps"), "After tests pass, build, verify this run's artifacts, then package."),
            (
                S("single-package"),
                (S("test"), "npm test"),
                (S("build"), "npm run build"),
                (S("artifact"), "dist/"),
            ),
            (
                S("workspace"),
                (S("test"), "pnpm --filter web test"),
                (S("build"), "pnpm --filter web build"),
                (S("artifact"), "apps/web/dist/"),
            ),
            (
                S("applicability"),
                "Check the current project layout and scripts before choosing a branch.",
            ),
        )
    )
    assert isinstance(rel_a, Relate) and isinstance(rel_b, Relate)
    assert [(r.subject, r.label, r.object) for r in (rel_a, rel_b)] == [
        ("release-procedure", "supersedes", "release-case-a"),
        ("release-procedure", "supersedes", "release-case-b"),
    ]
    assert isinstance(retire, Retire)
    assert retire.refs == ("release-case-a", "release-case-b")
    _roundtrips(tx)


def test_deployment_seed_parses_field_by_field() -> None:
    tx = parse_tx(DEPLOY_TX)
    assert tx.base_version == 17
    assert tx.reason == "current production configuration confirms cn-shanghai"
    derive, relate, retire_frame, retire_event = tx.ops
    assert isinstance(derive, Derive)
    assert derive.id == "deployment/target-v2"
    assert derive.sources == ("@e42", "deployment/target-v1")
    assert typed(derive.body) == typed(((S("fact"), (S("region"), S("cn-shanghai"))),))
    assert isinstance(relate, Relate)
    assert (relate.subject, relate.label, relate.object) == (
        "deployment/target-v2",
        "supersedes",
        "deployment/target-v1",
    )
    assert isinstance(retire_frame, Retire) and retire_frame.refs == ("deployment/target-v1",)
    assert isinstance(retire_event, Retire) and retire_event.refs == ("@e42",)
    assert print_tx(tx) == DEPLOY_TX


# --- the language -------------------------------------------------------------


def test_chinese_atoms_and_strings() -> None:
    tx = parse_tx('(context-tx (base-version 0) (derive 部署/目标 (from @e1) (地区 "上海")))')
    (derive,) = tx.ops
    assert isinstance(derive, Derive)
    assert derive.id == "部署/目标"
    assert derive.sources == ("@e1",)
    assert typed(derive.body) == typed(((S("地区"), "上海"),))
    assert '(derive 部署/目标 (from @e1) (地区 "上海")))' in print_tx(tx)
    _roundtrips(tx)


def test_atoms_ints_and_strings_are_told_apart() -> None:
    got = read_forms('a "a" 42 -3 0 -0 007 1.5 +1 @e42 cn-shanghai 上海 "4"')
    assert typed(tuple(got)) == typed(
        (S("a"), "a", 42, -3, 0, 0, S("007"), S("1.5"), S("+1"), S("@e42"), S("cn-shanghai"))
        + (S("上海"), "4")
    )


def test_string_escapes() -> None:
    (got,) = read_forms(r'"q\" b\\ n\n t\t r\r u\u00e9\u001B"')
    assert got == 'q" b\\ n\n t\t r\r u\u00e9\x1b'
    assert print_form(got) == r'"q\" b\\ n\n t\t r\r u' + "\u00e9" + r'\u001b"'
    assert read_forms('"raw\nnewline\tand tab"') == ["raw\nnewline\tand tab"]


def test_comments_and_blank_space() -> None:
    text = "; leading\n(a ; inside\n b)\u3000; ideographic space before\n\r\n"
    assert typed(read_forms(text)) == typed([(S("a"), S("b"))])
    assert read_forms("") == []
    assert read_forms("  ; only a comment") == []


def test_clauses_in_any_order_before_operations() -> None:
    tx = parse_tx(
        '(context-tx (reason "r") (client-id abc-1) (base-version 3) (protect a) (restore @e7))'
    )
    assert (tx.base_version, tx.reason, tx.client_id) == (3, "r", "abc-1")
    assert type(tx.client_id) is str
    assert tx.ops == (Protect(id="a"), Restore(ref="@e7"))
    printed = print_tx(tx)
    assert printed.splitlines()[:4] == [
        "(context-tx",
        "  (base-version 3)",
        '  (client-id "abc-1")',
        '  (reason "r")',
    ]
    _roundtrips(tx)


def test_a_body_cannot_start_with_a_from_list() -> None:
    # It would print as the sources clause: the model refuses it, as the text does.
    with pytest.raises(ValueError, match="right after the frame id"):
        Derive(id="a", body=((S("from"), S("b")), S("x")))


def test_empty_from_means_no_sources() -> None:
    (op,) = parse_tx("(context-tx (base-version 1) (revise a (from) (k v)))").ops
    assert isinstance(op, Revise)
    assert op.sources == ()
    assert typed(op.body) == typed(((S("k"), S("v")),))
    assert "(revise a (k v))" in print_tx(ContextTx(base_version=1, ops=(op,)))


def test_only_the_first_form_after_the_id_can_be_sources() -> None:
    with pytest.raises(ParseError) as info:
        parse_tx("(context-tx (base-version 1) (derive a (x) (from b)))")
    assert str(info.value) == (
        "1:44: (from …) must come right after the frame id: (derive a (from b) BODY…)"
    )


def test_depth_limits() -> None:
    deepest = nested(MAX_DEPTH - 1, S("x"))  # the atom sits at body depth MAX_DEPTH
    tx = ContextTx(base_version=0, ops=(Derive(id="a", body=(deepest,)),))
    _roundtrips(tx)
    with pytest.raises(ParseError, match="deeper"):
        parse_tx(print_tx(tx).replace("x", "(x)"))
    check_form(nested(MAX_DEPTH, 1))
    assert read_forms(print_form(nested(MAX_DEPTH, 1))) == [nested(MAX_DEPTH, 1)]
    with pytest.raises(ParseError, match="deeper") as info:
        read_forms("(" * (MAX_DEPTH + 1) + "1" + ")" * (MAX_DEPTH + 1))
    assert (info.value.line, info.value.column) == (1, MAX_DEPTH + 2)
    with pytest.raises(ValueError):
        print_form(nested(MAX_DEPTH, (1,)))


def test_size_limits() -> None:
    with pytest.raises(ParseError, match="longer than 4096"):
        read_forms("x" * 4097)
    assert read_forms("x" * 4096) == [S("x" * 4096)]
    with pytest.raises(ParseError, match="larger than"):
        read_forms(" " * (MAX_TEXT_BYTES + 1))
    with pytest.raises(ParseError, match="larger than"):
        read_forms("上" * (MAX_TEXT_BYTES // 3 + 1))
    big = 10**40
    assert read_forms(f"{big - 1} {1 - big}") == [big - 1, 1 - big]
    assert typed(read_forms(f"{big} -{big}")) == typed([S(str(big)), S(f"-{big}")])


def test_print_form_refuses_what_cannot_read_back() -> None:
    for bad in (S("a b"), S("42"), S(""), S("a\u200bb"), "\ud800"):
        with pytest.raises(ValueError):
            print_form(bad)
    for wrong in (True, 1.5, [1], None):
        with pytest.raises(TypeError):
            print_form(wrong)
    with pytest.raises(ValueError):
        print_form(10**40)


# --- error positions ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line", "column", "words"),
    [
        ("(context-tx (base-version 1) (derive a)", 1, 1, "never closed"),
        ("(context-tx\n  (base-version 1)\n  (derive a (k v)\n", 3, 3, "never closed"),
        ("(a))", 1, 4, "unexpected ')'"),
        ('(context-tx\n  (reason "abc)\n', 2, 11, "unterminated string"),
        ('(a "x\\qy")', 1, 6, "invalid escape"),
        ('(a "\\u12")', 1, 5, "four hex digits"),
        ('(a "\\ud800")', 1, 5, "surrogate"),
        ('(a "x\x01")', 1, 6, "control character"),
        ("(a b\\c)", 1, 5, "'\\'"),
        ("(a b\u200bc)", 1, 5, "U+200B"),
        ("(context-tx (base-version 1) (derive 9bad (k v)))", 1, 30, "derive: not a frame id"),
        ("(context-tx\n  (base-version 1)\n  (relate a 5 b))", 3, 13, "label must be an atom"),
        ('(context-tx (base-version 1) (derive "a"))', 1, 38, "frame id must be an atom"),
        ("(context-tx (base-version 1) (derive a (from b 7)))", 1, 48, "source must be an atom"),
        ("(context-tx (base-version 1) (retire a (b)))", 1, 40, "reference must be an atom"),
        ("(context-tx (base-version 1) (relate a b))", 1, 30, "three atoms"),
        ("(context-tx (base-version 1) (retire))", 1, 30, "at least one reference"),
        ("(context-tx (base-version 1) (restore a b))", 1, 30, "exactly one"),
        ("(context-tx (base-version 1) (protect @e1))", 1, 30, "protect: not a frame id"),
        ("(context-tx (base-version 1) (relate a " + "l" * 129 + " b))", 1, 30, "label"),
        ("(context-tx (base-version 1) (frobnicate a))", 1, 30, "derive, revise"),
        ('(context-tx (base-version 1) (derive a) (reason "r"))', 1, 41, "before the first"),
        ("(context-tx (base-version 1) (base-version 2) (protect a))", 1, 30, "more than once"),
        ("(context-tx (base-version -1) (protect a))", 1, 13, "non-negative"),
        ("(context-tx (base-version 9223372036854775808) (protect a))", 1, 13, "base-version"),
        ('(context-tx (reason "r") (protect a))', 1, 1, "missing (base-version"),
        ("(context-tx (base-version 1))", 1, 1, "at least one operation"),
        ("(context-tx (base-version 1) (protect a))\n(x)", 2, 1, "after the"),
        ("(context-tx (base-version 1) (reason r) (protect a))", 1, 30, "reason takes"),
        ("(context-tx (base-version 1) x)", 1, 30, "atom x"),
        ("(context-tx (base-version 1) ((x)))", 1, 30, "starts with its name"),
        ("(tx (base-version 1))", 1, 1, "expected (context-tx"),
        ("  \n ; nothing\n", 3, 1, "no form"),
    ],
)
def test_error_positions(text: str, line: int, column: int, words: str | None) -> None:
    with pytest.raises(ParseError) as info:
        parse_tx(text)
    err = info.value
    assert (err.line, err.column) == (line, column), str(err)
    assert str(err).startswith(f"{line}:{column}: ")
    if words is not None:
        assert words in str(err)
    assert err.to_dict()["line"] == line


def test_validation_error_message_is_short_and_positioned() -> None:
    with pytest.raises(ParseError) as info:
        parse_tx('(context-tx (base-version 1) (reason "x") (derive 9bad))')
    assert str(info.value) == "1:43: derive: not a frame id: '9bad'"


def test_too_many_operations() -> None:
    text = "(context-tx (base-version 1)\n" + " (protect a)" * 1025 + ")"
    with pytest.raises(ParseError, match="more than 1024 operations") as info:
        parse_tx(text)
    assert (info.value.line, info.value.column) == (2, 1024 * 12 + 2)


def test_deep_nesting_is_a_parse_error() -> None:
    for text in ("(" * 10_000, "(" * 10_000 + ")" * 10_000, ")" * 10_000):
        with pytest.raises(ParseError):
            parse_tx(text)
        with pytest.raises(ParseError):
            read_forms(text)


def test_non_text_input() -> None:
    with pytest.raises(ParseError):
        parse_tx(b"(context-tx)")  # type: ignore[arg-type]


# --- reserved forms: a misplaced clause is an error, never body text --------------

_MISPLACED = [
    # the two cases: provenance after the body
    (
        "(context-tx (base-version 1) (derive b (x 1) (from @e1)))",
        1,
        46,
        "(from …) must come right after the frame id: (derive b (from @e1) BODY…)",
    ),
    (
        "(context-tx (base-version 1) (derive Foo Bar (from @e3)))",
        1,
        46,
        "(from …) must come right after the frame id: (derive Foo (from @e3) BODY…)",
    ),
    (
        "(context-tx\n  (base-version 1)\n  (revise release (stage packaging)\n"
        "    (from @e7 test-result)))",
        4,
        5,
        "(revise release (from @e7 test-result) BODY…)",
    ),
    # deeper in the body: from is reserved at any depth
    (
        "(context-tx (base-version 1) (derive b (from @e1) (x (y (from @e2)))))",
        1,
        57,
        'the head from is reserved at any depth in a body: to keep the word, write it as a string, ("from" …)',
    ),
    # twice: the second one would be body text
    (
        "(context-tx (base-version 1) (derive b (from @e1) (x) (from @e2)))",
        1,
        55,
        "(from …) appears twice in (derive b …): list every source in the one (from …) "
        "right after the frame id: (derive b (from @e1 @e2) BODY…)",
    ),
    (
        "(context-tx (base-version 1) (derive b (from) (from @e2)))",
        1,
        47,
        "appears twice",
    ),
    # before the frame id, or a body where the id goes
    (
        "(context-tx (base-version 1) (derive (from @e2) b (x)))",
        1,
        38,
        "derive: (from …) comes after the frame id: (derive ID (from @e2) BODY…)",
    ),
    (
        "(context-tx (base-version 1) (derive (x 1) (from @e2)))",
        1,
        38,
        "derive: the frame id must be an atom, got a list: (derive ID (from REF…) BODY…)",
    ),
    (
        "(context-tx (base-version 1) (revise 42 (x)))",
        1,
        38,
        "revise: the frame id must be an atom, got integer 42",
    ),
    # an event reference where a frame id goes
    ("(context-tx (base-version 1) (derive @e1 (x 1)))", 1, 30, "'@e1' is an event"),
    ("(context-tx (base-version 1) (relate @e1 supports a))", 1, 30, "'@e1' is an event"),
    ("(context-tx (base-version 1) (relate a supports @e1))", 1, 30, "cited in (from @e1)"),
    ("(context-tx (base-version 1) (protect @e4))", 1, 30, "retired with (retire @e4)"),
    ("(context-tx (base-version 1) (envelope @e4 (risk low)))", 1, 30, "'@e4' is an event"),
    (
        "(context-tx (base-version 1) (revise ev:0123456789abcdef0123 (x)))",
        1,
        30,
        "is an event",
    ),
    # the sources without their (from …), or misspelt
    (
        "(context-tx (base-version 1) (derive b @e2 (x)))",
        1,
        40,
        "@e2 right after the frame id is a source: write it in (from …): "
        "(derive b (from @e2) BODY…)",
    ),
    (
        "(context-tx (base-version 1) (derive b (form @e2 a) (x)))",
        1,
        40,
        "(form …) looks like a misspelt (from …)",
    ),
    ("(context-tx (base-version 1) (derive b (FROM @e2)))", 1, 40, "misspelt (from …)"),
    ("(context-tx (base-version 1) (derive b (x) (frm @e2)))", 1, 44, "misspelt"),
    # an operation or a clause inside a body: a parenthesis closed too late
    (
        "(context-tx (base-version 1)\n  (derive a (from @e1) (x 1)\n  (retire @e1)))",
        3,
        3,
        "(retire …) is inside the body of (derive a …): close that operation before it",
    ),
    (
        "(context-tx (base-version 1) (revise a (x) (relate a uses b)))",
        1,
        44,
        "(relate …) is inside the body of (revise a …)",
    ),
    ("(context-tx (base-version 1) (derive a (x) (base-version 2)))", 1, 44, "clause of the"),
    ("(context-tx (base-version 1) (derive a (client-id c)))", 1, 40, "clause of the"),
    ("(context-tx (base-version 1) (derive a (context-tx)))", 1, 40, "one transaction"),
    # an empty revise would erase the body
    (
        "(context-tx (base-version 1) (revise release (from @e9)))",
        1,
        30,
        "revise replaces the whole body, and this one is empty",
    ),
    ("(context-tx (base-version 1) (revise release))", 1, 30, "restate the body"),
    # an envelope has fields, not sources
    ("(context-tx (base-version 1) (envelope a (from @e1)))", 1, 42, "unknown field 'from'"),
    # sources are atoms
    ('(context-tx (base-version 1) (derive a (from "@e1")))', 1, 46, "source must be an atom"),
    ("(context-tx (base-version 1) (derive a (from (@e1))))", 1, 46, "source must be an atom"),
]


@pytest.mark.parametrize(("text", "line", "column", "words"), _MISPLACED)
def test_a_misplaced_form_is_a_positioned_error(
    text: str, line: int, column: int, words: str
) -> None:
    with pytest.raises(ParseError) as info:
        parse_tx(text)
    err = info.value
    assert (err.line, err.column) == (line, column), str(err)
    assert words in err.message


@pytest.mark.parametrize(
    "text",
    [
        # a string head is content: the escape for the word itself
        '(context-tx (base-version 1) (derive trip (route ("from" Paris) (to Berlin))))',
        # operation and clause names deeper than the body's own forms are content
        "(context-tx (base-version 1) (derive plan (steps (retire old) (derive new))))",
        '(context-tx (base-version 1) (derive d (choice pg) (reason "faster")))',
        # an event reference that does not open the body
        "(context-tx (base-version 1) (derive n (from @e1) (seen @e1) @e2))",
        # a misspelling without an event reference is just a word
        "(context-tx (base-version 1) (derive n (form release) (fro x)))",
        # an empty body is a marker frame for derive
        "(context-tx (base-version 1) (derive marker))",
    ],
)
def test_legitimate_bodies_still_parse_and_round_trip(text: str) -> None:
    tx = parse_tx(text)
    _roundtrips(tx)


def test_the_model_refuses_what_the_text_refuses() -> None:
    # The rule lives in the model, so every port (text, JSON, msgpack, Python) obeys it.
    for build, words in (
        (lambda: Derive(id="a", body=((S("x"),), (S("from"), S("@e1")))), "right after"),
        (lambda: Derive(id="a", sources=("@e1",), body=((S("from"), S("@e2")),)), "twice"),
        (lambda: Revise(id="a", sources=("@e1",)), "this one is empty"),
        (lambda: Revise(id="a", body=((S("retire"), S("@e1")),)), "(retire …) is inside"),
        (lambda: Derive(id="@e1"), "is an event"),
    ):
        with pytest.raises(ValueError, match=re.escape(words)):
            build()


def test_every_operation_name_is_reserved_directly_in_a_body() -> None:
    for name in OP_NAMES:
        text = f"(context-tx (base-version 1) (derive a (k v) ({name} x)))"
        with pytest.raises(ParseError, match=rf"\({name} …\)") as info:
            parse_tx(text)
        assert info.value.column == text.index(f"({name} x)") + 1
        parse_tx(f"(context-tx (base-version 1) (derive a (k ({name} x))))")


def test_the_reference_shows_the_whole_message() -> None:
    # docs/language.md's parse-error table, read strictly: every piece between
    # the elisions appears, in order, in the parser's message.
    doc = Path(__file__).resolve().parents[2] / "docs" / "language.md"
    rows = re.findall(r"^\| `(\(context-tx.*?)` \| `(.*?)` \|$", doc.read_text("utf-8"), re.M)
    assert len(rows) >= 15
    for text, shown in rows:
        with pytest.raises(ParseError) as info:
            parse_tx(text.replace("\\\\", "\\"))
        at = 0
        for piece in shown.split("…"):
            found = info.value.message.find(piece, at)
            assert found >= 0, (text, piece, info.value.message)
            at = found + len(piece)


def _wrap(inner: Any, levels: list[tuple[list[Any], list[Any]]]) -> Any:
    for before, after in levels:
        inner = (S("note"), *before, inner, *after)
    return inner


def _clean(form: Any) -> bool:
    """Content both nested in a form and directly in a body (where a list headed by an
    operation name is reserved too)."""
    return all(
        misplaced_form("derive", "a", body, has_sources=False) is None
        for body in (((S("note"), form),), ((S("k"), S("v")), form))
    )


_clean_forms = forms(8).filter(_clean)
_ref_atoms = refs.map(S)


@FAST
@given(
    st.lists(_clean_forms, max_size=2),
    # at most 8 wrapping levels: with forms 8 deep they stay inside MAX_DEPTH (32)
    st.lists(
        st.tuples(st.lists(_clean_forms, max_size=2), st.lists(_clean_forms, max_size=2)),
        max_size=8,
    ),
    st.lists(_ref_atoms, max_size=3),
    st.lists(_clean_forms, max_size=2),
)
def test_a_from_form_at_any_depth_is_rejected_where_it_stands(
    before: list[Any], levels: list[Any], sources: list[Any], after: list[Any]
) -> None:
    body = ((S("k"), S("v")), *before, _wrap((S("from"), *sources), levels), *after)
    text = "(context-tx (base-version 1) (derive a " + " ".join(map(print_form, body)) + "))"
    with pytest.raises(ParseError) as info:
        parse_tx(text)
    err = info.value
    lines = text.split("\n")
    offset = sum(len(line) + 1 for line in lines[: err.line - 1]) + err.column - 1
    assert text[offset:].startswith("(from"), str(err)
    assert "(from …)" in err.message
    with pytest.raises(ValueError):
        Derive(id="a", body=body)


_heads = st.sampled_from(
    [S("from"), S("form"), S("FROM"), S("retire"), S("derive"), S("base-version"), "from"]
    + [S("note"), S("reason"), S("steps")]
)
_headed = st.builds(
    lambda head, rest: (head, *rest), _heads, st.lists(st.one_of(_ref_atoms, forms(4)), max_size=3)
)
_rich_forms = st.recursive(
    st.one_of(_headed, forms(4), event_refs.map(S)),
    lambda children: st.builds(
        lambda head, rest: (head, *rest), _heads, st.lists(children, max_size=3)
    ),
    max_leaves=10,
)


def _edits(a: str, b: str) -> int:
    """Optimal-string-alignment distance, written plainly as the oracle."""
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(
                d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])
            )
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[len(a)][len(b)]


def _sym(x: Any) -> bool:
    return isinstance(x, Symbol)


def _reserved_anywhere(form: Any) -> bool:
    if not isinstance(form, tuple):
        return False
    if form and _sym(form[0]):
        head, items = str(form[0]), form[1:]
        if head == "from":
            return True
        if (
            items
            and _edits(head.lower(), "from") <= 1
            and all(_sym(r) and is_ref(r) for r in items)
            and any(is_event_ref(r) for r in items)
        ):
            return True
    return any(_reserved_anywhere(x) for x in form)


_BODY_HEADS = {*OP_NAMES, "context-tx", "base-version", "client-id"}


def _naive_reserved(body: tuple[Any, ...]) -> bool:
    """The rule of docs/language.md ("Reserved forms"), without the parser's shortcuts."""
    if body and _sym(body[0]) and is_event_ref(body[0]):
        return True
    for form in body:
        if isinstance(form, tuple) and form and _sym(form[0]) and form[0] in _BODY_HEADS:
            return True
        if _reserved_anywhere(form):
            return True
    return False


@FAST
@given(st.lists(_rich_forms, max_size=4).map(tuple))
def test_the_parser_accepts_exactly_the_bodies_the_model_accepts(body: tuple[Any, ...]) -> None:
    text = "(context-tx (base-version 1) (derive a (from) " + " ".join(map(print_form, body)) + "))"
    assert (misplaced_form("derive", "a", body, has_sources=True) is None) == (
        not _naive_reserved(body)
    )
    if not _naive_reserved(body):
        (op,) = parse_tx(text).ops
        assert isinstance(op, Derive)
        assert typed(op.body) == typed(body)
        assert Derive(id="a", body=body) == op
        _roundtrips(ContextTx(base_version=1, ops=(op,)))
    else:
        with pytest.raises(ParseError):
            parse_tx(text)
        with pytest.raises(ValueError):
            Derive(id="a", body=body)


# --- properties -----------------------------------------------------------------


@FAST
@given(transactions)
def test_print_then_parse_is_identity(tx: ContextTx) -> None:
    _roundtrips(tx)


@FAST
@given(forms(20))
def test_read_of_print_is_identity(form: Any) -> None:
    check_form(form)
    got = read_forms(print_form(form))
    assert typed(got) == typed([form])


_TOKENS = [
    "(",
    ")",
    '"',
    "\\",
    ";",
    " ",
    "\n",
    "\t",
    "a",
    "@e1",
    "-",
    "0",
    "42",
    "上",
    "\\u00",
    "\\n",
    "\x00",
    "\u200b",
    "\ud800",
    "context-tx",
    "base-version",
    "reason",
    "client-id",
    "derive",
    "revise",
    "relate",
    "unrelate",
    "retire",
    "restore",
    "protect",
    "unprotect",
    "from",
    "9bad",
]

syntaxish = st.lists(st.sampled_from(_TOKENS), max_size=40).map("".join)


def _outcome(parse: Any, text: str) -> Any:
    try:
        return strict_key(parse(text))
    except ParseError as e:
        return (str(e), e.line, e.column)


def _only_parse_errors(text: str) -> None:
    # parse_tx reads the common shape without locations (read_plain): the outcome, an
    # error's message and place included, is the located reader's.
    assert _outcome(parse_tx, text) == _outcome(lambda t: _TxReader(t).parse(), text)
    plain = read_plain(text, MAX_DEPTH + 1)
    if plain is not None:
        located = read_located(text, MAX_DEPTH + 1, 0)[0]
        assert [typed(f) for f in plain] == [typed(f) for f in located]
    try:
        tx = parse_tx(text)
    except ParseError as e:
        assert e.line >= 1 and e.column >= 1
    else:
        assert parse_tx(print_tx(tx)) == tx
    try:
        got = read_forms(text)
    except ParseError as e:
        assert e.line >= 1 and e.column >= 1
    else:
        for form in got:
            check_form(form)


@settings(max_examples=examples(300), deadline=None)
@given(st.one_of(st.text(max_size=60), syntaxish))
def test_random_text_only_raises_parse_error(text: str) -> None:
    _only_parse_errors(text)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(transactions, st.data())
def test_mutated_transactions_only_raise_parse_error(tx: ContextTx, data: st.DataObject) -> None:
    text = print_tx(tx)
    cut = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(cut, min(len(text), cut + 5)))
    insert = data.draw(st.one_of(st.just(""), st.sampled_from(_TOKENS), st.text(max_size=3)))
    _only_parse_errors(text[:cut])
    _only_parse_errors(text[:cut] + insert + text[end:])


LEGACY_TEXTS = [
    "(context-tx (base-version 1) (derive b (x 1) (from @e1)))",
    "(context-tx (base-version 1) (derive Foo Bar (from @e3)))",
    "(context-tx (base-version 2) (revise b (from @e1)))",
]


@pytest.mark.parametrize("text", LEGACY_TEXTS)
def test_log_records_from_before_the_reserved_forms_still_read_back(text: str) -> None:
    """New input with a misplaced (from …) is refused; the same text in the commit log
    reads back exactly as it was committed then (the form kept as body content)."""
    with pytest.raises(ParseError):
        parse_tx(text)
    tx = parse_tx(text, legacy=True)
    op = tx.ops[0]
    assert isinstance(op, (Derive, Revise))
    if isinstance(op, Revise):  # an empty revise: sources only, as it was committed
        assert op.sources == ("@e1",) and op.body == ()
    else:  # the misplaced form stayed body content, as committed
        assert op.sources == () and op.body[-1][0] == Symbol("from")


def test_log_reader_uses_the_legacy_reading() -> None:
    from service.reads import logged_tx

    tx = logged_tx({"text": LEGACY_TEXTS[0]})
    op = tx.ops[0]
    assert isinstance(op, Derive)
    assert op.sources == () and op.body == ((Symbol("x"), 1), (Symbol("from"), "@e1"))
