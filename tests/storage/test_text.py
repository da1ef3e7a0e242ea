"""The text pipeline shared by indexing and querying: normalization, script runs, ICU words."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from storage.search.text import (
    MAX_ANALYZED_CHARS,
    MAX_TERM_CHARS,
    analyze,
    normalize,
    query_terms,
    terms,
)
from tests.examples import examples


def spans(text: str) -> list[tuple[str, str]]:
    return [(t.term, text[t.start : t.end]) for t in analyze(text)]


def test_chinese_words_and_bigrams() -> None:
    assert terms("部署地区") == ["部署", "地区", "署地"]
    assert spans("部署地区") == [("部署", "部署"), ("署地", "署地"), ("地区", "地区")]
    sentence = "生产配置确认部署地区为上海"
    found = terms(sentence)
    for word in ("生产", "配置", "确认", "部署", "地区", "上海"):
        assert word in found
    # A two-character word is not repeated by the bigram at the same place.
    assert found.count("部署") == 1


def test_single_character_words_are_terms() -> None:
    assert "为" in terms("部署地区为上海")
    assert "元" in terms("价格100元")


def test_mixed_chinese_and_english_split_at_script_changes() -> None:
    text = "部署cn-shanghai到上海"
    got = spans(text)
    assert [t for t, _ in got] == ["部署", "cn", "shanghai", "到", "到上", "上海"]
    assert all(term == original for term, original in got)
    assert terms("版本v2发布") == ["版本", "v2", "发布"]


def test_thai_is_segmented_by_the_dictionary() -> None:
    assert terms("ภาษาไทยง่ายนิดเดียว") == ["ภาษา", "ไทย", "ง่าย", "นิด", "เดียว"]
    # ICU alone keeps "abcภาษา" as one word; the script runs split it.
    assert terms("abcภาษาไทย") == ["abc", "ภาษา", "ไทย"]


def test_japanese() -> None:
    found = terms("東京に行きます。ソフトウェアのテスト")
    for word in ("東京", "行き", "ます", "ソフトウェア", "テスト"):
        assert word in found
    assert "。" not in found
    # Words the dictionary glues together are still found through their bigrams.
    assert "東京" in terms("東京タワー")


def test_korean() -> None:
    found = terms("서울에서 만나요")
    assert "서울에서" in found and "서울" in found


def test_nfkc_and_case_folding() -> None:
    assert terms("ＡＢＣ") == terms("abc") == terms("ABC") == ["abc"]
    assert terms("Straße") == ["strasse"]
    assert terms("ﬁle") == ["file"]
    assert terms("e\u0301cole") == terms("École") == ["école"]
    # Positions point into the original text, whatever normalization did.
    assert spans("ＡＢＣ Straße ﬁle") == [("abc", "ＡＢＣ"), ("strasse", "Straße"), ("file", "ﬁle")]
    assert spans("x e\u0301cole") == [("x", "x"), ("école", "e\u0301cole")]


def test_fullwidth_punctuation_in_chinese_keeps_positions() -> None:
    text = "部署完成，回归测试通过。"
    for term, original in spans(text):
        assert term == original


def test_emoji_are_dropped_and_offsets_survive_surrogates() -> None:
    text = "a😀b 😀 🚀launch 上海😀部署"
    assert spans(text) == [
        ("a", "a"),
        ("b", "b"),
        ("launch", "launch"),
        ("上海", "上海"),
        ("部署", "部署"),
    ]
    assert terms("😀🚀🎉") == []


def test_punctuation_and_space_are_not_terms() -> None:
    assert terms("") == []
    assert terms("   \n\t ") == []
    assert terms("!!! ... ---") == []
    assert terms("Hello, world! it's 3.14") == ["hello", "world", "it", "3.14"]


def test_a_possessive_is_the_word_it_belongs_to() -> None:
    # As FTS5 and Lucene's English analyzer: "Caroline's" is found by "Caroline".
    assert terms("What is Caroline's job? Melanie’s dog") == [
        "what",
        "is",
        "caroline",
        "job",
        "melanie",
        "dog",
    ]
    text = "Ask Caroline's sister"
    assert [(t.term, text[t.start : t.end]) for t in analyze(text)][1] == ("caroline", "Caroline")
    mixed = "李的 Caroline’s 东京"
    assert "caroline" in terms(mixed) and sorted(t.term for t in analyze(mixed)) == sorted(
        terms(mixed)
    )
    # Only a trailing 's after a letter goes: other apostrophes stay.
    assert terms("didn't o'neil 3's x") == ["didn't", "o'neil", "3", "s", "x"]  # ICU cuts 3's


def test_long_words_are_cut() -> None:
    word = "x" * 500
    (token,) = analyze(word)
    assert len(token.term) == MAX_TERM_CHARS and (token.start, token.end) == (0, MAX_TERM_CHARS)


def test_very_long_text() -> None:
    chunk = "the quick brown fox 部署地区 jumps over 上海 "
    text = chunk * 20_000  # ~800k characters, several analysis blocks
    tokens = analyze(text)
    assert len(tokens) == 20_000 * len(analyze(chunk))
    for t in tokens[:: len(tokens) // 50]:
        assert normalize(text[t.start : t.end]).text == t.term
    # Past MAX_ANALYZED_CHARS nothing is analyzed.
    huge = "a " * MAX_ANALYZED_CHARS
    assert len(terms(huge)) == MAX_ANALYZED_CHARS // 2


def test_query_terms_are_distinct_in_order() -> None:
    assert query_terms("上海 上海 cn-shanghai 上海") == ["上海", "cn", "shanghai"]


def test_query_drops_single_ideographs_that_a_bigram_covers() -> None:
    assert "为" in terms("部署地区为上海")
    assert query_terms("部署地区为上海") == ["部署", "署地", "地区", "区为", "为上", "上海"]
    assert query_terms("的一") == ["的一"]
    assert query_terms("为") == ["为"]
    assert query_terms("为 上海") == ["为", "上海"]


_ALPHABET = st.sampled_from(
    list("abcXYZ019 -_.,!'")
    + list("部署地区上海的")
    + list("ภาษาไทย")
    + list("カタかな")
    + list("서울")
    + ["ＡＢＣ"[0], "ß", "ﬁ", "😀", "\u0301", "\n", "，", "。"]
)


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(_ALPHABET, max_size=60).map("".join))
def test_every_token_is_its_span_normalized(text: str) -> None:
    for t in analyze(text):
        assert 0 <= t.start < t.end <= len(text)
        assert t.term.strip() and len(t.term) <= MAX_TERM_CHARS
        # The original span normalizes to the term (marks may attach to the span's edge).
        assert t.term in normalize(text[t.start : t.end]).text
    query = query_terms(text)
    assert len(query) == len(set(query)) and set(query) <= set(terms(text))
    # Only single ideographs covered by a bigram of the query are left out.
    assert all(len(t) == 1 for t in set(terms(text)) - set(query))
    assert sorted(terms(text)) == sorted(t.term for t in analyze(text))
