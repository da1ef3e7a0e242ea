"""The S-expression language: the seeds parse, errors carry positions, print/parse round-trips."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.errors import ParseError
from protocol.forms import MAX_DEPTH, Symbol, check_form
from protocol.sexpr import MAX_TEXT_BYTES, print_form, read_forms
from protocol.tx import ContextTx, Derive, Protect, Relate, Restore, Retire, Revise, Unrelate
from protocol.txlang import parse_tx, print_tx
from tests.protocol.strategies import forms, nested, strict_key, transactions, typed
from tests.seed_texts import CONSOLIDATE_TX, RELEASE_TX

S = Symbol


DEPLOY_TX = """(context-tx
  (base-version 17)
  (reason "current production configuration confirms cn-shanghai")
  (derive deployment/target-v2 (from @e42 deployment/target-v1) (fact (region cn-shanghai)))
  (relate deployment/target-v2 supersedes deployment/target-v1)
  (retire deployment/target-v1)
  (retire @e42))"""

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


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


def test_body_that_starts_with_a_from_list_survives_printing() -> None:
    tx = ContextTx(
        base_version=1,
        ops=(Derive(id="a", body=((S("from"), S("b")), S("x"))),),
    )
    assert "(derive a (from) (from b) x)" in print_tx(tx)
    _roundtrips(tx)


def test_empty_from_means_no_sources() -> None:
    (op,) = parse_tx("(context-tx (base-version 1) (revise a (from) (k v)))").ops
    assert isinstance(op, Revise)
    assert op.sources == ()
    assert typed(op.body) == typed(((S("k"), S("v")),))


def test_only_the_first_form_after_the_id_can_be_sources() -> None:
    (op,) = parse_tx("(context-tx (base-version 1) (derive a (x) (from b)))").ops
    assert isinstance(op, Derive)
    assert op.sources == ()
    assert typed(op.body) == typed(((S("x"),), (S("from"), S("b"))))


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


def _only_parse_errors(text: str) -> None:
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


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=60), syntaxish))
def test_random_text_only_raises_parse_error(text: str) -> None:
    _only_parse_errors(text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(transactions, st.data())
def test_mutated_transactions_only_raise_parse_error(tx: ContextTx, data: st.DataObject) -> None:
    text = print_tx(tx)
    cut = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(cut, min(len(text), cut + 5)))
    insert = data.draw(st.one_of(st.just(""), st.sampled_from(_TOKENS), st.text(max_size=3)))
    _only_parse_errors(text[:cut])
    _only_parse_errors(text[:cut] + insert + text[end:])
