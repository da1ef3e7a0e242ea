"""Morphology of lexical search: Snowball stemming of the words of the index's languages.

An index is built for a list of Snowball languages (:data:`DEFAULT_LANGUAGES`:
English), stored in its state; a different list makes the next
:meth:`~storage.search.index.LexicalIndex.apply_intents` rebuild it. A word is
stemmed for a language only if every character of it belongs to that
language's script (letters and combining marks; Latin words may hold an
apostrophe), so digits, underscores, dots, CJK and other scripts never are; the
text pipeline (:mod:`storage.search.text`) also leaves camelCase words and the
parts of paths and identifiers alone (``src/app.py``, ``ORD-1234``).

A stem becomes a *stem term* of its own, ``"\\x01" + language + ":" + stem``,
next to the word's exact term, and only where the stem differs from the word
(a word that is its own stem is found through its exact term). A query word
``q`` with stem ``s`` therefore looks up its exact term, the stem term of
``s``, and the exact term ``s`` when ``s`` is a word of its own (its stem is
``s``): together those find every word that stems to ``s``. Stemming is
PyStemmer (the Snowball algorithms in C); results are cached per word. An English
query word also looks up its derivational relatives (``departure`` for ``depart``,
:mod:`storage.search.derivation`), which the stemmer does not join.
"""

from __future__ import annotations

import functools
import os
import re
import threading
import unicodedata
from collections.abc import Iterable
from typing import NamedTuple

import Stemmer

from protocol.errors import RequestError
from storage.search.derivation import derived

DEFAULT_LANGUAGES = ("english",)
"""The languages an index is built for unless told otherwise (or by :data:`LANGUAGES_ENV`)."""
LANGUAGES_ENV = "MORPHZ_SEARCH_LANGUAGES"
"""Environment variable with the default languages: comma-separated names; ``none`` for none."""
STEM_MARK = "\x01"
"""First character of every stem term: no word term can start with it."""
PART_MARK = "\x02"
"""First character of every identifier-part term (:func:`part_term`)."""
CACHE_WORDS = 1 << 18
"""Words whose stems are cached per :class:`Morphology`; the cache is emptied when full."""

# Code point ranges of each script (letters and marks of these ranges are kept).
_SCRIPT_RANGES: dict[str, tuple[tuple[int, int], ...]] = {
    "latin": ((0x41, 0x5A), (0x61, 0x7A), (0xC0, 0x24F), (0x300, 0x36F), (0x1E00, 0x1EFF)),
    "cyrillic": ((0x400, 0x52F), (0x1C80, 0x1C8F), (0x2DE0, 0x2DFF), (0xA640, 0xA69F)),
    "greek": ((0x300, 0x36F), (0x370, 0x3FF), (0x1F00, 0x1FFF)),
    "armenian": ((0x531, 0x58A), (0xFB13, 0xFB17)),
    "hebrew": ((0x591, 0x5F4), (0xFB1D, 0xFB4F)),
    "arabic": (
        (0x600, 0x6FF),
        (0x750, 0x77F),
        (0x8A0, 0x8FF),
        (0xFB50, 0xFDFF),
        (0xFE70, 0xFEFF),
    ),
    "devanagari": ((0x900, 0x97F), (0xA8E0, 0xA8FF)),
    "tamil": ((0xB80, 0xBFF),),
}
_APOSTROPHES = "'\u2019"
"""Apostrophes a Latin word may hold (``customer's``); ``’`` is stemmed as ``'``."""

LANGUAGES: dict[str, tuple[str, tuple[str, ...]]] = {
    "arabic": ("ar", ("arabic",)),
    "armenian": ("hy", ("armenian",)),
    "basque": ("eu", ("latin",)),
    "catalan": ("ca", ("latin",)),
    "czech": ("cs", ("latin",)),
    "danish": ("da", ("latin",)),
    "dutch": ("nl", ("latin",)),
    "dutch_porter": ("", ("latin",)),
    "english": ("en", ("latin",)),
    "esperanto": ("eo", ("latin",)),
    "estonian": ("et", ("latin",)),
    "finnish": ("fi", ("latin",)),
    "french": ("fr", ("latin",)),
    "german": ("de", ("latin",)),
    "greek": ("el", ("greek",)),
    "hindi": ("hi", ("devanagari",)),
    "hungarian": ("hu", ("latin",)),
    "indonesian": ("id", ("latin",)),
    "irish": ("ga", ("latin",)),
    "italian": ("it", ("latin",)),
    "lithuanian": ("lt", ("latin",)),
    "nepali": ("ne", ("devanagari",)),
    "norwegian": ("no", ("latin",)),
    "persian": ("fa", ("arabic",)),
    "polish": ("pl", ("latin",)),
    "porter": ("", ("latin",)),
    "portuguese": ("pt", ("latin",)),
    "romanian": ("ro", ("latin",)),
    "russian": ("ru", ("cyrillic",)),
    "serbian": ("sr", ("cyrillic", "latin")),
    "sesotho": ("st", ("latin",)),
    "spanish": ("es", ("latin",)),
    "swedish": ("sv", ("latin",)),
    "tamil": ("ta", ("tamil",)),
    "turkish": ("tr", ("latin",)),
    "yiddish": ("yi", ("hebrew",)),
}
"""Snowball language → (ISO 639-1 code accepted as an alias, scripts its words are written in)."""

_ALIASES = {code: name for name, (code, _) in LANGUAGES.items() if code}
_AVAILABLE = frozenset(Stemmer.algorithms())


def _script_class(script: str) -> str:
    """A regex character class body of the letters and marks of *script*."""
    chars = []
    for lo, hi in _SCRIPT_RANGES[script]:
        for cp in range(lo, hi + 1):
            if unicodedata.category(chr(cp))[0] in "LM":
                chars.append(cp)
    # Compress consecutive code points into ranges.
    parts = []
    start = prev = chars[0]
    for cp in chars[1:] + [-1]:
        if cp == prev + 1:
            prev = cp
            continue
        parts.append(re.escape(chr(start)) + ("-" + re.escape(chr(prev)) if prev > start else ""))
        start = prev = cp
    return "".join(parts)


_CLASSES = {script: _script_class(script) for script in _SCRIPT_RANGES}
_WORD_OF: dict[str, re.Pattern[str]] = {
    script: re.compile(
        f"[{body}]+(?:[{_APOSTROPHES}][{body}]+)*" if script == "latin" else f"[{body}]+"
    )
    for script, body in _CLASSES.items()
}
WORDS = re.compile(
    "(?<!\\w)(?:[{0}]+(?:[{1}][{0}]+)*)(?!\\w)".format("".join(_CLASSES.values()), _APOSTROPHES)
)
"""Candidate words of any supported script in normalized text (for highlighting stem matches)."""


def _cased(category: str) -> str:
    """A regex character class body of the letters of *category* in every supported script."""
    out: list[str] = []
    for ranges in _SCRIPT_RANGES.values():
        for lo, hi in ranges:
            out.extend(
                re.escape(chr(cp))
                for cp in range(lo, hi + 1)
                if unicodedata.category(chr(cp)) in category.split()
            )
    return "".join(sorted(set(out)))


CAMEL = re.compile(f"[{_cased('Ll')}][{_cased('Lu Lt')}]")
"""A camelCase joint: a lowercase letter of a supported script, then an uppercase one."""
NAMES = re.compile(f"[/\\\\-]|{CAMEL.pattern}")
"""A joiner of names (``/ \\ -``) or a camelCase joint (a lowercase letter, then an uppercase)."""


def languages_from(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """The canonical language list for *value*: Snowball names, sorted, without repeats.

    *value* is a name (``"english"``), an ISO 639-1 code (``"en"``), a
    comma-separated list of them, or an iterable of them; ``()`` (or ``"none"``)
    turns stemming off; None means the default: :data:`LANGUAGES_ENV` if set,
    else :data:`DEFAULT_LANGUAGES`. An unknown language is a ``RequestError``
    with code ``bad_language``.
    """
    if value is None:
        env = os.environ.get(LANGUAGES_ENV)
        if env is None:
            return DEFAULT_LANGUAGES
        value = env
    if isinstance(value, str):
        names = [] if value.strip().lower() == "none" else value.split(",")
    else:
        names = list(value)
    out: set[str] = set()
    for raw in names:
        if not isinstance(raw, str):
            raise RequestError(f"a language is a name, not {raw!r}", code="bad_language")
        name = raw.strip().lower()
        if not name and isinstance(value, str):
            continue
        name = _ALIASES.get(name, name)
        if name not in LANGUAGES or name not in _AVAILABLE:
            known = ", ".join(sorted(n for n in LANGUAGES if n in _AVAILABLE))
            raise RequestError(
                f"no stemmer for language {raw!r}; use one of: {known} (or none)",
                code="bad_language",
            )
        out.add(name)
    return tuple(sorted(out))


class QueryStem(NamedTuple):
    """A term a query word adds for one language: its stem term, or its stem's word form."""

    term: str
    stem: bool
    """True for a stem term (``\\x01lang:stem``), False for the stem as a plain word."""
    with_word: bool
    """True if a document with the query word holds this term too (its stem is not the word)."""
    kind: str = "stem"
    """What the lookup is, which sets its weight in ranking: ``"stem"`` (another form of the
    word), ``"derived"`` (a word derived from it or it from, ``departure`` for ``depart``),
    ``"variant"`` (another writing of it, ``8`` for ``eight``, ``neighbor`` for ``neighbour``),
    ``"synonym"`` (``defective`` for ``faulty``), ``"past"`` (``went`` for the ``go`` of "when
    did she go"), ``"plural"`` (``children`` for ``child``; :mod:`storage.search.synonyms`),
    ``"part"`` (the word as a
    part of an identifier, :func:`part_term`) or ``"char"`` (one ideograph of a query word
    that bigrams alone would not find)."""


class Morphology:
    """Stemming of words for a fixed list of languages; safe to share between threads."""

    def __init__(self, languages: tuple[str, ...]) -> None:
        """Use :func:`morphology` (it validates the names and shares instances)."""
        self.languages = languages
        self._stemmers = [(lang, Stemmer.Stemmer(lang)) for lang in languages]
        self._words = [
            tuple(_WORD_OF[script] for script in LANGUAGES[lang][1]) for lang in languages
        ]
        self._lock = threading.Lock()  # PyStemmer's stemmers are not thread-safe
        self._cache: dict[str, tuple[str, ...]] = {}

    def _stem(self, k: int, word: str) -> str | None:
        """The stem of *word* in language *k*, or None if the word is not of its script."""
        if not any(p.fullmatch(word) for p in self._words[k]):
            return None
        with self._lock:
            return self._stemmers[k][1].stemWord(word.replace("\u2019", "'"))  # type: ignore[no-any-return]

    def stems(self, word: str) -> tuple[str, ...]:
        """The stem terms of a (normalized) *word*: one per language whose stem differs from it."""
        found = self._cache.get(word)
        if found is not None:
            return found
        out = []
        for k, (lang, _) in enumerate(self._stemmers):
            stem = self._stem(k, word)
            if stem and stem != word:
                out.append(stem_term(lang, stem))
        found = tuple(out)
        if len(self._cache) >= CACHE_WORDS:
            self._cache.clear()
        self._cache[word] = found
        return found

    def query_stems(self, word: str) -> list[QueryStem]:
        """What a query *word* looks up besides itself, so every word with its stem is found.

        Per language: the stem term, plus the stem as a word of its own when
        the stem is not *word* and is its own stem (words equal to their stem
        get no stem term, only their exact one). In English, also the word's
        derivational relatives (:mod:`storage.search.derivation`) and their stem terms.
        """
        out: list[QueryStem] = []
        for k, (lang, _) in enumerate(self._stemmers):
            stem = self._stem(k, word)
            if not stem:
                continue
            out.append(QueryStem(stem_term(lang, stem), True, stem != word))
            if stem != word and self._stem(k, stem) == stem:
                out.append(QueryStem(stem, False, False))
            if lang == "english":
                # Derivational relatives (departure → depart), with the words of their stems
                # (departs) and identifier parts (departure_time).
                relatives = derived(word)
                if stem != word and self._stem(k, stem) == stem:
                    relatives += derived(stem)  # departs → depart → departure
                for form in dict.fromkeys(relatives):
                    out.append(QueryStem(form, False, False, "derived"))
                    other = self._stem(k, form)
                    if other:
                        out.append(QueryStem(stem_term(lang, other), True, False, "derived"))
        return out


def stem_term(language: str, stem: str) -> str:
    """The index term of *stem* in *language*."""
    return f"{STEM_MARK}{language}:{stem}"


def is_stem_term(term: str) -> bool:
    """True if *term* is a stem term (not a word of the text)."""
    return term.startswith(STEM_MARK)


def part_term(part: str) -> str:
    """The index term of *part* as a part of an identifier (``meal`` of ``meal_preference``)."""
    return f"{PART_MARK}{part}"


@functools.lru_cache(maxsize=16)
def morphology(languages: tuple[str, ...]) -> Morphology | None:
    """The shared :class:`Morphology` of canonical *languages*; None when there are none."""
    if not languages:
        return None
    if languages_from(languages) != languages:
        raise RequestError(f"not a canonical language list: {languages!r}", code="bad_language")
    return Morphology(languages)
