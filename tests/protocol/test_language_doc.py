"""docs/language.md stays true: every ```lisp example parses and prints back to itself,
and every parse error it shows is the one the parser gives."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from protocol.errors import ParseError
from protocol.receipts import ERROR_CODES
from protocol.txlang import parse_tx, print_tx

DOC = Path(__file__).resolve().parents[2] / "docs" / "language.md"
TEXT = DOC.read_text(encoding="utf-8")
EXAMPLES = re.findall(r"^```lisp\n(.*?)^```$", TEXT, re.M | re.S)
# The rows of the parse-error table: | `text` | `message` |
PARSE_ERRORS = re.findall(r"^\| `(\(context-tx.*?)` \| `(.*?)` \|$", TEXT, re.M)


def test_the_reference_has_examples() -> None:
    assert len(EXAMPLES) >= 5
    assert len(PARSE_ERRORS) >= 5


@pytest.mark.parametrize("text", EXAMPLES, ids=[f"example{i}" for i in range(len(EXAMPLES))])
def test_every_example_parses_and_round_trips(text: str) -> None:
    tx = parse_tx(text)
    assert parse_tx(print_tx(tx)) == tx


@pytest.mark.parametrize(("text", "message"), PARSE_ERRORS)
def test_every_parse_error_shown_is_the_parsers(text: str, message: str) -> None:
    with pytest.raises(ParseError) as caught:
        parse_tx(text.replace("\\\\", "\\"))
    assert message.split("…")[0] in caught.value.message


def test_every_receipt_error_code_is_documented() -> None:
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", TEXT, re.M))
    engine = "".join(
        path.read_text(encoding="utf-8")
        for path in sorted((DOC.parents[1] / "protocol" / "engine").glob("*.py"))
    )
    raised = set(re.findall(r'\bOpFailure\(\s*"([a-z_]+)"', engine))
    raised |= set(re.findall(r'OpError\([^)]*?code="([a-z_]+)"', engine, re.S))
    assert {"conflict", "unknown_ref", "not_permitted"} <= raised
    assert set(ERROR_CODES) | raised <= documented
