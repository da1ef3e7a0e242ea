"""Identifier parts and lone ideographs in lexical search, over real LMDB files."""

from __future__ import annotations

from pathlib import Path

from storage.search.morphology import PART_MARK, morphology, part_term
from storage.search.text import identifier_parts, index_terms, query_plan, terms
from tests.storage.contexts import setup_fixture
from tests.storage.test_stemming import Ctx

ENGLISH = morphology(("english",))


c = setup_fixture(Ctx, "c")


def test_parts_of_identifiers() -> None:
    assert identifier_parts("meal_preference") == ["meal", "preference"]
    assert identifier_parts("order.status") == ["order", "status"]
    assert identifier_parts("a__b::c") == ["a", "b", "c"]
    assert identifier_parts("plain") == []
    assert identifier_parts("___") == []
    assert identifier_parts("_private") == ["private"]


def test_parts_are_extra_terms_that_do_not_count_in_length() -> None:
    text = '{"meal_preference": "vegan", "status": "partially_cancelled"}'
    words, extra = index_terms(text, ENGLISH)
    assert words == terms(text)  # the document's length is unchanged
    assert part_term("meal") in extra and part_term("cancelled") in extra
    assert "\x01english:cancel" in extra  # parts are stemmed
    assert "meal" not in extra and "meal" not in words
    words, extra = index_terms("meal_preference", None)
    assert words == ["meal_preference"] and extra == [part_term("meal"), part_term("preference")]


def test_a_word_finds_the_identifiers_that_hold_it(c: Ctx) -> None:
    tool, other = c.add('{"meal_preference": "vegetarian", "seat_type": "aisle"}', "lunch order")
    assert c.ids("meal") == [tool]
    assert c.ids("seating") == [tool]  # the stem as a word finds the part
    assert c.ids("preferences") == [tool]  # through the part's stem
    assert c.ids("dinner") == []


def test_an_exact_identifier_outranks_its_parts(c: Ctx) -> None:
    prose, ident = c.add("meal preference noted today", "meal_preference noted today")
    assert c.ids("meal_preference") == [ident]
    # The word itself ranks above the same word inside an identifier.
    assert c.ids("meal") == [prose, ident]
    assert c.ids("meal preference") == [prose, ident]


def test_stem_of_a_query_word_finds_a_stemmed_part(c: Ctx) -> None:
    (tool,) = c.add('{"status": "partially_cancelled", "order.status": "open"}')
    assert c.ids("cancel") == [tool]
    assert c.ids("cancelled") == [tool]
    assert c.ids("cancels") == [tool]
    assert c.ids("status") == [tool]


def test_parts_are_indexed_without_stemming(tmp_path: Path) -> None:
    c = Ctx(tmp_path, ())
    try:
        (tool,) = c.add('{"refund_amount": 37}')
        assert c.ids("refund") == [tool]
        assert c.ids("refunded") == []  # no stems without languages
    finally:
        c.close()


def test_part_terms_cannot_be_typed(c: Ctx) -> None:
    c.add("meal_preference")
    assert c.ids(PART_MARK + "meal") == c.ids("meal")  # the mark is not a word character
    for query in ("_", "__", "._.", ":::", "_ . :"):
        assert c.ids(query) == []


def test_lone_ideographs_are_low_weight_lookups(c: Ctx) -> None:
    hit, other = c.add("衬衫退 59 美元；跑鞋退 116 美元", "乘客明天出发")
    question = "运动鞋最后退了多少钱？"
    _, extra = query_plan(question, None)
    assert [(s, q.term) for s, q in extra if q.kind == "char"] == [
        ("鞋", "鞋"),
        ("退", "退"),
        ("了", "了"),
    ]
    # No bigram of the question is in the documents; its lone characters are. (Its
    # neighbour, which holds none, is lent evidence as the next turn: left out here.)
    assert c.ids(question, neighbours=False) == [hit]
    assert c.ids(question) == [hit, other]
    # A document with the question's bigram outranks one with only its characters.
    both = c.add("运动鞋已经退货")[0]
    assert c.ids(question)[0] == both


def test_a_query_of_one_ideograph_is_an_exact_term(c: Ctx) -> None:
    (hit,) = c.add("跑鞋 退 116 美元")
    exact, extra = query_plan("退", None)
    assert exact == ["退"] and not [q for _, q in extra if q.kind == "char"]
    assert c.ids("退") == [hit]
