"""Questions, not keywords: what a natural-language query's words are worth, and its intent.

Agents ask their memory questions ("when did she move to Berlin?", "what did
the user decide about the refund?"). BM25 over every word of such a question
lets its function words (``what``, ``did``, ``the``, ``about``) score like
content words in a small or topical context, where they are not rare enough
for idf to silence them. Ten rules, read from the query (the index
stores every word, so a query of function words alone still finds them):

* **Function words** (:data:`FUNCTION_WORDS`: English question words, auxiliaries,
  articles, pronouns, prepositions; Chinese question words) score at
  :data:`FUNCTION_WEIGHT` of their idf — when the query has at least one other
  term. A function word written with a capital anywhere but at the start of
  the query (``May``, ``Will`` as names) is a name and keeps its full weight.
* **Role words** (:data:`ROLES`: ``customer``, ``traveller``, ``agent``, ``客户`` …) of a
  question weigh like its function words, when the question has a word of neither kind:
  "what tier does the customer hold?" asks about a tier; the turns that answer seldom say
  ``customer``, while every tool result with a ``customer_id`` does. A keyword query
  (no function word, no question mark) keeps their full weight.
* **The person asked about**: a name that is a question's subject — written with a
  capital inside the question, right after an auxiliary (``what did Emma ask …``, ``how long
  has Caroline …``) or in the possessive (``Emma's headphones``) — weighs
  :data:`SUBJECT_WEIGHT`, when the question has another content word. Like a role word it
  names whose turn it is: the turns that answer are the person's own ("please reverse the
  refund") and seldom say the name, while the texts that do are profile lookups repeated
  in every session, or greetings.
* **Temporal intent**: a question asking *when* (``when``, ``what time``,
  ``what date``, ``how long ago``, ``什么时候``, ``几点`` …) also looks up
  :data:`TEMPORAL_TERM`, a term every document holding a temporal expression
  carries (a month or weekday name, ``yesterday``, ``last week``, a year, a
  clock time, a date, ``昨天``, ``上周`` …; :func:`temporal_terms` adds it at indexing).
  It scores :data:`TEMPORAL_WEIGHT` times its idf, so among documents matching
  the question's content the ones that say when rank first.
* **The speaker**: a question about what the user side said, asked or wanted
  (a role word of :data:`USER_ROLES` and a verb of :data:`USER_VERBS`: "what
  did the customer say about store credit?", "what did the shopper remember
  the basket costing?") asks about the user's turns: events of kind
  ``user_message`` among the best matches score :data:`SPEAKER_WEIGHT` times
  their score (:func:`asks_speaker`).

* **The person named, as the speaker**: a turn that starts with its speaker's label, as a
  chat log writes it (``Maya: …``, :func:`speaker_label`), carries a
  :data:`SPEAKER_MARK` term for each word of the name; a question that names a speaker
  (:func:`asked_names`: "when did Tom bring Dottie home?") asks about that person's own
  turns, which among the best matches score :data:`NAMED_WEIGHT` times their score.

* **A reaction**: a question about how someone reacted or replied (:data:`REACTION_WORDS`:
  "how did Sam react to Leila's new flat?") asks for the reply: each of the best matches
  lends the next turn of its session :data:`REACTION_WEIGHT` more of its score
  (:func:`asks_reaction`).

* **An amount**: a question asking how much, how many, how long or a price
  (:func:`asks_amount`) favours the turns that state a number: each document holding a
  digit or a number word carries :data:`NUMBER_TERM` (:func:`number_terms`), and those among
  the best matches score ``1 +`` :data:`AMOUNT_WEIGHT` times their score.

* **A question asked in the conversation**: a turn that ends with a question mark carries
  :data:`ASK_TERM` (:func:`ask_terms`). For a question, a best match that asks something
  lends its next turn (the answer) :data:`ANSWER_WEIGHT` more of its score, and a best match
  followed by a turn that asks something lends the turn after that :data:`FOLLOW_WEIGHT`
  ("I failed the driving test." — "What happened?" — "I rolled back on the slope.").

* **Order**: a question (:func:`is_question`) about how things ended
  (:data:`LATE_WORDS`: "which blender ended up being purchased?", "最后选的是哪一班？")
  or began (:data:`EARLY_WORDS`: "what was the original spending limit?") asks about
  the last (first) of the turns on its subject: among the best matches of a session, a
  turn's score grows with its place, up to ``1 +`` :data:`ORDER_WEIGHT` times for the
  latest (earliest) (:func:`asks_order`).

The weights were chosen on the dev split of the judged dev set only
(``benchmarks/search_dev``; ``docs/search.md`` has the figures).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

FUNCTION_WEIGHT = 0.2
"""Weight of a function word of a question relative to a content word (its idf times this)."""
TEMPORAL_WEIGHT = 0.5
"""Weight of :data:`TEMPORAL_TERM` for a question asking when (times the term's idf)."""
SPEAKER_WEIGHT = 2.0
"""Factor of a user turn's score for a question about what the user side said."""
ORDER_WEIGHT = 0.5
"""For a question about how things ended (or began): the latest (earliest) of the best turns
of a session scores up to ``1 + ORDER_WEIGHT`` times its score."""
TEMPORAL_TERM = "\x03when"
"""The term a document holding a temporal expression carries (never a word: ``\\x03``)."""
NAMED_WEIGHT = 1.5
"""Factor of a turn's score for a question naming its speaker ("when did Maya …?" and
``Maya: …``)."""
AMOUNT_WEIGHT = 1.0
"""For a question asking how much or how many: a turn among the best that states a number
scores ``1 + AMOUNT_WEIGHT`` times its score."""
NUMBER_TERM = "\x03num"
"""The term a document stating a number carries (never a word: ``\\x03``)."""
ASK_TERM = "\x03ask"
"""The term a turn that ends with a question mark carries (never a word: ``\\x03``)."""
ANSWER_WEIGHT = 0.5
"""For a question: the share of a best match's score it lends the next turn of its session,
beyond :data:`~storage.search.ranking.NEIGHBOUR_WEIGHT`, when the match itself asks something
(ends with a question mark): the next turn is its answer."""
FOLLOW_WEIGHT = 0.3
"""For a question: the share of a best match's score it lends the turn after next of its
session when the turn between asks something (a follow-up question; the turn after it answers)."""
REACTION_WEIGHT = 0.4
"""For a question about how someone reacted: the share of a turn's score it lends the next turn
of its session, beyond :data:`~storage.search.ranking.NEIGHBOUR_WEIGHT` (the reply)."""
SPEAKER_MARK = "\x04"
"""Prefix of the terms a turn's speaker label adds (``\\x04maya`` for ``Maya: …``)."""
MAX_LABEL_CHARS = 40
"""Longest speaker label read at the start of a turn (``Mary Ann Jones:``)."""

FUNCTION_WORDS = frozenset(
    """
    a about above after again against all also am an and any are as at be because been before
    being below between both but by can could did do does doing done down during each either
    else ever for from further get got had has have having he her here hers herself him himself
    his how i if in into is it its itself just me might more most much must my myself no nor not
    now of off on once only or other our ours ourselves out over own same shall she should so
    some such than that the their theirs them themselves then there these they this those
    through to too under until up upon us very was we were what whatever when where whether
    which while who whom whose why will with would yet you your yours yourself yourselves
    anything something someone anyone ever tell let
    什么 为什 为什么 怎么 怎样 怎么样 多少 哪个 哪些 哪里 哪儿 是否 有没 没有 是不 不是
    时候 么时 什么时 请问 一下 我们 他们 她们 你们 这个 那个 的是 是什 了吗 的吗 吗
    """.split()
)
"""Words of a question that carry its form rather than its subject (lower case)."""

_WHEN_WORDS = frozenset({"when", "何时", "几点", "哪天", "时候", "么时", "多久", "几号", "哪年"})
_WHEN_PAIRS = frozenset(
    {
        ("what", "time"),
        ("what", "date"),
        ("what", "day"),
        ("which", "day"),
        ("what", "year"),
        ("which", "year"),
        ("what", "month"),
        ("which", "month"),
        ("how", "long"),
        ("what", "week"),
        ("which", "week"),
    }
)

TEMPORAL_WORDS = frozenset(
    """
    january february march april june july august september october november december
    jan feb mar apr jun jul aug sep sept oct nov dec
    monday tuesday wednesday thursday friday saturday sunday weekend weekday
    yesterday today tomorrow tonight morning afternoon evening night noon midnight
    ago earlier later recently week weeks month months year years day days hour hours
    minute minutes date dates am pm
    昨天 今天 明天 前天 后天 上周 下周 本周 这周 星期 周末 去年 今年 明年 上个 下个
    早上 晚上 下午 上午 中午 凌晨 月份 年前 天前 周前 月 日 号
    """.split()
)
"""Words that state a time (lower case); a document holding one carries :data:`TEMPORAL_TERM`."""

NUMBER_WORDS = frozenset(
    """
    two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen
    sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety
    hundred hundreds thousand thousands million millions billion billions dozen dozens
    """.split()
)
"""Number words (``one`` and ``half`` are left out: "one of them" states no amount); a
document holding one, or a term starting with a digit, carries :data:`NUMBER_TERM`."""
_AMOUNT_WORDS = frozenset({"多少", "几个", "几次", "几天"})
_AMOUNT_PAIRS = frozenset(
    {
        ("how", "much"),
        ("how", "many"),
        ("how", "long"),
        ("how", "far"),
        ("how", "old"),
        ("what", "price"),
        ("what", "cost"),
        ("what", "fee"),
        ("what", "amount"),
        ("what", "total"),
        ("what", "percentage"),
    }
)

_TIME_SHAPE = re.compile(r"(?:1[89]|20)\d\d|\d{1,2}(?:am|pm|st|nd|rd|th)")
"""A year, ``5pm``, ``3rd`` (matched whole, on one term of at most 64 characters)."""
_CLOCK = re.compile(r"\d:[0-5]\d")
"""A clock time in a text (``4:10``, ``18:00``), which the analyzer splits at the colon."""


LATE_WORDS = frozenset(
    """
    end ended final finally eventually ultimately last 最后 最终
    """.split()
)
"""Words of a question about how things ended ("which blender ended up being purchased?")."""
REACTION_WORDS = frozenset(
    """
    react reacts reacted reacting reaction reactions respond responds responded responding
    response responses reply replies replied replying opinion opinions 反应 回应 回复 看法
    """.split()
)
"""Words of a question about how someone took what was said ("how did Sam react to Leila's
new flat?"): the answer is the reply, the turn after the one that names the subject."""
EARLY_WORDS = frozenset(
    """
    first originally original initially initial 最初 起初 当初 原来 原本 原先 一开
    """.split()
)
"""Words of a question about how things began ("what was the original spending limit?";
``一开`` is the bigram of 一开始, "at first")."""


USER_ROLES = frozenset(
    """
    user customer buyer shopper traveller traveler passenger flyer client student caller
    guest member requester
    用户 客户 顾客 买家 乘客 旅客 客人 会员
    """.split()
)
"""Words naming the user side of a conversation (lower case; the analyzer cuts possessives)."""
USER_VERBS = frozenset(
    """
    say said says ask asked asks mention mentioned mentions tell told claim claimed claims
    want wanted wants request requested requests remember remembered think thought
    complain complained describe described explain explained reveal revealed insist insisted
    prefer preferred choose chose pick picked decide decided need needed
    说 说过 提到 问 问过 要求 想要 希望 表示 抱怨 提出 选择 决定 需要
    """.split()
)
"""Verbs of saying, asking and wanting (lower case) that make a role word a question about
the user's turns."""
ROLES = USER_ROLES | frozenset({"agent", "assistant"})
"""Words naming a side of the conversation. In a question ("what loyalty tier does the
customer hold?") they name whose turn it is, not its subject, and the turns rarely say them
(while tool results are full of ``customer_id``): they weigh like function words."""


SUBJECT_WEIGHT = FUNCTION_WEIGHT
"""Weight of a name that is a question's subject ("what did Emma ask …?") relative to a
content word (its idf times this)."""
SUBJECT_AFTER = frozenset(
    "did does do is was were are has have had will would can could should".split()
)
"""Auxiliaries after which a question's name is its subject ("when did Emma …", "how long has
Caroline …")."""
POSSESSIVE = ("'s", "\u2019s")
"""The English possessive and ``is`` clitic a word loses (``caroline's`` is ``caroline``; the
analyzer cuts it, a question's subject may wear it)."""


def speaker_label(text: str) -> str | None:
    """The speaker a turn names at its start, as a chat log writes it (``Maya: I adopted …``,
    ``Maya said, "I adopted …"``, ``[2024-03-09 19:42] Maya: …``, ``Maya (19:42): …``,
    ``**Maya**: …``, ``D1:3 Caroline: …``, ``<Maya> …``), or None.

    A label is one to three words, each starting with a capital, of letters, ``'``, ``-`` or
    ``.`` (``[`` ``]`` ``*`` around them dropped), within :data:`MAX_LABEL_CHARS`
    characters, right before the first ``:`` followed by a space or before the first
    `` said`` followed by ``,``, ``:`` or a space; a time stamp in brackets or parentheses
    (with a digit) before or after the name is skipped, and so is one without brackets that
    ends with a separator or is made of words of a date or time (:func:`_stamped`). Reads
    at most ``2 ·`` :data:`MAX_LABEL_CHARS` ``+ 8`` characters; no pattern over the text.
    """
    head = text[: 2 * MAX_LABEL_CHARS + 8]
    if head[:1] in ("[", "("):
        close = head.find("]" if head[0] == "[" else ")", 1, MAX_LABEL_CHARS + 1)
        if close > 0 and any(c.isdigit() for c in head[1:close]):
            head = head[close + 1 :].lstrip(" ")
    if head[:1] == "<":  # an IRC log: "<Maya> I adopted …"
        close = head.find(">", 1, MAX_LABEL_CHARS + 1)
        return _label(head[1:close]) if close > 0 else None
    colon = head.find(":", 1)
    while colon > 0 and head[colon + 1 : colon + 2] not in (" ", "\t", "\n"):
        colon = head.find(":", colon + 1)  # a clock time's colon
    if 0 < colon <= MAX_LABEL_CHARS:
        label = _label(head[:colon])
        if label is not None:
            return label
    if colon > 0:
        label = _stamped(head[:colon])
        if label is not None:
            return label
    said = head.find(" said", 1, MAX_LABEL_CHARS + 5)
    if said > 0 and head[said + 5 : said + 6] in (",", ":", " "):
        return _label(head[:said])
    return None


STAMP_WORDS = frozenset(
    "january february march april may june july august september october november december"
    " jan feb mar apr jun jul aug sep sept oct nov dec monday tuesday wednesday thursday"
    " friday saturday sunday mon tue tues wed thu thurs fri sat sun am pm a.m p.m on at".split()
)
"""Words of a time stamp besides those with a digit (lower case, without a trailing ``,`` or
``.``): ``8 May 2023 Caroline: …``."""

_STAMP_ENDS = (" - ", " \u2013 ", " \u2014 ", " | ", ", ")


def _stamped(before: str) -> str | None:
    """The name ending *before* (a turn's text up to its label's colon) when a time stamp or
    turn id without brackets comes first: ``D1:3 Caroline``, ``8 May 2023, Caroline``,
    ``1:56 pm on 8 May, 2023 - Caroline``, ``#412 | Maya``, ``8 May 2023 Caroline``. The
    stamp holds a digit, is at most :data:`MAX_LABEL_CHARS` characters, and ends with
    `` - ``, `` | ``, ``, `` or a dash, or is made of words of a date or time
    (:data:`STAMP_WORDS`, or with a digit); else None."""
    for end in _STAMP_ENDS:
        cut = before.rfind(end)
        if 0 < cut <= MAX_LABEL_CHARS and any(c.isdigit() for c in before[:cut]):
            label = _name(before[cut + len(end) :])
            if label is not None:
                return label
            break
    # Words of a date or time, then the name: "8 May 2023 Caroline", "1:56 pm on 8 May Mel".
    words = before[: 2 * MAX_LABEL_CHARS].split(" ")
    cut, dated = 0, False
    for word in words[:-1]:
        digit = any(c.isdigit() for c in word)
        if not digit and word.rstrip(",.").lower() not in STAMP_WORDS:
            break
        dated = dated or digit
        cut += len(word) + 1
    return _name(before[cut:]) if dated and cut <= MAX_LABEL_CHARS + 1 else None


def _name(name: str) -> str | None:
    """*name* if it is a speaker's label of at most :data:`MAX_LABEL_CHARS` characters."""
    return _label(name) if name and len(name) <= MAX_LABEL_CHARS else None


def _label(label: str) -> str | None:
    """*label* without the ``[`` ``]`` ``*`` around it and a bracketed time after it
    (``Maya (19:42)``) if it is a speaker's name, else None."""
    if label[-1:] in (")", "]"):
        cut = max(label.rfind(" ("), label.rfind(" ["))
        if cut > 0 and any(c.isdigit() for c in label[cut:]):
            label = label[:cut]
    label = label.strip("[]*")
    words = label.split(" ")
    if 1 <= len(words) <= 3 and all(
        w[:1].isupper() and all(c.isalpha() or c in "'-.\u2019" for c in w) for w in words
    ):
        return label
    return None


def asked_names(text: str, tokens: Sequence[tuple[str, int, int]]) -> tuple[str, ...]:
    """The names a question (:func:`is_question`) mentions, in order: its terms written with a
    capital inside a sentence. ``()`` for a keyword query."""
    if not is_question(text, [t[0] for t in tokens]):
        return ()
    out: dict[str, None] = {}
    for term, start, _ in tokens:
        if text[start : start + 1].isupper() and not _sentence_start(text, start):
            out[term] = None
    return tuple(out)


def asks_speaker(words: Sequence[str]) -> bool:
    """True if the query's terms ask what the user side said, asked or wanted.

    Two set tests over the terms; for Chinese, whose terms are bigrams, a role or
    verb is found as a term of the query (``客户`` is one).
    """
    return not USER_ROLES.isdisjoint(words) and not USER_VERBS.isdisjoint(words)


def temporal_terms(words: Sequence[str], text: str = "") -> list[str]:
    """``[TEMPORAL_TERM]`` if a document (its terms *words*, its *text*) states a time, else ``[]``.

    Bounded and linear: one set test over the words, one anchored match per
    term starting with a digit, one scan of *text* for a clock time.
    """
    if not TEMPORAL_WORDS.isdisjoint(words):
        return [TEMPORAL_TERM]
    fullmatch = _TIME_SHAPE.fullmatch
    for w in words:
        if w[:1].isdigit() and fullmatch(w):
            return [TEMPORAL_TERM]
    return [TEMPORAL_TERM] if _CLOCK.search(text) else []


def number_terms(words: Sequence[str]) -> list[str]:
    """``[NUMBER_TERM]`` if a document's terms state a number (a term starting with a digit, or
    a word of :data:`NUMBER_WORDS`), else ``[]``. One set test and one look at each term."""
    if not NUMBER_WORDS.isdisjoint(words) or any(w[:1].isdigit() for w in words):
        return [NUMBER_TERM]
    return []


_CLOSERS = "\"')]}\u201d\u2019\u00bb\u300d\u300f\uff09"


def ask_terms(text: str) -> list[str]:
    """``[ASK_TERM]`` if *text* ends with a question mark (``?`` or ``？``), after trailing
    blanks and closing quotes or brackets (``…tomorrow?"``). Reads its last 64 characters."""
    end = text[-64:].rstrip().rstrip(_CLOSERS).rstrip()
    return [ASK_TERM] if end.endswith(("?", "\uff1f")) else []


def asks_amount(words: Sequence[str]) -> bool:
    """True if the query's terms (in order) ask how much, how many, how long, or a price."""
    if not _AMOUNT_WORDS.isdisjoint(words):
        return True
    return any(pair in _AMOUNT_PAIRS for pair in zip(words, words[1:], strict=False))


def is_question(text: str, words: Sequence[str]) -> bool:
    """True if a query (its *text* and terms) is a question: it has a question mark or a
    function word."""
    return "?" in text or "？" in text or not FUNCTION_WORDS.isdisjoint(words)


def asks_order(words: Sequence[str]) -> int:
    """1 if the query's terms ask how things ended, -1 how they began, else 0 (or both)."""
    late = not LATE_WORDS.isdisjoint(words)
    early = not EARLY_WORDS.isdisjoint(words)
    return int(late) - int(early)


def asks_reaction(words: Sequence[str]) -> bool:
    """True if the query's terms ask how someone reacted or replied (a word of
    :data:`REACTION_WORDS`)."""
    return not REACTION_WORDS.isdisjoint(words)


def asks_when(words: Sequence[str]) -> bool:
    """True if the query's terms (in order) ask when something happened."""
    if not _WHEN_WORDS.isdisjoint(words):
        return True
    return any(pair in _WHEN_PAIRS for pair in zip(words, words[1:], strict=False))


def term_weights(text: str, tokens: Sequence[tuple[str, int, int]]) -> dict[str, float]:
    """The weight of each function-word or role-word term of a query (terms not listed weigh 1).

    *tokens* are the query's ``(term, start, end)`` in *text*. Nothing is
    down-weighted unless some term of the query is not a function word; role
    words (:data:`ROLES`) only in a question (a query with a question mark or a
    function word) that has a word of neither kind.
    """
    if all(t[0] in FUNCTION_WORDS for t in tokens):
        return {}
    question = is_question(text, [t[0] for t in tokens])
    roles = question and any(t[0] not in FUNCTION_WORDS and t[0] not in ROLES for t in tokens)
    out: dict[str, float] = {}
    if question:
        subjects = {tokens[i][0] for i in range(len(tokens)) if _is_subject(text, tokens, i)}
        if subjects and any(
            t[0] not in FUNCTION_WORDS and t[0] not in ROLES and t[0] not in subjects
            for t in tokens
        ):
            out.update(dict.fromkeys(subjects, SUBJECT_WEIGHT))
    names: set[str] = set()
    for i, (term, start, end) in enumerate(tokens):
        if roles and term in ROLES:
            out[term] = FUNCTION_WEIGHT
            continue
        if term not in FUNCTION_WORDS:
            continue
        written = text[start:end]
        if i and written[:1].isupper() and not _sentence_start(text, start):
            names.add(term)  # "May", "Will" inside a question: a name, not a function word
        else:
            out[term] = FUNCTION_WEIGHT
    for term in names:
        out.pop(term, None)
    return out


def _is_subject(text: str, tokens: Sequence[tuple[str, int, int]], i: int) -> bool:
    """True if query token *i* is a name that is the question's subject: written with a
    capital inside a sentence, neither a function nor a role word, and right after an
    auxiliary (``did Emma``) or in the possessive (``Emma's``)."""
    term, start, end = tokens[i]
    if not i or term in FUNCTION_WORDS or term in ROLES or not text[start : start + 1].isupper():
        return False
    if _sentence_start(text, start):
        return False
    possessive = text[end - 2 : end] in POSSESSIVE or text[end : end + 2] in POSSESSIVE
    return possessive or tokens[i - 1][0] in SUBJECT_AFTER


def _sentence_start(text: str, at: int) -> bool:
    """True if only spaces and quotes stand between *at* and the end of a sentence before it."""
    i = at - 1
    while i >= 0 and text[i] in " \t\n\"'“‘(":
        i -= 1
    return i < 0 or text[i] in ".?!。？！"
