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

Terms are at most :data:`MAX_TERM_CHARS` characters (longer words are cut),
and only the first :data:`MAX_ANALYZED_CHARS` characters of a text are
analyzed. Long texts are processed in blocks of about :data:`BLOCK_CHARS`
characters cut at whitespace, so memory stays bounded.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from array import array
from bisect import bisect_right
from typing import NamedTuple

from icu4py.breakers import WordBreaker

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
            wordlike = _WORDLIKE.search
            found = [norm[s:e] for s, e in segments]
            return [w[:MAX_TERM_CHARS] for w in found if wordlike(w)]
    return [t[0] for t in _normalized_tokens(text)[1]]


def query_terms(text: str) -> list[str]:
    """The distinct terms of a query, in order of first appearance.

    A single Han/Kana/Hangul character that a bigram of the query covers is
    left out: the bigram finds everything the pair finds, while a lone common
    ideograph (``的``) is in most Chinese documents and costs a long scan for
    nothing. A query that is one ideograph keeps it.
    """
    tokens = analyze(text)
    covered: set[int] = set()
    for t in tokens:
        if t.end - t.start == 2 and _RUNS.fullmatch(t.term) and len(t.term) == 2:
            covered.update((t.start, t.start + 1))
    out = [
        t.term
        for t in tokens
        if not (len(t.term) == 1 and t.start in covered and _SPECIAL.match(t.term))
    ]
    return list(dict.fromkeys(out))


def is_spaced(term: str) -> bool:
    """True if *term* is written with spaces between words (so a match needs word edges)."""
    return term.isascii() or _SPECIAL.search(term) is None
