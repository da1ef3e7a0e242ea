"""The one text pipeline of search: indexing and querying both go through :func:`analyze`.

Steps, in order (docs/search.md says why):

1. **Normalize**: Unicode NFKC, then case folding (``"ＡＢＣ"`` and ``"abc"``
   are the same term). Every normalized character remembers the span of the
   original text it came from, so token positions point into the *original*
   text (for highlighting) even when normalization changes lengths
   (``"ﬁ"`` → ``"fi"``, ``"ß"`` → ``"ss"``).
2. **Script runs**: the normalized text is cut where the script class changes
   (CJ = Han + Hiragana + Katakana, Hangul, Thai, Lao, Khmer, Myanmar, and
   everything else). The ICU word breaker does not break at script changes
   (``"abcภาษา"`` is one ICU word), so the runs are joined with ``"\\n"``,
   around which ICU always breaks (UAX #29 WB3a/WB3b), and the whole text
   goes through *one* break iterator. Han and Kana stay in one class because
   ICU's Chinese/Japanese dictionary segments them together
   (``"行きます"`` → ``行き``/``ます``).
3. **Words**: ICU word segmentation (``icu4py.breakers.WordBreaker``, root
   locale); only word-like segments are kept (those with a letter, digit or
   ideograph); punctuation, spaces, symbols and emoji are dropped.
4. **CJK bigrams**: inside Han/Kana/Hangul runs every pair of adjacent
   letters is a term too (``部署地区`` → ``部署 署地 地区``), so text is found
   even where the dictionary splits a query and a document differently; a
   bigram identical to the word at the same position is not repeated.
5. **Stems** (:func:`index_terms`, :func:`query_plan`): with a
   :class:`~storage.search.morphology.Morphology`, a word of a language's
   script also gives a stem term (``keybindings`` → ``\\x01english:keybind``)
   unless it is camelCase or a path component (next to ``/`` or ``\\``);
   words with digits, underscores or dots are never stemmed, and stem terms
   do not count in a document's length.

Terms are at most :data:`MAX_TERM_CHARS` characters (longer words are cut),
and only the first :data:`MAX_ANALYZED_CHARS` characters of a text are
analyzed. Long texts are processed in blocks of about :data:`BLOCK_CHARS`
characters cut at whitespace, so memory stays bounded.
"""

from __future__ import annotations

import functools
import itertools
import re
import unicodedata
from array import array
from bisect import bisect_right
from typing import NamedTuple

from icu4py.breakers import WordBreaker

from storage.search.morphology import CAMEL, NAMES, Morphology, QueryStem, part_term
from storage.search.questions import (
    POSSESSIVE,
    SPEAKER_MARK,
    ask_terms,
    asked_names,
    asks_amount,
    asks_order,
    asks_reaction,
    asks_speaker,
    asks_when,
    is_question,
    number_terms,
    speaker_label,
    temporal_terms,
    term_weights,
)
from storage.search.synonyms import lookups_of, past_forms, past_verb, plural_forms, synonyms
from storage.search.variants import variants

MAX_TERM_CHARS = 64
"""Longest term kept; longer words are cut to this many characters."""
MAX_ANALYZED_CHARS = 1 << 20
"""Only the first 1,048,576 characters of a text are analyzed (indexed or searched)."""
BLOCK_CHARS = 1 << 16
"""Texts longer than this are analyzed in blocks cut at whitespace."""

LOCALE = "root"
"""The ICU locale of word breaking: root, the same rules whatever the language."""

_CJ = (
    "\u2e80-\u2fdf\u3005-\u3007\u3021-\u3029\u3031-\u3035\u3038-\u303c"
    "\u3041-\u309f\u30a0-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
    "\U00020000-\U0003134f"
)
_HANGUL = "\u1100-\u11ff\u3131-\u318e\ua960-\ua97f\uac00-\ud7a3\ud7b0-\ud7ff"
_THAI = "\u0e00-\u0e7f"
_LAO = "\u0e80-\u0eff"
_KHMER = "\u1780-\u17ff\u19e0-\u19ff"
_MYANMAR = "\u1000-\u109f\ua9e0-\ua9ff\uaa60-\uaa7f"

_RUNS = re.compile(
    f"(?P<cj>[{_CJ}]+)|(?P<hangul>[{_HANGUL}]+)|(?P<thai>[{_THAI}]+)"
    f"|(?P<lao>[{_LAO}]+)|(?P<khmer>[{_KHMER}]+)|(?P<myanmar>[{_MYANMAR}]+)"
)
_SPECIAL = re.compile(f"[{_CJ}{_HANGUL}{_THAI}{_LAO}{_KHMER}{_MYANMAR}]")
_BIGRAM_CLASSES = frozenset({"cj", "hangul"})
_WORDLIKE = re.compile(r"[^\W_]")
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")
_BLOCK_CUT = re.compile(r"\s")
_MID = ".:'\u2019\u00b7"
"""Characters that join two word characters into one word (ICU's MidLetter, MidNumLet)."""
_PATH_MARK = re.compile(r"[\\.:_@0-9]")
_PART_JOIN = re.compile(r"[_.:]+")
"""Runs of the characters that join the parts of one ICU word into an identifier."""
_RUN_EDGES = "\"'`()[]{}<>,;:.!?*"
"""Punctuation stripped from the ends of a run before :func:`_in_name` looks at it."""
JOINERS = "/\\-"
"""Characters that join the parts of paths and identifiers (and, in prose, words)."""
PATH_SCAN = 256
"""Characters looked at on each side of a joiner to tell a name from ``and/or``."""
_CASES = bytes(
    ord("a") if 97 <= c <= 122 else ord("A") if 65 <= c <= 90 else ord("/") if c in b"/\\-" else 32
    for c in range(256)
)
"""ASCII bytes to ``a`` (lowercase), ``A`` (uppercase), ``/`` (joiners) or a space."""
# Characters that join the preceding one when normalizing: combining marks are
# found with unicodedata.combining; these have class 0 but still compose.
_JOINERS = re.compile("[\u1160-\u11ff\ud7b0-\ud7ff\ufe00-\ufe0f\u200c\u200d\u3099\u309a]")


class Token(NamedTuple):
    """One term of a text and where it stands in the original text: ``text[start:end]``."""

    term: str
    start: int
    end: int


class Normalized(NamedTuple):
    """Normalized text and, unless the mapping is the identity, original spans per character.

    Character *i* of :attr:`text` came from ``original[starts[i]:ends[i]]``;
    when :attr:`starts` is None, character *i* came from ``original[i]``.
    """

    text: str
    starts: array[int] | None
    ends: array[int] | None

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The original span of normalized characters ``[start, end)`` (``end > start``)."""
        if self.starts is None or self.ends is None:
            return start, end
        return self.starts[start], self.ends[end - 1]


def normalize(text: str) -> Normalized:
    """NFKC and case folding of *text*, keeping a map back to original offsets."""
    if text.isascii():
        return Normalized(text.lower(), None, None)
    if unicodedata.is_normalized("NFKC", text):
        folded = text.casefold()
        # Full case folding maps every character to one or more: equal lengths
        # mean one character each, so positions are unchanged.
        if len(folded) == len(text) and unicodedata.is_normalized("NFKC", folded):
            return Normalized(folded, None, None)
    # Character by character (cached), which is right unless characters combine.
    parts = list(map(_fold_char, text))
    joined = "".join(parts)
    if unicodedata.is_normalized("NFKC", joined):
        if len(joined) == len(text):
            return Normalized(joined, None, None)
        starts = array("q")
        ends = array("q")
        for i, part in enumerate(parts):
            starts.extend([i] * len(part))
            ends.extend([i + 1] * len(part))
        return Normalized(joined, starts, ends)
    return _normalize_clusters(text)


@functools.lru_cache(maxsize=1 << 16)
def _fold_char(ch: str) -> str:
    return _fold(ch)


def _fold(piece: str) -> str:
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", piece).casefold())


def _normalize_clusters(text: str) -> Normalized:
    """The general case: each base character is folded together with the marks after it."""
    out: list[str] = []
    starts = array("q")
    ends = array("q")
    n = len(text)
    i = 0
    combining = unicodedata.combining
    joiner = _JOINERS.match
    while i < n:
        j = i + 1
        while j < n and (combining(text[j]) or joiner(text, j)):
            j += 1
        folded = _fold(text[i:j])
        out.append(folded)
        starts.extend([i] * len(folded))
        ends.extend([j] * len(folded))
        i = j
    return Normalized("".join(out), starts, ends)


def _utf16_to_index(text: str) -> array[int] | None:
    """Map UTF-16 code unit offsets of *text* to character offsets (None if identical)."""
    if text.isascii() or not _ASTRAL.search(text):
        return None
    table = array("q")
    for i, ch in enumerate(text):
        table.append(i)
        if ord(ch) > 0xFFFF:
            table.append(i)  # the low surrogate: no boundary can fall here
    table.append(len(text))
    return table


def _clitic(word: str) -> str:
    """*word* without a trailing ``'s`` after a letter (``melanie’s`` → ``melanie``).

    As SQLite FTS5 and Lucene's English analyzer do: a name asked about in the
    possessive ("what is Caroline's job?") is the name the turns say.
    """
    if word[-2:] in POSSESSIVE and len(word) > 2 and word[-3].isalpha():
        return word[:-2]
    return word


def _words(found: list[str]) -> list[str]:
    """The terms of ICU's segments *found*: word-like ones, clitic cut, at most 64 characters."""
    wordlike = _WORDLIKE.search
    return [_clitic(w)[:MAX_TERM_CHARS] for w in found if wordlike(w)]


def _word_spans(norm: str, base: int, out: list[tuple[str, int, int]]) -> None:
    """Append ``(term, start, end)`` in normalized offsets (+ *base*) for one block."""
    first = len(out)
    # Pieces alternate between "other" text and special-script runs.
    pieces: list[str] = []
    piece_starts: list[int] = []  # normalized offset of each piece
    bigram_pieces: list[int] = []  # indexes of Han/Kana/Hangul pieces
    pos = 0
    runs = () if norm.isascii() or not _SPECIAL.search(norm) else _RUNS.finditer(norm)
    for m in runs:
        s, e = m.span()
        if s > pos:
            pieces.append(norm[pos:s])
            piece_starts.append(pos)
        if m.lastgroup in _BIGRAM_CLASSES:
            bigram_pieces.append(len(pieces))
        pieces.append(norm[s:e])
        piece_starts.append(s)
        pos = e
    if pos < len(norm) or not pieces:
        pieces.append(norm[pos:])
        piece_starts.append(pos)

    joined = "\n".join(pieces) if len(pieces) > 1 else pieces[0]
    units = _utf16_to_index(joined)
    wordlike = _WORDLIKE.search
    segments = WordBreaker(joined, LOCALE).segments()
    if len(pieces) == 1 and units is None:
        # The common case (one script class, no astral characters): offsets are direct.
        for s, e in segments:
            seg = joined[s:e]
            if wordlike(seg):
                seg = _clitic(seg)
                e = s + len(seg)
                if e - s > MAX_TERM_CHARS:
                    seg = seg[:MAX_TERM_CHARS]
                    e = s + MAX_TERM_CHARS
                out.append((seg, s + base, e + base))
    else:
        # Start of each piece in the joined text: one separator before each but the first.
        joined_starts = [s + k for k, s in enumerate(piece_starts)]
        for s16, e16 in segments:
            if units is not None:
                s, e = units[s16], units[e16]
            else:
                s, e = s16, e16
            seg = joined[s:e]
            if not wordlike(seg):
                continue
            seg = _clitic(seg)
            e = s + len(seg)
            k = bisect_right(joined_starts, s) - 1
            if e - s > MAX_TERM_CHARS:
                seg = seg[:MAX_TERM_CHARS]
                e = s + MAX_TERM_CHARS
            out.append((seg, s - k + base, e - k + base))
    if not bigram_pieces:
        return
    # A two-character word is the bigram at its position: skip those positions.
    taken = {t[1] for t in out[first:] if t[2] - t[1] == 2}
    for k in bigram_pieces:
        piece = pieces[k]
        offset = piece_starts[k] + base
        letters = piece.isalnum()
        for i in range(len(piece) - 1):
            at = offset + i
            if at not in taken:
                pair = piece[i : i + 2]
                if letters or pair.isalnum():
                    out.append((pair, at, at + 2))


def _blocks(norm: str) -> list[tuple[int, int]]:
    """Cut *norm* into blocks of about BLOCK_CHARS, at whitespace when there is some."""
    n = len(norm)
    if n <= BLOCK_CHARS:
        return [(0, n)]
    out = []
    start = 0
    while start < n:
        end = min(n, start + BLOCK_CHARS)
        if end < n:
            window = norm[end - BLOCK_CHARS // 8 : end]
            cut = -1
            for m in _BLOCK_CUT.finditer(window):
                cut = m.end()
            if cut > 0:
                end = end - BLOCK_CHARS // 8 + cut
        out.append((start, end))
        start = end
    return out


def _normalized_tokens(text: str) -> tuple[Normalized, list[tuple[str, int, int]]]:
    if len(text) > MAX_ANALYZED_CHARS:
        text = text[:MAX_ANALYZED_CHARS]
    norm = normalize(text)
    spans: list[tuple[str, int, int]] = []
    if not norm.text:
        return norm, spans
    for start, end in _blocks(norm.text):
        _word_spans(norm.text[start:end], start, spans)
    return norm, spans


def analyze(text: str) -> list[Token]:
    """The terms of *text* with their spans in the original *text*, in order of position."""
    norm, spans = _normalized_tokens(text)
    spans.sort(key=lambda t: (t[1], t[2]))
    if norm.starts is None:
        return [Token(*t) for t in spans]
    return [Token(term, *norm.span(s, e)) for term, s, e in spans]


def terms(text: str) -> list[str]:
    """The terms of *text* (with repeats), as :func:`analyze` finds them, without positions."""
    if len(text) <= BLOCK_CHARS:
        norm = normalize(text).text
        if norm.isascii() or not (_SPECIAL.search(norm) or _ASTRAL.search(norm)):
            # One script class and no surrogate pairs: ICU's words as they are.
            segments = WordBreaker(norm, LOCALE).segments() if norm else ()
            return _words([norm[s:e] for s, e in segments])
    return [t[0] for t in _normalized_tokens(text)[1]]


def _query_tokens(text: str, tokens: list[Token] | None = None) -> list[Token]:
    """The tokens of a query that are looked up (see :func:`query_terms`), with repeats.

    *tokens* are ``analyze(text)`` when the caller has them already.
    """
    if tokens is None:
        tokens = analyze(text)
    covered: set[int] = set()
    for t in tokens:
        if t.end - t.start == 2 and _RUNS.fullmatch(t.term) and len(t.term) == 2:
            covered.update((t.start, t.start + 1))
    return [
        t
        for t in tokens
        if not (len(t.term) == 1 and t.start in covered and _SPECIAL.match(t.term))
    ]


def query_terms(text: str) -> list[str]:
    """The distinct terms of a query, in order of first appearance.

    A single Han/Kana/Hangul character that a bigram of the query covers is
    left out: the bigram finds everything the pair finds, while a lone common
    ideograph (``的``) is in most Chinese documents and costs a long scan for
    nothing. A query that is one ideograph keeps it.
    """
    return list(dict.fromkeys(t.term for t in _query_tokens(text)))


def query_plan(
    text: str, morphology: Morphology | None, max_terms: int | None = None
) -> tuple[list[str], list[tuple[str, QueryStem]]]:
    """The exact terms of a query (:func:`query_terms`, at most *max_terms*) and its extra lookups.

    Each extra lookup is ``(source term, what it adds)``: for every exact term
    that is a word to stem where it stands in the query (by the rules
    :func:`index_terms` applies to documents), the terms that find the other
    words with its stem (:meth:`~storage.search.morphology.Morphology.query_stems`);
    for every exact term, its part term (kind ``"part"``: the word inside
    identifiers); each single Han/Kana/Hangul character that
    :func:`query_terms` leaves out, as its own source (kind ``"char"``); and a word's
    other writings (kind ``"variant"``: ``eight`` ↔ ``8``, ``neighbour`` ↔ ``neighbor``,
    :mod:`storage.search.variants`) with their stem terms; and, from WordNet
    (:mod:`storage.search.synonyms`), a word's synonyms (kind ``"synonym"``), its irregular
    plurals or singular (``"plural"``) and, for the main verb after ``did``, its past forms
    (``"past"``), none for a name (a word with a capital after the query's first word).
    """
    every = analyze(text)
    tokens = _query_tokens(text, every)
    exact = list(dict.fromkeys(t.term for t in tokens))
    if max_terms is not None:
        exact = exact[:max_terms]
    kept = set(exact)
    # Every exact word (outside Han/Kana/Hangul) is also looked up as a part of identifiers.
    extra = [
        (term, QueryStem(part_term(term), True, False, "part"))
        for term in exact
        if not (_PART_JOIN.search(term) or _SPECIAL.search(term))
    ]
    # Ideographs the bigrams cover are looked up too, at a low weight: a document
    # may hold the character in another word (鞋 of 跑鞋 for 运动鞋).
    lone = dict.fromkeys(
        t.term for t in every if len(t.term) == 1 and t.term not in kept and _SPECIAL.match(t.term)
    )
    extra.extend((c, QueryStem(c, False, False, "char")) for c in lone)
    # Other writings of the same word, as much as the word: a number in words or digits
    # (eight ↔ 8), British or American spelling (neighbour ↔ neighbor); not inside a name.
    others: dict[str, tuple[str, ...]] = {}
    for t in tokens:
        if t.term in kept and t.term not in others and _plain_word(text, t.start, t.end):
            others[t.term] = variants(t.term)
    for term, found in others.items():
        extra.extend(lookups_of(term, found, "variant", kept, morphology))
    # Synonyms (faulty → defective; ranking counts them only for a word the index lacks in
    # every form), irregular plurals (children ↔ child), and the past forms of a question's
    # main verb after "did" (go → went); none for a name (a capital after the first word).
    named = {t.term for i, t in enumerate(tokens) if i and not text[t.start : t.end].islower()}
    for term in others:
        if term not in named:
            extra.extend(lookups_of(term, synonyms(term), "synonym", kept, morphology))
            extra.extend(lookups_of(term, plural_forms(term), "plural", kept, morphology))
    verb = past_verb([t.term for t in tokens], others.keys() - named)
    if verb is not None:
        extra.extend(lookups_of(verb, past_forms(verb), "past", kept, morphology))
    if morphology is None:
        return exact, extra
    plain: dict[str, None] = {}
    for t in tokens:
        if t.term in kept and t.term not in plain and _plain_word(text, t.start, t.end):
            plain[t.term] = None
    stems = [(term, q) for term in exact if term in plain for q in morphology.query_stems(term)]
    # The stem as a word of its own is looked up as a part too (seating → seat_type).
    extra.extend(
        (term, QueryStem(part_term(q.term), True, False, "part" if q.kind == "stem" else q.kind))
        for term, q in stems
        if not q.stem
    )
    return exact, stems + extra


class QueryIntent(NamedTuple):
    """What a query's words are worth and what it asks (:mod:`storage.search.questions`)."""

    weights: dict[str, float]
    """The weight of each function-word term (terms not listed weigh 1)."""
    when: bool
    """The query asks when something happened."""
    speaker: bool
    """The query asks what the user side said, asked or wanted."""
    order: int = 0
    """1 if the query asks how things ended, -1 how they began, else 0."""
    names: tuple[str, ...] = ()
    """The speaker terms (:data:`~storage.search.questions.SPEAKER_MARK` and a name) of the
    names the question mentions, in order: the first a turn's label carries is asked about."""
    reaction: bool = False
    """The question asks how someone reacted or replied."""
    amount: bool = False
    """The question asks how much, how many or how long."""


def query_intent(text: str) -> QueryIntent:
    """What a query's words are worth and whether it asks *when*, about the user's words,
    how things ended or began, about a speaker it names, or how someone reacted."""
    tokens = _query_tokens(text)
    spans = [(t.term, t.start, t.end) for t in tokens]
    weights = term_weights(text, spans)
    words = [t.term for t in tokens]
    question = is_question(text, words)
    order = asks_order(words) if question else 0
    names = tuple(SPEAKER_MARK + name for name in asked_names(text, spans))
    reaction = question and asks_reaction(words)
    amount = question and asks_amount(words)
    return QueryIntent(
        weights, asks_when(words), asks_speaker(words), order, names, reaction, amount
    )


def index_terms(text: str, morphology: Morphology | None) -> tuple[list[str], list[str]]:
    """The terms of *text* (as :func:`terms` gives them) and the extra terms its words add.

    A word adds the stem terms :meth:`~storage.search.morphology.Morphology.stems`
    gives it unless it is camelCase or a path component (:func:`_plain_word`).
    A word joined with ``_``, ``.`` or ``:`` (``meal_preference``,
    ``order.status``) adds a part term for each of its parts
    (:func:`~storage.search.morphology.part_term`) and the parts' stem terms.
    A text that states a time adds :data:`~storage.search.questions.TEMPORAL_TERM`
    (:func:`~storage.search.questions.temporal_terms`), one that states a number
    :data:`~storage.search.questions.NUMBER_TERM`
    (:func:`~storage.search.questions.number_terms`); a turn that starts with its
    speaker's label (``Maya: …``, :func:`~storage.search.questions.speaker_label`) adds
    a :data:`~storage.search.questions.SPEAKER_MARK` term for each word of the name.
    Extra terms do not count in a document's length.
    """
    words, extra = _word_terms(text, morphology)
    if any(_PART_JOIN.search(w) for w in words):
        extra = extra + _part_terms(words, morphology)
    label = speaker_label(text)
    if label is not None:
        extra = extra + [SPEAKER_MARK + name for name in terms(label)]
    marks = temporal_terms(words, text[:MAX_ANALYZED_CHARS]) + number_terms(words)
    return words, extra + marks + ask_terms(text)


def identifier_parts(word: str) -> list[str]:
    """The parts of a *word* joined with ``_``, ``.`` or ``:`` that hold a letter or digit.

    ``meal_preference`` → ``meal``, ``preference``; a word without joiners has none.
    """
    if not _PART_JOIN.search(word):
        return []
    wordlike = _WORDLIKE.search
    return [p for p in _PART_JOIN.split(word) if p and p != word and wordlike(p)]


def _part_terms(words: list[str], morphology: Morphology | None) -> list[str]:
    """The part terms (and the parts' stem terms) of the identifiers among *words*."""
    join = _PART_JOIN.search
    return list(itertools.chain.from_iterable(_word_parts(w, morphology) for w in words if join(w)))


@functools.lru_cache(maxsize=1 << 14)
def _word_parts(word: str, morphology: Morphology | None) -> tuple[str, ...]:
    """The part terms and the parts' stem terms of one identifier (cached: JSON repeats keys)."""
    out: list[str] = []
    for part in identifier_parts(word):
        out.append(part_term(part))
        if morphology is not None:
            out.extend(morphology.stems(part))
    return tuple(out)


def _word_terms(text: str, morphology: Morphology | None) -> tuple[list[str], list[str]]:
    """The terms of *text* and the stem terms its plain words add (see :func:`index_terms`)."""
    if morphology is None:
        return terms(text), []
    # Only a text with a camelCase joint or a joiner needs its words' positions.
    names = _has_names(text)
    norm = normalize(text) if len(text) <= BLOCK_CHARS else None
    spans: list[tuple[str, int, int]] | None = None
    if norm is not None and (
        norm.text.isascii() or not (_SPECIAL.search(norm.text) or _ASTRAL.search(norm.text))
    ):
        # One script class and no surrogate pairs: ICU's words as they are.
        n = norm.text
        if not n:
            return [], []
        out = _words([n[s:e] for s, e in WordBreaker(n, LOCALE).segments()])
    else:
        norm, spans = _normalized_tokens(text)
        out = [t[0] for t in spans]
    found = list(map(morphology._cache.get, out))
    try:
        stems = list(itertools.chain.from_iterable(found))  # type: ignore[arg-type]
    except TypeError:  # words not stemmed before
        found = [
            f if f is not None else morphology.stems(w) for f, w in zip(found, out, strict=True)
        ]
        stems = list(itertools.chain.from_iterable(found))  # type: ignore[arg-type]
    if not names or not stems:
        return out, stems
    if spans is None and norm.starts is None:
        # Positions are the original's: only the words at a joint or joiner can be names.
        for word in _name_words(text, norm.text):
            for stem in morphology.stems(word):
                if stem in stems:
                    stems.remove(stem)
        return out, stems
    if spans is None:
        spans = _normalized_tokens(text)[1]
    stems = []
    for (_, s, e), w in zip(spans, out, strict=True):
        found_w = morphology.stems(w)
        if found_w and _plain_word(text, *norm.span(s, min(e, s + MAX_TERM_CHARS))):
            stems.extend(found_w)
    return out, stems


def _has_names(text: str) -> bool:
    """True if *text* has a joiner or a camelCase joint (:data:`NAMES` matches)."""
    if text.isascii():
        shape = text.encode("ascii").translate(_CASES)
        return b"/" in shape or b"aA" in shape
    return NAMES.search(text) is not None


def _name_words(text: str, norm: str) -> list[str]:
    """The words :func:`_plain_word` rejects in *text*, one per occurrence, as terms.

    *norm* is *text* normalized with the same length and positions. The word
    at a camelCase joint or next to a joiner is found by ICU's word rules as far
    as words that can be stemmed need them (a larger run holds a digit, dot or
    colon, so it has no stems either way).
    """
    out: dict[tuple[int, int], str] = {}
    for m in NAMES.finditer(text):
        p = m.start()
        # A joiner at p: the words ending at p and starting at p + 1; a joint: its word.
        if m.end() - p == 1 and not _in_name(text, p):
            continue
        for q in (p - 1, p + 1) if m.end() - p == 1 else (p,):
            if 0 <= q < len(norm) and _word_char(norm[q]):
                lo, hi = q, q + 1
                # ICU's word rules, as far as they matter here: letters, digits, marks
                # and "_" join; ".", ":" and apostrophes join two letters, or two digits.
                while lo > 0 and (
                    _word_char(norm[lo - 1])
                    or (lo > 1 and _mid_joins(norm[lo - 2], norm[lo - 1], norm[lo]))
                ):
                    lo -= 1
                while hi < len(norm) and (
                    _word_char(norm[hi])
                    or (hi + 1 < len(norm) and _mid_joins(norm[hi - 1], norm[hi], norm[hi + 1]))
                ):
                    hi += 1
                out[lo, hi] = norm[lo:hi][:MAX_TERM_CHARS]
    return list(out.values())


def _mid_joins(before: str, mid: str, after: str) -> bool:
    """True if *mid* joins *before* and *after* into one word (UAX #29 WB6/7, WB11/12)."""
    if mid not in _MID:
        return False
    if _letter(before) and _letter(after):
        return True
    return mid != ":" and before.isdigit() and after.isdigit()


def _letter(ch: str) -> bool:
    return ch.isalpha() or unicodedata.category(ch)[0] == "M"


def _word_char(ch: str) -> bool:
    return ch.isalnum() or ch == "_" or unicodedata.category(ch)[0] == "M"


def _plain_word(text: str, start: int, end: int) -> bool:
    """True unless ``text[start:end]`` is camelCase or a part of a path or identifier.

    Such words are names (``keyBinding``, ``src/runner.py``, ``ORD-1234``):
    they are found by their exact form only. A word next to ``/``, ``\\`` or
    ``-`` is part of a name when :func:`_in_name` says so;
    ``returned/exchanged`` and ``follow-up`` are prose.
    """
    if start > 0 and text[start - 1] in JOINERS and _in_name(text, start - 1):
        return False
    if end < len(text) and text[end] in JOINERS and _in_name(text, end):
        return False
    word = text[start:end]
    return word.islower() or word.isupper() or CAMEL.search(word) is None


def _in_name(text: str, at: int) -> bool:
    """True if the joiner ``text[at]`` (``/ \\ -``) is in a path, URL or identifier.

    The run of non-space characters around it (without the punctuation around
    a run) is a name if it starts with ``/``, ``\\`` or ``~``, or holds a
    backslash, dot, colon, underscore, ``@`` or digit (``src/app.py``,
    ``/usr/bin``, ``api/v1``, ``https://…``, ``ORD-1234``); ``and/or`` and
    ``follow-up`` are not.
    """
    lo = at
    while lo > 0 and at - lo < PATH_SCAN and not text[lo - 1].isspace():
        lo -= 1
    hi = at + 1
    while hi < len(text) and hi - at < PATH_SCAN and not text[hi].isspace():
        hi += 1
    run = text[lo:hi].strip(_RUN_EDGES)
    return run[:1] in ("/", "\\", "~") or _PATH_MARK.search(run) is not None


def is_spaced(term: str) -> bool:
    """True if *term* is written with spaces between words (so a match needs word edges)."""
    return term.isascii() or _SPECIAL.search(term) is None
