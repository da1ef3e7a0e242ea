"""Questions, not keywords: function words, temporal intent and a turn's neighbours as evidence.

Real LMDB files: a context with conversations as events, its lexical index.
"""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from storage.search import questions as questions_module
from storage.search import ranking as ranking_module
from storage.search.questions import (
    ASK_TERM,
    FUNCTION_WEIGHT,
    NUMBER_TERM,
    ROLES,
    SPEAKER_MARK,
    SUBJECT_WEIGHT,
    TEMPORAL_TERM,
    ask_terms,
    asked_names,
    asks_amount,
    asks_speaker,
    asks_when,
    number_terms,
    speaker_label,
    temporal_terms,
    term_weights,
)
from storage.search.text import analyze, index_terms, query_intent
from tests.storage.contexts import setup_fixture
from tests.storage.test_stemming import Ctx


class Conversation(Ctx):
    """A context on real LMDB files and its index (English stems), turns said in sessions."""

    def say(self, session: str, *texts: str) -> list[str]:
        refs = [self.ctx.observe("user_message", t, session=session).ref for t in texts]
        self.index.catch_up()
        return refs


c = setup_fixture(Conversation, "c")


def tokens(text: str) -> list[tuple[str, int, int]]:
    return [(t.term, t.start, t.end) for t in analyze(text)]


def test_function_words_weigh_less_unless_they_are_all_there_is() -> None:
    q = "What did the user decide about the refund?"
    weights = term_weights(q, tokens(q))
    assert weights == {w: FUNCTION_WEIGHT for w in ("what", "did", "the", "user", "about")}
    assert term_weights("what is this", tokens("what is this")) == {}
    # A capitalized function word inside the question is a name (or a month), not a function word.
    q = "When did Will move in May?"
    assert set(term_weights(q, tokens(q))) == {"when", "did", "in"}
    q = "Where is it? Who said so"  # a sentence start: "Who" is still a question word
    assert "who" in term_weights(q, tokens(q))


def test_temporal_terms_and_questions_asking_when() -> None:
    for text in (
        "we moved last week",
        "see you on Saturday",
        "the flight leaves at 4:10",
        "born in 1987",
        "due 2026-07-14",
        "我们昨天到的",
    ):
        assert TEMPORAL_TERM in index_terms(text, None)[1], text
    for text in ("the refund was issued", "order 4471 shipped", "ORD-1234"):
        assert TEMPORAL_TERM not in index_terms(text, None)[1], text
    assert temporal_terms([]) == []
    for q in (
        "When did she move to Berlin?",
        "what time is the call",
        "他什么时候搬家的",
        "how long ago",
    ):
        assert query_intent(q)[1], q
    for q in ("where did she move", "refund amount", "what did he say about the trip"):
        assert not query_intent(q)[1], q
    assert not asks_when([])


def test_function_words_no_longer_outvote_the_subject(c: Conversation) -> None:
    subject, *_ = c.say("a", "the refund for the tablet went through")
    c.say("b", "what did you do about it, and what did they do then?")
    q = "what did the driver do about the refund"
    assert c.ids(q)[0] == subject
    # BM25 over every word prefers the turn full of the question's function words.
    assert c.ids(q, questions=False, neighbours=False)[0] != subject


def score(c: Conversation, query: str, ref: str, **kw: Any) -> float:
    return next(h.score for h in c.index.search(query, **kw).hits if h.id == ref)


def test_a_question_asking_when_prefers_turns_that_say_when(c: Conversation) -> None:
    vague, dated = c.say(
        "a",
        "Caroline went to the support group, it was so great",
        "Caroline went to the support group on Saturday",
    )
    q = "When did Caroline go to the support group?"
    assert c.ids(q, neighbours=False)[0] == dated
    # The turn that says when gains on the other: the rule adds to its score.
    gain = score(c, q, dated) - score(c, q, vague)
    assert gain > score(c, q, dated, questions=False) - score(c, q, vague, questions=False)


def test_a_question_finds_the_neighbouring_answer_in_the_same_session_only(
    c: Conversation,
) -> None:
    other = c.say("other", "unrelated chatter, weather looks grim")
    asked, answered, later = c.say(
        "trip",
        "which hotel did you book for the Lisbon conference?",
        "Casa Rio, rooftop pool included",
        "bakery downstairs is lovely",
    )
    after = c.say("next", "new session starts here")
    hits = c.index.search("What hotel was booked for the Lisbon conference?", explain=True).hits
    ids = [h.id for h in hits]
    assert ids[0] == asked and answered in ids  # the answer holds no word of the question
    signals = {h.id: [s.name for s in h.signals] for h in hits}
    assert signals[answered] == ["neighbours"]  # found through its neighbour alone
    assert signals[asked] == []  # its own match only: no neighbour matched anything
    assert not set(ids) & {*other, *after}  # another session's turns are not neighbours
    assert later not in ids  # only turns next to a match
    # A keyword search finds only turns holding its words; nothing is explained unless asked.
    assert c.ids("Lisbon conference") == [asked]
    assert all(not h.signals for h in c.index.search("Lisbon conference hotel").hits)
    assert c.ids("What hotel was booked for the Lisbon conference?", neighbours=False) == [asked]


def test_a_turn_in_the_session_about_the_subject_ranks_above_a_passing_mention(
    c: Conversation,
) -> None:
    # The same sentence in two sessions: one session is about the kayak trip, the other
    # mentions it once among other things.
    passing = c.say("june", "the kayak trip on the lake", "my sister visited")[0]
    about = c.say(
        "july", "the kayak trip on the lake", "bakery", "we rented the kayak for the trip"
    )[0]
    q = "What happened on the kayak trip?"
    hits = c.index.search(q, explain=True).hits
    ids = [h.id for h in hits]
    assert ids.index(about) < ids.index(passing)
    signals = {h.id: {s.name: s.score for s in h.signals} for h in hits}
    # The passing mention is its session's only match: no evidence from it.
    assert set(signals[about]) == {"lexical", "session"} and signals[passing] == {}
    own = {h.id: h.score for h in c.index.search(q, neighbours=False).hits}
    assert own[about] == own[passing]  # the same words: only the session tells them apart
    by_id = {h.id: h for h in hits}
    assert by_id[about].score == sum(s.score for s in by_id[about].signals)
    # Keywords alone get the session's evidence too; with neighbours off, none.
    assert c.ids("kayak trip lake")[0] == about
    assert all(not h.signals for h in c.index.search(q, neighbours=False, explain=True).hits)


def test_one_session_gets_no_session_evidence(c: Conversation) -> None:
    c.say("only", "the kayak trip on the lake", "we rented the kayak for the trip")
    hits = c.index.search("What happened on the kayak trip?", explain=True).hits
    assert hits and all("session" not in {s.name for s in h.signals} for h in hits)


def test_a_question_about_what_the_user_said_prefers_the_users_turns(c: Conversation) -> None:
    said = c.ctx.observe("user_message", "could I get store credit instead?", session="s").ref
    other = [
        c.ctx.observe(kind, text, session="s").ref
        for kind, text in (
            ("external", "store credit is issued within a day"),
            ("tool_result", '{"refund_method": "store credit", "store_credit": 59}'),
        )
    ]
    c.index.catch_up()
    assert asks_speaker([t[0] for t in tokens("what did the customer say about store credit")])
    assert not asks_speaker([t[0] for t in tokens("what did the agent offer as store credit")])
    assert not asks_speaker([t[0] for t in tokens("which customer got store credit")])
    q = "What did the customer say about store credit?"
    hits = c.index.search(q, explain=True).hits
    assert hits[0].id == said and set(other) <= {h.id for h in hits}
    told = {s.name: s.score for s in hits[0].signals}
    assert told["speaker"] > 0 and math.isclose(hits[0].score, sum(told.values()))
    assert all("speaker" not in {s.name for s in h.signals} for h in hits[1:])
    # Without the rule (or asked as keywords) the user's turn has no such advantage.
    assert c.ids(q, questions=False)[0] != said
    assert c.ids("store credit")[0] != said


def test_role_words_of_a_question_weigh_like_function_words(c: Conversation) -> None:
    q = "What loyalty tier does the customer hold?"
    weights = term_weights(q, tokens(q))
    assert weights["customer"] == FUNCTION_WEIGHT and "tier" not in weights
    for chinese in (
        "乘客哪一天还得赶到法国？",
        "这位顾客是什么会员等级",
    ):  # a "?" or a question word
        assert set(term_weights(chinese, tokens(chinese))) & ROLES, chinese
    # Keywords, or a question of nothing but role and function words, keep the role's weight.
    for keep in ("customer tier", "customer loyalty tier", "what did the customer do"):
        assert "customer" not in term_weights(keep, tokens(keep)), keep
    answer = c.ctx.observe("external", "You're at the Gold tier.", session="s").ref
    c.ctx.observe(
        "tool_result",
        '{"customer": "cust_004", "customer_id": "cust_004", "customer_type": "customer"}',
        session="s",
    )
    c.index.catch_up()
    assert c.ids(q)[0] == answer
    # Without the rule the tool result, full of the role word, ranks first.
    assert c.ids(q, questions=False)[0] != answer


def test_the_person_a_question_is_about_weighs_like_a_role(
    c: Conversation, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "What did Emma ask …?": the person is the question's subject, as "the customer" is; the
    # turns that answer are hers ("please reverse …") and seldom say her name, while every
    # profile lookup of every session does.
    for q, subject in (
        ("What did Emma ask about the laptop refund?", "emma"),
        ("When did Emma's headphones arrive?", "emma"),
        ("How long has Caroline had her current group of friends?", "caroline"),
        ("What is Melanie’s job?", "melanie"),
    ):
        assert term_weights(q, tokens(q))[subject] == SUBJECT_WEIGHT, q
    for q, name in (
        ("When did she move to Berlin?", "berlin"),  # a place after a preposition
        ("Which hotel did you book for Lisbon?", "lisbon"),
        ("Emma laptop refund", "emma"),  # keywords, not a question
        ("What did Emma do?", "emma"),  # nothing else to ask about: the name is the subject
        ("Emma's refund?", "emma"),  # the query's first word
        ("Is it late? Emma's refund", "emma"),  # a sentence's first word
    ):
        assert name not in term_weights(q, tokens(q)), q
    answer = c.ctx.observe(
        "user_message", "please reverse the laptop refund, it was sent by mistake", session="c"
    ).ref
    for session in ("a", "b"):
        c.ctx.observe(
            "tool_result",
            '{"name": "Emma Chen", "email": "emma.chen@example.com", "tier": "platinum"}',
            session=session,
        )
    for session in ("a", "b", "d", "e"):
        c.ctx.observe("external", "the laptop shipped on Monday", session=session)
        c.ctx.observe("external", "a refund for the book went out", session=session)
    c.index.catch_up()
    q = "What did Emma ask about the laptop refund?"
    assert c.ids(q)[0] == answer
    # Without the rule her profile, the only text that names her, ranks first.
    monkeypatch.setattr(questions_module, "SUBJECT_WEIGHT", 1.0)
    assert c.ids(q)[0] != answer


def test_a_turn_that_starts_with_a_speakers_label_carries_the_speaker() -> None:
    for text, label in (
        ("Maya: I adopted a greyhound yesterday!", "Maya"),
        ("Mary Ann O'Neil: see you at 5", "Mary Ann O'Neil"),
        ("Dr. Figueiredo:\tgood work", "Dr. Figueiredo"),
        ("Zoë: ça va", "Zoë"),
        ('Caroline said, "I went to a support group yesterday."', "Caroline"),
        ("Maya said: hi", "Maya"),
        ('Tom: Maya said, "no"', "Tom"),
        ("[2024-03-09 19:42] Maya: hi", "Maya"),
        ("(1:56 pm on 8 May, 2023) Caroline: I went to a support group", "Caroline"),
        ("**Maya**: hi", "Maya"),
        ("[Maya]: hi", "Maya"),
        ("Maya (19:42): hi", "Maya"),
        ("Mary Ann [2024-03-09]: hi", "Mary Ann"),
        # A time stamp or turn id without brackets: one word, or ending with a separator.
        ("D1:3 Caroline: I went to a support group", "Caroline"),
        ("8 May 2023, Caroline: hi", "Caroline"),
        ("Session 1, 1:56 pm on 8 May, 2023 - Caroline: hi", "Caroline"),
        ("1:56 pm on 8 May, 2023 | Mary Ann Jones: hi", "Mary Ann Jones"),
        ("<Maya> an IRC log", "Maya"),
        # Or words of a date or time, without a separator.
        ("8 May 2023 Caroline: hi", "Caroline"),
        ("1:56 pm on 8 May, 2023 Caroline: hi", "Caroline"),
        ("Mon 8 May 2023 10:00 Mary Ann: hi", "Mary Ann"),
    ):
        assert speaker_label(text) == label, text
        assert set(index_terms(text, None)[1]) >= {
            SPEAKER_MARK + w for w in label.lower().replace(".", "").split()
        }
    for text in (
        "https://example.com: a link",  # lowercase, and no space after the colon anyway
        "maya: lower case",
        "Error:file not found",  # no space after the colon
        "The Big Old Grey Cat: four words",
        "Maya whispered: hi",  # "whispered" is not a name
        "Sam always said so",
        "Maya said",
        "[note] Maya: no digit, not a time stamp",
        "Maya (admin): no digit, not a time stamp",
        "Maya" + ":1" * 100_000,  # colons without a space: only the first 88 characters read
        "In 2019 we moved to Berlin: a stamp is words of a date or ends with a separator",
        "On 8 May we met Tom: words that are not a date's before the name",
        "12 pm on Sam Smith Jones Lee: four words",
        "8 May 2023 " + "1 " * 30 + "Tom: a stamp too long to skip",
        "Note - 12 things, all of them lower case: no name",
        "D1:3 caroline: lower case",
        "<" + "A" * 100,
        "<Maya whispered> no",
        "2024 - " + "A" * 41 + ": too long for a label",
        "[" + "1" * 60 + "] Maya: a stamp too long to skip",
        ":" + "A" * 50,
        "A" * 41 + ": too long for a label",
        "客户: 你好",  # no capital letters: not a label
        '{"name": "Maya"}',
        "Maya",
        "",
    ):
        assert speaker_label(text) is None, text
        assert not any(t.startswith(SPEAKER_MARK) for t in index_terms(text, None)[1]), text


def test_a_question_naming_a_speaker_prefers_their_turns(
    c: Conversation, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "When did Tom bring Dottie home?": in a chat between two friends the turns that answer a
    # question about one of them are mostly that person's own, and the chat log says whose.
    q = "When did Tom bring Dottie home?"
    assert asked_names(q, tokens(q)) == ("tom", "dottie")
    assert query_intent(q).names == (SPEAKER_MARK + "tom", SPEAKER_MARK + "dottie")
    for keywords in ("Tom Dottie home", "tom dottie?", "Tom's dog?"):
        assert "tom" not in asked_names(keywords, tokens(keywords)), keywords
    _, asked = c.say(
        "1",
        "Tom: The landlord finally said yes to a dog, we pick her up next week.",
        "Maya: Dottie is coming home with you? Send me pictures!",
    )
    answer = c.say("2", "Tom: We brought Dottie back two weeks ago, she sleeps all day.")[0]
    c.say("2", "Maya: My cat would hate Dottie.")
    ranked = c.ids(q)
    assert ranked[0] == answer
    hits = c.index.search(q, explain=True).hits
    signals = {s.name: s.score for s in hits[0].signals}
    assert signals["speaker"] > 0 and math.isclose(hits[0].score, sum(signals.values()))
    assert all("speaker" not in {s.name for s in h.signals} for h in hits if "Maya" in h.snippet)
    # Maya's turn, with Dottie and "home", wins without the rule or as keywords.
    assert c.ids(q, questions=False)[0] != answer
    assert c.ids("Tom Dottie home")[0] != answer
    # A name no turn is labelled with is skipped for the next; none at all changes nothing.
    hits = c.index.search("When did Dottie come home with Tom?", explain=True).hits
    told = {h.id for h in hits if "speaker" in {s.name for s in h.signals}}
    assert answer in told and asked not in told
    unlabelled = "When did Dottie come home?"
    with_rule = c.ids(unlabelled)
    monkeypatch.setattr(ranking_module, "NAMED_WEIGHT", 1.0)
    assert c.ids(q)[0] != answer
    assert c.ids(unlabelled) == with_rule


def test_a_question_about_a_reaction_prefers_the_reply(
    c: Conversation, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "How did Tom react when Maya told him about the job?": the answer is Tom's reply, the
    # turn after Maya's news, and it seldom repeats the question's words.
    for q, reaction in (
        ("How did Tom react when Maya got the job?", True),
        ("What was Tom's reaction to the news?", True),
        ("What did Priya reply?", True),
        ("react job offer", False),  # keywords, not a question
        ("What did Tom say about the job?", False),
    ):
        assert query_intent(q).reaction is reaction, q
    c.say("1", "Tom: Any news about the clinic job yet?", "Maya: Not yet, still waiting.")
    news, reply = c.say(
        "2",
        "Maya: I got the job at the clinic! They told me this morning.",
        "Tom: That's brilliant, I'm so proud of you.",
    )
    c.say("2", "Maya: Thanks! I start in March.")
    q = "How did Tom react when Maya got the job at the clinic?"
    hits = c.index.search(q, explain=True).hits
    ranked = [h.id for h in hits]
    assert ranked.index(reply) <= 1 and ranked.index(reply) < ranked.index(news)
    lent = {s.name: s.score for s in hits[ranked.index(reply)].signals}
    assert lent["neighbours"] > 0 and lent["speaker"] > 0
    assert math.isclose(hits[ranked.index(reply)].score, sum(lent.values()))
    # Without the rule the turns holding the words (Maya's news, both her other turns, Tom's
    # question) rank above the reply.
    monkeypatch.setattr(ranking_module, "REACTION_WEIGHT", 0.0)
    assert c.ids(q).index(reply) > 1


def test_a_turn_that_ends_with_a_question_mark_carries_the_ask_term() -> None:
    for text, asks in (
        ("Oh no! What happened?", True),
        ("Maya: how much are they paying you?  ", True),
        ('He said "are you coming tomorrow?"', True),
        ("你什么时候回来？", True),
        ("(really?)", True),
        ("What happened? Tell me everything.", False),  # the question is not the turn's end
        ("I failed the driving test.", False),
        ("", False),
        ("?" * 10 + " " * 100_000, False),  # reads only the last 64 characters
    ):
        assert (ask_terms(text) == [ASK_TERM]) is asks, text
        assert (ASK_TERM in index_terms(text, None)[1]) is asks, text


def test_the_answer_to_a_question_asked_in_the_conversation_is_evidence(
    c: Conversation, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "I failed the driving test." — "Oh no, what happened?" — "I rolled back on the slope…":
    # the explanation holds no word of the question; it follows the other speaker's question.
    c.say("0", "Arjun: Three mornings a week of driving lessons, the test is in May.")
    failed, asked, told = c.say(
        "1",
        "Arjun: So. I failed the driving test.",
        "Chloe: Oh no! What happened?",
        "Arjun: I rolled back on the slope and the examiner stopped me after four seconds.",
    )
    c.say("1", "Chloe: Next time you will nail the hill start.")
    q = "Why did Arjun fail his driving test?"
    hits = c.index.search(q, explain=True).hits
    ranked = [h.id for h in hits]
    assert ranked[0] == failed and ranked.index(told) < ranked.index(asked)
    signals = {s.name: s.score for s in hits[ranked.index(told)].signals}
    assert signals["neighbours"] > 0
    monkeypatch.setattr(ranking_module, "FOLLOW_WEIGHT", 0.0)
    without = c.ids(q)
    assert without.index(told) > without.index(asked)

    # A match that asks something lends its answer, the next turn, more than a neighbour.
    question, answer = c.say(
        "2", "Chloe: How did the interview at the bakery go?", "Arjun: They offered me the job!"
    )
    c.say("2", "Chloe: The bakery interview story is the best bakery story.")
    q = "How did the interview at the bakery go for Arjun?"
    with_rule = c.ids(q)
    monkeypatch.setattr(ranking_module, "ANSWER_WEIGHT", 0.0)
    without = c.ids(q)
    assert with_rule.index(answer) < without.index(answer)


def test_a_question_asking_how_much_prefers_turns_that_state_a_number(
    c: Conversation, monkeypatch: pytest.MonkeyPatch
) -> None:
    for text, number in (
        ("I paid 60 quid for it", True),
        ("twelve of them came", True),
        ("$1,299 back on your card", True),
        ("one of them came", False),  # "one" is left out: seldom an amount
        ("no numbers here", False),
    ):
        assert (NUMBER_TERM in index_terms(text, None)[1]) is number, text
        assert number_terms([t.term for t in analyze(text)]) == ([NUMBER_TERM] if number else [])
    for q, amount in (
        ("How much did Sam pay for the bike?", True),
        ("How many kids are on the team?", True),
        ("What price did they agree on?", True),
        ("这个多少钱？", True),
        ("How did Sam pay for the bike?", False),
        ("bike price", False),  # keywords
    ):
        assert query_intent(q).amount is amount, q
    assert asks_amount(["how", "many"]) and not asks_amount(["many", "how"])
    bought = c.say("s", "I bought the old bike at the car boot sale, what a bargain")[0]
    c.say("s", "nice, is it any good?")
    paid = c.say("s", "the guy wanted 80 for the old bike and I got him down to 60")[0]
    c.index.catch_up()
    q = "How much did Sam pay for the old bike at the sale?"
    hits = c.index.search(q, explain=True).hits
    assert hits[0].id == paid
    signals = {s.name: s.score for s in hits[0].signals}
    assert signals["amount"] > 0 and math.isclose(hits[0].score, sum(signals.values()))
    # Without the rule the turn holding more of the question's words ranks first.
    monkeypatch.setattr(ranking_module, "AMOUNT_WEIGHT", 0.0)
    assert c.ids(q)[0] == bought


def test_subjects_of_a_hostile_question_cost_one_look_per_token(c: Conversation) -> None:
    # Every word a capitalized name after an auxiliary, possessives and apostrophes: the rule
    # reads each token and its neighbours once (no pattern over the text), and a query still
    # uses at most 32 terms.
    words = [f"did Nm{i}'s" for i in range(400)]
    q = ("What " + " ".join(words) + " refund?")[:4096]
    weights = term_weights(q, tokens(q))
    assert weights["nm0"] == SUBJECT_WEIGHT and weights["nm300"] == SUBJECT_WEIGHT
    assert len(weights) <= len({t[0] for t in tokens(q)})
    for hostile in (q, "did " + "’s " * 1300, "did " + "Ä" * 4000, "?" * 4096):
        query_intent(hostile)
        assert isinstance(c.ids(hostile), list)


def test_a_question_about_how_things_ended_or_began_prefers_later_or_earlier_turns(
    c: Conversation,
) -> None:
    for q, order in (
        ("Which kettle did they end up buying?", 1),
        ("最后选的是哪一班？", 1),
        ("What was the original kettle?", -1),
        ("实时预览一开始算出来的总额是多少？", -1),
        ("which kettle was first and which last?", 0),
        ("kettle final price", 0),  # keywords, not a question
    ):
        assert query_intent(q).order == order, q
    c.ctx.observe("tool_result", '{"flight": "UA 100"}', session="other")
    first = c.ctx.observe("user_message", "the steel kettle, a good kettle", session="s").ref
    c.ctx.observe("external", "noted, thanks", session="s")
    last = c.ctx.observe("user_message", "make it the glass kettle then", session="s").ref
    c.index.catch_up()
    # The first turn holds the word twice: it wins unless the question asks how things ended.
    assert c.ids("What kettle did they talk about?")[0] == first
    assert c.ids("Which kettle did they end up with?")[0] == last
    assert c.ids("Which kettle did they end up with?", questions=False)[0] == first
    hits = c.index.search("What kettle did they want at first?", explain=True).hits
    assert hits[0].id == first
    signals = {s.name: s.score for s in hits[0].signals}
    assert signals["order"] > 0 and math.isclose(hits[0].score, sum(signals.values()))
    # The first of the session's matches gets nothing for a question about the end.
    hits = c.index.search("Which kettle did they end up with?", explain=True).hits
    assert "order" not in {s.name for h in hits if h.id == first for s in h.signals}


def test_the_rules_rank_among_the_pool_as_among_every_match(
    c: Conversation, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Many sessions of turns sharing words: far more matches than the rules' pool, and a
    # rare kind whose turns score low, so a filter must look below the pool.
    rng = random.Random(3)
    words = "kayak trip lake paddle rental storm harbour ticket refund".split()
    for s in range(40):
        for t in range(5):
            kind = ("tool_result", "external")[t % 2] if (s * 5 + t) % 17 == 0 else "user_message"
            text = " ".join(rng.choices(words, k=rng.randint(2, 9)))
            text += f" {s * 5 + t}" if (s + t) % 4 == 0 else ""
            speaker = ("Ada: ", "Bo: ", "")[(s + t) % 3]
            text = speaker + text + (" customer said" if t % 2 else "")
            c.ctx.observe(kind, text, session=f"s{s}")
    c.index.catch_up()
    cases: list[tuple[str, dict[str, Any]]] = []
    for q in (
        "kayak trip",
        "What did the customer say about the refund?",
        "When was the storm?",
        "Which ticket did they end up with?",
        "Where did Ada paddle the kayak?",
        "How many tickets did Bo want refunded?",
    ):
        for kw in ({}, {"limit": 3}, {"kinds": "tool_result"}, {"kinds": "external"}):
            cases.append((q, {**kw, "explain": True}))

    def answers() -> list[list[tuple[str, float, list[tuple[str, float]]]]]:
        return [
            [(h.id, h.score, [(s.name, s.score) for s in h.signals]) for h in hits]
            for hits in (c.index.search(q, **kw).hits for q, kw in cases)
        ]

    among_pool = answers()
    assert sum(len(a) for a in among_pool) > 40
    every = ranking_module._top
    monkeypatch.setattr(
        ranking_module,
        "_top",
        lambda txn, dbs, acc, limit, filt, cand=None, floor=None: every(txn, dbs, acc, limit, filt),
    )
    assert answers() == among_pool
