"""Morphology in lexical search: Snowball stems at index and query time, over real LMDB files."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import storage.search.format as format_module
import storage.search.synonyms as synonyms_module
import tests.storage.test_search_index as search_tests
from protocol.errors import RequestError
from storage.search import INDEX_FORMAT, LexicalIndex, wordnet
from storage.search.morphology import (
    LANGUAGES_ENV,
    PART_MARK,
    STEM_MARK,
    languages_from,
    morphology,
    part_term,
    stem_term,
)
from storage.search.questions import NUMBER_TERM, SPEAKER_MARK, TEMPORAL_TERM
from storage.search.text import (
    _plain_word,
    analyze,
    identifier_parts,
    index_terms,
    query_plan,
    terms,
)
from storage.search.variants import variants
from tests.examples import examples
from tests.storage.contexts import ContextSetup, setup_fixture
from tests.storage.test_search_index import answers, churn, dump

ENGLISH = morphology(("english",))


class Ctx(ContextSetup):
    """A context on real LMDB files and its index, built for *languages*."""

    def __init__(self, root: Path, languages: Any = None) -> None:
        super().__init__(root)
        self.index = LexicalIndex.for_backend(self.backend, languages=languages)

    def add(self, *texts: str) -> list[str]:
        refs = [self.ctx.observe("tool_result", t).ref for t in texts]
        self.index.catch_up()
        return refs

    def ids(self, query: str, **kw: Any) -> list[str]:
        return [h.id for h in self.index.search(query, **kw).hits]

    def close(self) -> None:
        self.index.close()
        super().close()


c = setup_fixture(Ctx, "c")


def test_english_inflections_find_each_other(c: Ctx) -> None:
    keys, refund, runs, other = c.add(
        "the keybindings were reset after the upgrade",
        "refund issued for the broken tablet",
        "the backup runs every night",
        "nothing related here",
    )
    assert c.index.languages == ("english",) == c.index.state().languages
    assert c.ids("keybinding") == [keys]
    assert c.ids("refunded") == [refund]
    assert c.ids("running") == [runs]
    assert c.ids("Refunds") == [refund]
    assert other not in c.ids("keybinding refunded running")


def test_exact_form_ranks_above_stem_only_matches(c: Ctx) -> None:
    forms = ["refund", "refunded", "refunds"]
    refs = c.add(*(f"tablet {form} request" for form in forms))
    for form, ref in zip(forms, refs, strict=True):
        hits = c.index.search(form).hits
        assert [h.id for h in hits][0] == ref, form
        assert {h.id for h in hits} == set(refs)
        assert hits[0].score > hits[1].score
    # Exact words score as without stemming; stems only add.
    run, running, runs = c.add("run it now", "running it now", "runs it now")
    got = c.ids("running")
    assert got[0] == running and set(got) == {run, running, runs}
    assert c.ids("run")[0] == run


def test_derivational_relatives_the_stemmer_keeps_apart_find_each_other(c: Ctx) -> None:
    departure, departs, payment, delivered, decision, slip = c.add(
        "scheduled departure at 10:15",
        "the train departs at noon",
        "the payment went through",
        "the parcel was delivered",
        "the decision is final",
        "the pay slip",
    )
    assert set(c.ids("depart")) == {departure, departs}
    assert set(c.ids("departures")) == set(c.ids("departed")) == {departure, departs}
    assert c.ids("delivery") == [delivered]
    assert c.ids("decide") == [decision]
    # The form itself (or its stem) first: a relative weighs half a stem match.
    assert c.ids("payments") == [payment, slip]
    assert c.ids("pay") == [slip, payment]


def test_an_inflected_query_word_weighs_what_it_weighed_without_stems(tmp_path: Path) -> None:
    corpus = [f"note {i} warning" for i in range(5)] + ["zqmarker one", "zqmarker warning two"]
    corpus += [f"filler {i}" for i in range(20)]
    plain, stemmed = Ctx(tmp_path / "plain", ()), Ctx(tmp_path / "stemmed")
    try:
        plain.add(*corpus)
        stemmed.add(*corpus)
        # No other form of "warning" is indexed: stemming changes no score.
        for q in ("warning zqmarker", "warnings", "zqmarker"):
            a = [(h.id, round(h.score, 9)) for h in plain.index.search(q).hits]
            b = [(h.id, round(h.score, 9)) for h in stemmed.index.search(q).hits]
            if q == "warnings":
                assert a == [] and len(b) == 6  # found only through the stem
            else:
                assert a == b, q
    finally:
        plain.close()
        stemmed.close()


def test_snippets_highlight_the_words_matched_through_their_stem(c: Ctx) -> None:
    c.add("the keybindings were reset")
    assert "the «keybindings» were reset" in c.index.search("keybinding").hits[0].snippet
    # Exact and stem matches in one window are both marked.
    c.add("refund requested; the tablet was refunded twice")
    snippet = c.index.search("refund").hits[0].snippet
    assert "«refund» requested" in snippet and "«refunded» twice" in snippet
    # A stem-only match deep in a long text still chooses the window.
    long_text = "lorem ipsum dolor " * 200 + "then the connections dropped " + "sit amet " * 50
    (ref,) = c.add(long_text)
    hit = next(h for h in c.index.search("connect", limit=20).hits if h.id == ref)
    assert "«connections» dropped" in hit.snippet and hit.snippet.startswith("…")


def test_german_and_french_when_enabled(tmp_path: Path) -> None:
    texts = (
        "die Verträge sind unterschrieben",
        "le client a été remboursé hier",
        "the contracts are signed",
    )
    both = Ctx(tmp_path / "both", ["german", "fr", "english"])
    english = Ctx(tmp_path / "en")
    try:
        de, fr, en = both.add(*texts)
        english.add(*texts)
        assert both.index.languages == ("english", "french", "german")
        assert both.ids("Vertrag") == [de]
        assert both.ids("rembourser") == [fr]
        assert both.ids("contract") == [en]
        # English alone does not know German or French inflection.
        assert english.ids("Vertrag") == [] and english.ids("rembourser") == []
        assert english.ids("contract") == [en]
    finally:
        both.close()
        english.close()


IDENTIFIERS_AND_CJK = [
    "e42",
    "foo_bars",
    "deploy.yaml",
    "keyBindings",
    "v1.2.3",
    "@e42",
    "src/runners.py",
    "/usr/lib/connections",
    "部署地区为上海",
    "東京タワー",
    "ORD-1234",
    "生产配置确认 us-east-1",
]


def test_identifiers_and_cjk_get_no_stems() -> None:
    assert ENGLISH is not None
    for text in IDENTIFIERS_AND_CJK:
        exact, stems = index_terms(text, ENGLISH)
        assert exact == terms(text), text
        # Only the parts of identifiers (test_identifier_parts.py) add terms, stemmed or not.
        parts = [
            t for w in exact for p in identifier_parts(w) for t in (part_term(p), *ENGLISH.stems(p))
        ]
        assert [t for t in stems if not _rule_term(t)] == parts, (text, stems)
        assert {q.kind for _, q in query_plan(text, ENGLISH)[1]} <= {"part", "char"}, text
    # Words joined by / or - are prose unless the run looks like a path or identifier.
    assert index_terms("returned/exchanged follow-ups", ENGLISH)[1] == [
        stem_term("english", "return"),
        stem_term("english", "exchang"),
        stem_term("english", "up"),
    ]


CORPUS = [
    "deploy target is cn-beijing according to the old runbook",
    "生产配置确认部署地区为上海 cn-shanghai",
    "请把服务部署到正确的地区",
    "keyBindings updated in src/settings/keybindings.json",
    "the keybindings were reset; deploys failed twice",
    "foo_bars and foo_bar differ; see deploy.yaml v1.2.3",
    "ORD-1234 refunded, ORD-1235 refund pending",
    "東京に行きます。ソフトウェアのテストは完了しました",
    "テスト結果 tests passed 测试通过",
]
UNCHANGED_QUERIES = [
    "部署地区",
    "上海",
    "ソフトウェア",
    "テスト 東京",
    "foo_bar",
    "deploy.yaml",
    "v1.2.3",
    "keyBindings",
    "src/settings/keybindings.json",
    "ORD-1234",
    "测试通过",
]


def test_identifier_and_cjk_queries_answer_as_without_stemming(tmp_path: Path) -> None:
    plain = Ctx(tmp_path / "plain", ())
    stemmed = Ctx(tmp_path / "stemmed")
    try:
        plain.add(*CORPUS)
        stemmed.add(*CORPUS)
        assert plain.index.state().languages == ()
        for q in UNCHANGED_QUERIES:
            a = [(h.id, h.score, h.snippet) for h in plain.index.search(q, limit=20).hits]
            b = [(h.id, h.score, h.snippet) for h in stemmed.index.search(q, limit=20).hits]
            assert a == b, q
        # Stem terms do not count in a document's length.
        a_state, b_state = plain.index.state(), stemmed.index.state()
        assert (a_state.documents, a_state.total_length) == (
            b_state.documents,
            b_state.total_length,
        )
    finally:
        plain.close()
        stemmed.close()


GROUPS = [
    ["refund", "refunds", "refunded", "refunding"],
    ["keybinding", "keybindings"],
    ["connect", "connected", "connecting", "connection", "connections"],
    ["tablet", "tablets"],
    ["deploy", "deployed", "deploys", "deploying"],
    ["customer", "customers", "customer’s", "customer's"],
]


def test_every_form_finds_every_other_form_and_no_other_word(c: Ctx) -> None:
    rng = random.Random(5)
    owner: dict[str, int] = {}
    for g, forms in enumerate(GROUPS):
        for form in forms:
            shown = rng.choice([form, form.capitalize(), form.upper()])
            (ref,) = c.add(f"note {shown} end")
            owner[ref] = g
    for g, forms in enumerate(GROUPS):
        for form in forms:
            found = c.ids(form, limit=50)
            assert {owner[r] for r in found if r in owner} == {g}, (form, found)
            assert len(found) == len(forms), (form, found)


def test_names_are_found_by_their_exact_form_only(c: Ctx) -> None:
    camel, path, prose = c.add("fooRefunds changed", "see /api/refunds now", "two refunds")
    assert c.ids("refund") == [prose]
    assert set(c.ids("refunds")) == {path, prose}
    assert c.ids("fooRefunds") == [camel]


WORDS = st.text(
    alphabet=st.sampled_from(list("abcdeiklnorstuyABCRST_./\\'’0123 -部署上海éﬁßÉ")),
    max_size=60,
)


def _rule_term(term: str) -> bool:
    return term in (TEMPORAL_TERM, NUMBER_TERM) or term.startswith(SPEAKER_MARK)


@settings(max_examples=examples(500), deadline=None)
@given(WORDS)
def test_index_and_query_agree(text: str) -> None:
    exact, stems = index_terms(text, ENGLISH)
    assert exact == terms(text)
    assert ENGLISH is not None
    # The fast paths give what the rule says, word by word.
    expected = Counter(
        stem
        for token in analyze(text)
        if _plain_word(text, token.start, token.end)
        for stem in ENGLISH.stems(token.term)
    )
    # Identifiers' parts add their part terms and the parts' stems, whatever surrounds them.
    parts = [p for w in exact for p in identifier_parts(w)]
    expected.update(t for p in parts for t in (part_term(p), *ENGLISH.stems(p)))
    # The question rules' terms (a time, a number, a speaker) are theirs to test.
    assert Counter(t for t in stems if not _rule_term(t)) == expected
    allowed = {t for w in exact + parts for t in ENGLISH.stems(w)}
    assert all(
        t.startswith(STEM_MARK) and t in allowed
        for t in stems
        if t[0] != PART_MARK and not _rule_term(t)
    )
    # Each word indexed with stems is found through them by a query of that word.
    for word in set(exact):
        mine = set(ENGLISH.stems(word))
        if not mine or not mine & set(stems):
            continue
        qexact, qstems = query_plan(word, ENGLISH)
        if qexact == [word] and qstems:
            assert mine <= {q.term for _, q in qstems}


def test_an_index_of_the_previous_format_is_rebuilt_with_stems(tmp_path: Path) -> None:
    old = Ctx(tmp_path, ())
    old.add("the keybindings were reset")
    # Make it an index of format 2: no languages in its state, no stem terms.
    shared = old.index._shared
    with shared.env.begin(write=True) as txn:
        state = format_module._load_state(txn, shared.dbs).to_record()
        state["format"] = 2
        del state["languages"]
        txn.put(b"state", format_module._pack(state), db=shared.dbs["meta"])
    old.index.close()
    old.index = LexicalIndex.for_backend(old.ctx.backend)
    try:
        before = old.index.state()
        assert before.format == 2 and not before.usable
        result = old.index.search("keybinding")
        assert result.hits == () and result.indexed_version == 0
        old.index.apply_intents()
        after = old.index.state()
        assert after.format == INDEX_FORMAT == 9 and after.languages == ("english",)
        assert [h.id for h in old.index.search("keybinding").hits] == ["@e1"]
    finally:
        old.close()


def test_other_languages_rebuild_the_index_and_queries_follow_the_stored_ones(
    tmp_path: Path,
) -> None:
    c = Ctx(tmp_path, ())
    c.add("the keybindings were reset")
    assert c.ids("keybinding") == []
    c.index.close()
    c.index = LexicalIndex.for_backend(c.ctx.backend, languages="en")
    try:
        # Until it is rebuilt, the index answers with the languages it was built for.
        assert c.ids("keybinding") == [] and c.ids("keybindings") == ["@e1"]
        assert c.index.apply_intents() == 0
        assert c.index.state().languages == ("english",)
        assert c.ids("keybinding") == ["@e1"]
        # Back to no stemming: rebuilt again, stem terms gone.
        c.index.close()
        c.index = LexicalIndex.for_backend(c.ctx.backend, languages=())
        c.index.catch_up()
        assert c.index.state().languages == () and c.ids("keybinding") == []
        assert not any(k.startswith(STEM_MARK.encode()) for k in dump(c.index)["terms"])
    finally:
        c.close()


def test_revise_removes_the_stem_terms_too(c: Ctx) -> None:
    c.ctx.commit('(context-tx (base-version 0) (derive prefs (keys "custom keybindings")))')
    c.index.catch_up()
    assert c.ids("keybinding") == ["prefs"]
    c.ctx.commit('(context-tx (base-version 1) (revise prefs (keys "custom shortcuts")))')
    c.index.catch_up()
    assert c.ids("keybinding") == [] and c.ids("shortcut") == ["prefs"]
    assert not any(b"keybind" in k for k in dump(c.index)["terms"])


def test_rebuild_answers_like_the_incremental_index_with_stems(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        search_tests,
        "WORDS",
        "refund refunds refunded running runs run keybindings 部署 上海 deploy.yaml".split(),
    )
    monkeypatch.setattr(
        search_tests, "QUERIES", ["refund", "running", "keybinding", "部署", "runs refunded"]
    )
    s = search_tests.Setup(tmp_path)
    try:
        churn(s, random.Random(3), 60)
        s.index.catch_up()
        incremental = answers(s)
        assert all(incremental)
        before = dump(s.index)
        assert any(k.startswith(STEM_MARK.encode()) for k in before["terms"])
        s.index.rebuild()
        after = dump(s.index)
        assert after["terms"] == before["terms"] and after["postings"] == before["postings"]
        assert after["docs"] == before["docs"] and after["fterms"] == before["fterms"]
        assert answers(s) == incremental
    finally:
        s.close()


def test_unknown_languages_are_refused_and_change_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad_values: list[Any] = [["klingon"], "english,klingon", [42], ["EN", "xx"]]
    for bad in bad_values:
        with pytest.raises(RequestError) as err:
            LexicalIndex.open(tmp_path / "c", languages=bad)
        assert err.value.code == "bad_language"
        assert "klingon" in str(err.value) or "42" in str(err.value) or "xx" in str(err.value)
    assert not (tmp_path / "c").exists()
    with pytest.raises(RequestError):
        morphology(("german", "english"))  # not canonical: sorted names only
    monkeypatch.setenv(LANGUAGES_ENV, "klingon")
    with pytest.raises(RequestError):
        LexicalIndex.open(tmp_path / "c")
    assert not (tmp_path / "c").exists()
    monkeypatch.setenv(LANGUAGES_ENV, "none")
    assert languages_from(None) == ()
    monkeypatch.setenv(LANGUAGES_ENV, " German , en ")
    assert languages_from(None) == ("english", "german")
    monkeypatch.delenv(LANGUAGES_ENV)
    assert languages_from(None) == ("english",)
    assert languages_from([]) == () and languages_from("none") == ()


def test_numbers_in_words_and_in_digits_and_spellings_find_each_other(c: Ctx) -> None:
    digits, words, other, _ = c.add(
        "a restocking fee of $8 was taken off",
        "the order had five headsets in it",
        "a fee of $80 applies",
        "nothing related here",
    )
    assert c.ids("eight") == [digits]
    assert c.ids("Why was eight dollars deducted?")[0] == digits
    assert c.ids("5 headsets") == [words]
    assert c.ids("eighty") == [other]
    hit = c.index.search("eight").hits[0]
    assert "$«8» was" in hit.snippet
    # The same number: the other writing scores as the word would.
    assert c.index.search("eight").hits[0].score == pytest.approx(c.index.search("8").hits[0].score)
    # British and American spellings, with their inflections; never inside a name.
    neighbor, colours, centre = c.add(
        "R. Patel, my neighbor, signed for it",
        "the colours were off",
        "the service centre called",
    )
    assert c.ids("Who took delivery at the neighbour's?")[0] == neighbor
    assert c.ids("color") == [colours]
    assert c.ids("center") == [centre]
    assert c.ids("v2-eight") == [] and c.ids("ORD-5") == []
    # A number and its ordinal in digits; never a year's "ordinal".
    turning, may21, _ = c.add(
        "my dad is turning 60 next week",
        "we booked a cottage for the 21st of May",
        "back in 2024 we went there",
    )
    assert c.ids("Where did they celebrate his father's 60th?")[0] == turning
    assert c.ids("21") == [may21] and c.ids("2024th") == []
    assert variants("8") == ("eight", "8th") and variants("23rd") == ("23",)
    assert variants("2024") == () and variants("1th") == () and variants("ord1st") == ()
    # An inflected other writing counts once, as the word in that form would.
    (organized,) = c.add("they organized the whole trip")
    assert c.ids("organised") == [organized]
    assert c.index.search("organised").hits[0].score == pytest.approx(
        c.index.search("organized").hits[0].score
    )


def test_synonyms_stand_in_for_a_question_word_the_context_never_uses(
    c: Ctx, monkeypatch: pytest.MonkeyPatch
) -> None:
    kettle, holiday, _ = c.add(
        "the kettle arrived defective",
        "we booked a holiday in Spain",
        "nothing related here",
    )
    # WordNet synonyms (both words mostly mean it), of the word or of its base form.
    assert c.ids("faulty appliance") == [kettle]
    assert c.ids("vacations") == [holiday]
    assert "arrived «defective»" in c.index.search("faulty").hits[0].snippet
    # Weaker than the word: a synonym scores half what the word itself would.
    assert c.index.search("faulty").hits[0].score == pytest.approx(
        0.5 * c.index.search("defective").hits[0].score
    )
    # Not for a name (a capital after the first word).
    assert c.ids("Lost Vacation") == []
    # A word the context uses, in any form, is taken at its word: no synonyms.
    monkeypatch.setattr(synonyms_module, "SYNONYMS", False)
    assert c.ids("vacations") == [] and c.ids("faulty appliance") == []
    monkeypatch.setattr(synonyms_module, "SYNONYMS", True)
    (plans,) = c.add("our vacation plans fell through")
    assert c.ids("vacations") == [plans]


def test_a_past_question_finds_its_verb_in_the_past_tense(
    c: Ctx, monkeypatch: pytest.MonkeyPatch
) -> None:
    went, group = c.add(
        "I went to the pottery class with my sister",
        "to the pottery class",
    )
    question = "When did she go to the pottery class?"
    assert c.ids(question)[0] == went
    assert "I «went» «to»" in c.index.search(question).hits[0].snippet
    monkeypatch.setattr(synonyms_module, "PAST_FORMS", False)
    assert c.ids(question)[0] == group  # the shorter turn, without the rule
    monkeypatch.setattr(synonyms_module, "PAST_FORMS", True)

    def past(query: str) -> set[str]:
        return {q.term for _, q in query_plan(query, ENGLISH)[1] if q.kind == "past" and not q.stem}

    # Only the main verb after "did": not an infinitive, not another clause, not a name.
    assert past("What did Mel buy for her daughter?") == {"bought"}
    assert past("Where did the customer come across the slip?") == {"came"}
    assert past("Did she offer to help find it?") == set()
    assert past("Which flight did she pick and when does it leave?") == set()
    assert past("When does she go to the class?") == set()


def test_irregular_plurals_and_singulars_find_each_other(
    c: Ctx, monkeypatch: pytest.MonkeyPatch
) -> None:
    texts = {
        "child": "the children loved the zoo",
        "foot": "my feet hurt after the hike",
        "women": "a woman from the club called",
    }
    refs = dict(zip(texts, c.add(*texts.values(), "nothing related here"), strict=False))
    for query, ref in refs.items():
        assert c.ids(query) == [ref], query
    # Another form of the word: ranked below the form itself.
    (child,) = c.add("the child loved the zoo")
    assert c.ids("child") == [child, refs["child"]]
    monkeypatch.setattr(synonyms_module, "PLURALS", False)
    assert c.ids("foot") == [] and c.ids("women") == []


def test_without_the_wordnet_tables_search_answers_as_without_the_rules(
    c: Ctx, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kettle, _ = c.add("the kettle arrived defective", "the children loved it")
    tables = (
        synonyms_module._synonym_table,
        synonyms_module._verb_table,
        synonyms_module._plural_table,
    )
    monkeypatch.setattr(synonyms_module, "DATA", tmp_path / "missing")
    for table in tables:
        table.cache_clear()
    try:
        assert synonyms_module.synonyms("faulty") == ()
        assert synonyms_module.past_forms("go") == synonyms_module.plural_forms("child") == ()
        assert c.ids("faulty") == [] and c.ids("child") == [] and c.ids("defective") == [kettle]
    finally:
        monkeypatch.undo()
        for table in tables:
            table.cache_clear()
    assert c.ids("faulty") == [kettle]


def test_the_wordnet_tables_are_built_from_dominant_senses(tmp_path: Path) -> None:
    # A WordNet 3.0 dict directory in miniature: three noun synsets, one verb exception.
    (tmp_path / "data.noun").write_text(
        "  1 licence header line\n"
        "00000001 06 n 02 parcel 0 package 0 000 | a wrapped container\n"
        "00000002 06 n 02 parcel 0 lot 0 000 | a piece of land\n"
        "00000003 06 n 02 package 0 software_package 0 000 | a program\n",
        encoding="latin-1",
    )
    (tmp_path / "index.noun").write_text(
        "parcel n 2 0 2 0 00000001 00000002\n"
        "package n 2 0 2 0 00000001 00000003\n"
        "lot n 1 0 1 0 00000002\n"
        "software_package n 1 0 1 0 00000003\n"
        "chairman n 1 0 1 0 00000004\n",
        encoding="latin-1",
    )
    (tmp_path / "index.sense").write_text(
        "parcel%1:06:00:: 00000001 1 8\n"
        "parcel%1:06:01:: 00000002 2 2\n"
        "package%1:06:00:: 00000001 1 5\n"
        "package%1:06:01:: 00000003 2 1\n"
        "lot%1:06:00:: 00000002 1 1\n"
        "lot%4:02:00:: 00000009 1 9\n",
        encoding="latin-1",
    )
    (tmp_path / "verb.exc").write_text("went go\nstopped stop\n", encoding="latin-1")
    (tmp_path / "noun.exc").write_text("children child\nbases base\n", encoding="latin-1")
    for name in ("data.verb", "data.adj", "index.verb", "index.adj"):
        (tmp_path / name).write_text("", encoding="latin-1")
    # parcel/package share their dominant sense; "lot" mostly means something else (an
    # adverb's 9 uses of 10); "software_package" is no single word.
    assert wordnet.synonym_sets(tmp_path) == [("parcel", "package")]  # the most used first
    # Snowball already joins "stopped" to "stop".
    assert wordnet.verb_forms(tmp_path) == {"go": ("went",)}
    assert wordnet.plurals(tmp_path) == {"chairman": ("chairmen",), "child": ("children",)}
