"""Numbers written in words and in digits: ``eight`` and ``8`` are one number.

A question spells a small number out ("why was **eight** dollars deducted?", "who were the
**five** headsets for?", "how many children does she have? — **three**") where the turns
write digits (``$8``, ``5 of the headphones``), or the other way round. No stemmer joins
them, and they share nothing else. :func:`numeral` gives a query term its other writing:
the English number words ``zero`` … ``twenty``, the tens and ``hundred``, and their digits.

Query side only (``storage.search.text.query_plan`` adds the lookup, kind ``"number"``,
weighed by :data:`~storage.search.ranking.NUMBER_WEIGHT`): the index is unchanged, and a
query term adds at most one lookup.
"""

from __future__ import annotations

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


def numeral(term: str) -> str | None:
    """The other writing of a number term (``eight`` → ``8``, ``8`` → ``eight``), else None."""
    return _DIGITS.get(term) or _SPELLED.get(term)
