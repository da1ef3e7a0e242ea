"""Reciprocal-rank fusion of ranked lists: the hybrid search's ranking.

Each list gives a document ``1 / (k + rank)`` (rank from 1); a document's
fused score is the sum over the lists it is in. ``k = 60`` (the constant of
Cormack, Clarke and Büttcher, 2009, used by every RRF implementation people
compare with). Ties break by id, so the order is a function of the lists
alone: the same lists always fuse to the same order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from storage.search.results import Signal

RRF_K = 60
"""The rank offset of reciprocal-rank fusion."""


def fuse(
    lists: Sequence[tuple[str, Sequence[tuple[str, float]]]],
    k: int = RRF_K,
    weights: Mapping[str, float] | None = None,
) -> list[tuple[str, float, tuple[Signal, ...]]]:
    """Fuse named rankings of ``(id, score)``, best first, into ``(id, rrf, signals)``.

    *lists* are ``(name, ranking)`` pairs; a ranking lists each id once, best
    first. The result holds every id of every list, best fused score first,
    ties by id; ``signals`` name the lists that found it, in the order given.
    *weights* (by list name, default 1) scale each list's ``1 / (k + rank)``.
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, not {k}")
    fused: dict[str, float] = {}
    signals: dict[str, list[Signal]] = {}
    for name, ranking in lists:
        w = 1.0 if weights is None else float(weights.get(name, 1.0))
        if not w >= 0:
            raise ValueError(f"a weight is a number of at least 0, not {w!r}")
        for rank, (ident, score) in enumerate(ranking, start=1):
            fused[ident] = fused.get(ident, 0.0) + w / (k + rank)
            signals.setdefault(ident, []).append(Signal(name, rank, score))
    order = sorted(fused, key=lambda i: (-fused[i], i))
    return [(i, fused[i], tuple(signals[i])) for i in order]
