"""Did you mean …?" for a mistyped name: the closest known names, by bounded work.

Pure (no I/O): the caller hands the names it knows. At most
:data:`MAX_CANDIDATES` candidates are compared and only names up to
:data:`MAX_NAME_CHARS` characters take part, so a hostile name or a huge
context costs a bounded amount of work on the error path.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from itertools import islice

__all__ = ["MAX_CANDIDATES", "MAX_NAME_CHARS", "close_names", "did_you_mean"]

MAX_CANDIDATES = 10_000
"""Known names compared at most (the first ones the caller yields)."""

MAX_NAME_CHARS = 200
"""Longer names (typed or known) are never compared."""

CUTOFF = 0.75
"""The least similarity (difflib's ratio) a suggestion needs."""


def close_names(name: str, known: Iterable[str], n: int = 3) -> list[str]:
    """Up to *n* of *known* closest to *name* (best first); none for an exact match."""
    if not name or len(name) > MAX_NAME_CHARS:
        return []
    pool = [k for k in islice(known, MAX_CANDIDATES) if k != name and len(k) <= MAX_NAME_CHARS]
    return difflib.get_close_matches(name, pool, n=n, cutoff=CUTOFF)


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``"did you mean 'x'?"`` (or ``'x' or 'y'``) for *name*, or ``""`` when nothing is close."""
    found = close_names(name, known)
    if not found:
        return ""
    return "did you mean " + " or ".join(repr(f) for f in found) + "?"
