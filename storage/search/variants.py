"""Other writings of one word: numbers in words and in digits, British and American spelling.

A question spells a small number out ("why was **eight** dollars deducted?", "who were the
**five** headsets for?") where the turns write digits (``$8``, ``5 of the headphones``), or
the other way round; and one writer's ``neighbour``, ``colour``, ``centre``, ``organise``
is another's ``neighbor``, ``color``, ``center``, ``organize``. No stemmer joins them, and a
question and its answer may share nothing else. :func:`variants` gives a query term its
other writings: the English number words ``zero`` … ``twenty``, the tens and ``hundred``
and their digits; a number and its ordinal in digits (``60`` and ``60th``); the spelling
pairs ``-our``/``-or``, ``-ise``/``-ize``, ``-yse``/``-yze``, ``-tre``/``-ter``,
``-bre``/``-ber`` and ``-ogue``/``-og`` at a word's end (with its inflections:
``neighbours``, ``organised``, ``favourite``).

Candidates only, like :mod:`storage.search.derivation`'s: most spelling candidates are no
word (``water`` → ``watre``), and a candidate no document holds costs one read and adds
nothing. Query side only (``storage.search.text.query_plan`` adds the lookups, kind
``"variant"``, weighed by :data:`~storage.search.ranking.VARIANT_WEIGHT`: the same word, so
as much as the word): the index is unchanged, and a query term adds at most two candidates.
"""

from __future__ import annotations

from storage.search.questions import FUNCTION_WORDS

_WORDS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty"
).split()
_DIGITS: dict[str, str] = {word: str(n) for n, word in enumerate(_WORDS)}
_DIGITS.update(
    {
        "thirty": "30",
        "forty": "40",
        "fifty": "50",
        "sixty": "60",
        "seventy": "70",
        "eighty": "80",
        "ninety": "90",
        "hundred": "100",
    }
)
_SPELLED = {digits: word for word, digits in _DIGITS.items()}

_SPELLINGS = (
    ("our", "or"),
    ("is", "iz"),
    ("ys", "yz"),
    ("tre", "ter"),
    ("bre", "ber"),
    ("ogue", "og"),
)
"""British and American spellings of the same stretch of a word (British first)."""
_INFLECTIONS = ("", "s", "d", "ed", "es", "ing", "ite", "ites", "ation", "ations", "hood", "ly")
"""What may follow that stretch at the word's end: ``colour|s``, ``organis|ed``,
``favour|ite``, ``organis|ation``; ``is``/``ys`` only before ``e``, ``ed``, ``es``, ``ing``,
``ation``."""
_ENDINGS: dict[str, str] = {}
for _brit, _amer in _SPELLINGS:
    for _tail in _INFLECTIONS:
        if _brit in ("is", "ys"):
            if _tail not in ("", "s", "d", "ing", "ation", "ations"):
                continue
            _tail = "e" + _tail if _tail in ("", "s", "d") else _tail
        elif _brit in ("tre", "bre", "ogue") and _tail not in ("", "s", "d"):
            continue
        _ENDINGS[_brit + _tail] = _amer + _tail
        _ENDINGS[_amer + _tail] = _brit + _tail
del _brit, _amer, _tail
_LONGEST = max(map(len, _ENDINGS))
_SHORTEST = min(map(len, _ENDINGS))
MIN_SPELLED = 5
"""Shortest word given another spelling (``four`` is not ``for``)."""
MAX_ORDINAL_DIGITS = 3
"""Longest number given its ordinal (``999`` → ``999th``; a year or an order number gets none)."""


def ordinal(digits: str) -> str:
    """The ordinal of a number written in *digits*: ``1`` → ``1st``, ``12`` → ``12th``,
    ``60`` → ``60th``, ``23`` → ``23rd``."""
    if digits[-2:-1] == "1":
        return digits + "th"
    return digits + {"1": "st", "2": "nd", "3": "rd"}.get(digits[-1:], "th")


def variants(term: str) -> tuple[str, ...]:
    """The other writings of a query *term* (lower case): ``eight`` → ``8``, ``8`` →
    ``eight`` and ``8th``, ``60th`` → ``60`` ("his father's 60th" — "Dad's turning 60"),
    ``neighbours`` → ``neighbors``, ``color`` → ``colour``; ``()`` if none.

    At most one spelling candidate per ending length tried, at most a handful of dict lookups.
    """
    number = _DIGITS.get(term) or _SPELLED.get(term)
    if term.isdigit() and len(term) <= MAX_ORDINAL_DIGITS:
        return (number, ordinal(term)) if number else (ordinal(term),)
    if number:
        return (number,)
    digits = term[:-2]
    if len(digits) <= MAX_ORDINAL_DIGITS and digits.isdigit() and ordinal(digits) == term:
        return (digits,)
    if len(term) < MIN_SPELLED or not term.isalpha() or term in FUNCTION_WORDS:
        return ()
    out: list[str] = []
    for n in range(min(_LONGEST, len(term) - 2), _SHORTEST - 1, -1):
        other = _ENDINGS.get(term[-n:])
        if other is not None:
            out.append(term[:-n] + other)
    return tuple(dict.fromkeys(out))
