"""English words that mean the same, and the past forms of irregular verbs, from WordNet.

Two query-side rules of lexical search (``storage.search.text.query_plan`` adds the lookups,
``storage.search.ranking`` weighs them), both from tables derived once from WordNet 3.0
(:mod:`storage.search.wordnet` builds them; they ship in ``storage/search/data/`` with
WordNet's licence):

* **Synonyms** (:func:`synonyms`, kind ``"synonym"``): ``faulty`` → ``defective``,
  ``parcel`` → ``package``, ``grieving`` → ``bereaved``. Only synsets that are what both
  words mostly mean (:mod:`storage.search.wordnet`), at most :data:`MAX_SYNONYMS` a word,
  and ranking counts them only for a query word that no form of is in the index: where the
  question's own word is used, its synonyms would only add other senses.
* **Past forms after "did"** (:func:`past_forms`, kind ``"past"``): "when did she **go** to
  the support group?" is answered by "I **went** there yesterday"; Snowball does not join
  ``go`` and ``went``. A question's ``did`` makes its main verb (the first irregular verb
  after ``did``, before an infinitive's ``to`` or another clause) look up its past forms.

* **Irregular plurals** (:func:`plural_forms`, kind ``"plural"``): ``children`` ↔
  ``child``, ``feet`` ↔ ``foot``, ``women`` ↔ ``woman``, which Snowball keeps apart; always,
  as another form of the word.

The tables are read on first use (about 13,000 synonym sets; a few milliseconds). Without
the data files (a stripped install) both rules look up nothing and search is as before.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from pathlib import Path

from storage.search.morphology import Morphology, QueryStem
from storage.search.questions import FUNCTION_WORDS

SYNONYMS = True
"""Whether synonyms are looked up (a switch for measuring)."""
PAST_FORMS = True
"""Whether a verb after ``did`` looks up its past forms (a switch for measuring)."""
PLURALS = True
"""Whether a noun looks up its irregular plurals, and a plural its singular (a switch)."""
MAX_SYNONYMS = 4
"""Most synonyms one query word looks up."""
PAST_AUX = frozenset({"did", "didn't", "didn\u2019t", "didnt"})
"""Terms of the auxiliary of a past question ("when **did** she go …")."""
VERB_ENDS = frozenset(
    "to when where what which who whom whose why how do does is are am was were will would "
    "can could shall should may might must has have had".split()
)
"""Terms after which a word is no longer the main verb of ``did``'s clause: an infinitive's
``to`` ("did she offer **to** help find …"), or the start of another clause ("which flight
did she pick and **when does** it leave?")."""
DATA = Path(__file__).resolve().parent / "data"
"""Where the tables are (``wordnet-synonyms.txt``, ``wordnet-verb-forms.txt``)."""

_BASE = (
    ("ies", "y"),
    ("ves", "f"),
    ("ses", "s"),
    ("xes", "x"),
    ("ches", "ch"),
    ("shes", "sh"),
    ("men", "man"),
    ("es", "e"),
    ("s", ""),
    ("ied", "y"),
    ("ed", "e"),
    ("ed", ""),
    ("ing", "e"),
    ("ing", ""),
)
"""Inflectional endings and what replaces them in the base form WordNet lists
(``parcels`` → ``parcel``, ``grieving`` → ``grieve``); tried in order, first found wins."""


@functools.cache
def _synonym_table() -> dict[str, tuple[str, ...]]:
    """Each word's synonyms, from ``wordnet-synonyms.txt`` (empty without the file)."""
    out: dict[str, list[str]] = {}
    try:
        text = (DATA / "wordnet-synonyms.txt").read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    for line in text.splitlines():
        words = line.split()
        for w in words:
            out.setdefault(w, []).extend(x for x in words if x != w)
    return {w: tuple(dict.fromkeys(s)) for w, s in out.items()}


@functools.cache
def _verb_table() -> dict[str, tuple[str, ...]]:
    """Each irregular verb's past forms, from ``wordnet-verb-forms.txt`` (empty without it)."""
    try:
        text = (DATA / "wordnet-verb-forms.txt").read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    return {words[0]: tuple(words[1:]) for words in map(str.split, text.splitlines()) if words}


@functools.cache
def _plural_table() -> dict[str, tuple[str, ...]]:
    """Each noun's irregular plurals and each plural's singulars, from ``wordnet-plurals.txt``
    (empty without it)."""
    try:
        text = (DATA / "wordnet-plurals.txt").read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    out: dict[str, list[str]] = {}
    for base, *forms in map(str.split, text.splitlines()):
        out.setdefault(base, []).extend(forms)
        for form in forms:
            out.setdefault(form, []).append(base)
    return {w: tuple(dict.fromkeys(f)) for w, f in out.items()}


def _content(word: str) -> bool:
    return len(word) >= 2 and word.isalpha() and word.isascii() and word not in FUNCTION_WORDS


def synonyms(word: str) -> tuple[str, ...]:
    """The synonyms of a query *word* (lower case), or of its base form (``parcels`` →
    ``parcel``): at most :data:`MAX_SYNONYMS`; ``()`` for function words and names' parts.

    At most a handful of dict lookups (one per ending of :data:`_BASE` that *word* has).
    """
    if not SYNONYMS or len(word) < 3 or not _content(word):
        return ()
    table = _synonym_table()
    found = table.get(word)
    if found is None:
        for end, new in _BASE:
            if word.endswith(end) and len(word) - len(end) >= 3:
                found = table.get(word[: -len(end)] + new)
                if found is not None:
                    break
    return found[:MAX_SYNONYMS] if found else ()


def past_forms(word: str) -> tuple[str, ...]:
    """The past forms of an irregular verb *word* (``go`` → ``gone``, ``went``), else ``()``."""
    if not PAST_FORMS or not _content(word):
        return ()
    return _verb_table().get(word, ())


def plural_forms(word: str) -> tuple[str, ...]:
    """The irregular plurals of a noun *word* (``child`` → ``children``) or the singulars of
    an irregular plural (``feet`` → ``foot``), else ``()``."""
    if not PLURALS or not _content(word):
        return ()
    return _plural_table().get(word, ())


def past_verb(terms: list[str], plain: Iterable[str]) -> str | None:
    """The main verb of a past question (its *terms* in order): the first term after ``did``
    (before any of :data:`VERB_ENDS`) that has irregular past forms, if it is among *plain*
    words; else None."""
    words = set(plain)
    after = False
    for term in terms:
        if term in PAST_AUX:
            after = True
        elif after and term in VERB_ENDS:
            return None
        elif after and term in words and past_forms(term):
            return term
    return None


def lookups_of(
    term: str,
    found: tuple[str, ...],
    kind: str,
    kept: set[str],
    morphology: Morphology | None,
) -> list[tuple[str, QueryStem]]:
    """The lookups of other words *found* for query *term* (its other writings, synonyms,
    plurals or past forms, of *kind*), each word not already a query term (in *kept*).

    Each looks up what finds every word with its stem, each document once: the stem term and
    the stem as a word (``defective`` → ``\\x01english:defect``, ``defect``), and the exact
    term only where it is its own stem (``holiday``, ``went``), as a document with it holds
    no stem term then.
    """
    out: list[tuple[str, QueryStem]] = []
    for other in found:
        if other in kept:
            continue
        stems = (
            [q for q in morphology.query_stems(other) if q.kind == "stem"]
            if morphology is not None
            else []
        )
        if not any(q.with_word for q in stems):
            out.append((term, QueryStem(other, False, False, kind)))
        out.extend((term, QueryStem(q.term, q.stem, False, kind)) for q in stems)
    return out
