"""English derivation that Snowball's stemmer does not undo: nouns made from verbs.

Snowball's English stemmer strips ``-ance``, ``-al``, ``-ation`` and ``-ness`` but keeps a
short word's ``-ment`` (``payment``, ``agreement``), ``-ure`` (``departure``, ``closure``),
``-ery`` (``delivery``), ``-ial`` (``denial``) and ``-sion`` (``decision``): "when does the
flight **depart**?" is answered by "**departure** at 10:15" or a tool result's
``departure_time``. :func:`derived` gives a word with such an ending the verbs it may come
from, and any other word the nouns it may make; most candidates are no word at all, and a
candidate no document holds adds nothing.

A query word looks up these relatives (their exact terms, stem terms and identifier parts)
at :data:`~storage.search.ranking.DERIVED_WEIGHT`, half a stem match, so the word the
question used and its inflections rank first. Query side only: the index is unchanged, and
each query word adds at most four candidates.
"""

from __future__ import annotations

from storage.search.questions import FUNCTION_WORDS

DERIVED = True
"""Whether :func:`derived` relatives are looked up (a switch for measuring)."""

_TO_VERB = (
    ("ment", ""),
    ("ment", "e"),
    ("ure", ""),
    ("ure", "e"),
    ("ery", "er"),
    ("ial", "y"),
    ("sion", "de"),
    ("ission", "it"),
)
"""A noun's ending and what replaces it in the verb it comes from (``payment`` → ``pay``,
``departure`` → ``depart``, ``closure`` → ``close``, ``delivery`` → ``deliver``, ``denial``
→ ``deny``, ``decision`` → ``decide``, ``permission`` → ``permit``)."""
_TO_NOUN = (
    ("", "ment"),
    ("", "ure"),
    ("e", "ure"),
    ("er", "ery"),
    ("y", "ial"),
    ("de", "sion"),
    ("it", "ission"),
)
"""The same pairs read the other way: a verb's ending and what replaces it in its noun."""


def derived(word: str) -> tuple[str, ...]:
    """Candidate derivational relatives of *word* (lower case) that Snowball's English stemmer
    does not join: ``payment`` ↔ ``pay``, ``departure`` ↔ ``depart``, ``delivery`` ↔
    ``deliver``, ``denial`` ↔ ``deny``, ``decision`` ↔ ``decide`` (its other suffixes,
    ``-ance``, ``-al``, ``-ation``, ``-ness`` …, it already strips).

    Candidates only: most are not words, and a candidate no document holds costs one
    read and adds nothing. A word with one of the noun endings of :data:`_TO_VERB`
    (and at least three letters before it; a plural too) gives its verbs, any other its
    nouns; at most four candidates, function words none.
    """
    if not DERIVED or len(word) < 3 or word in FUNCTION_WORDS:
        return ()
    noun = word[:-1] if word.endswith("s") and not word.endswith("ss") else word  # payments
    verbs = [
        noun[: -len(end)] + new
        for end, new in _TO_VERB
        if noun.endswith(end) and len(noun) >= len(end) + 3
    ]
    if verbs:
        return tuple(dict.fromkeys(verbs))
    return tuple(
        dict.fromkeys(
            word[: len(word) - len(end)] + new for end, new in _TO_NOUN if word.endswith(end)
        )
    )
