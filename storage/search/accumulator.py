"""The BM25 accumulator of a query that finds thousands of documents, held in numpy arrays.

:func:`storage.search.ranking._rank` adds each query term's score to the documents
its postings hold. While few documents are found it keeps them in a dict (a
Python loop per posting is cheapest then); once a term would take the count past
:data:`storage.search.ranking.ARRAY_DOCS`, it moves them here, where a term's
newest postings are read, weighed and merged in a few array operations.

Everything here computes what the dict does, bit for bit: a document's score
is the same sum of the same floats in the same order (one addition per term),
documents keep the order in which they were first found (ties are broken by
it), and the selections (:meth:`ScoreArrays.alive`, :meth:`ScoreArrays.best`)
are those of the dict's definitions. This module imports numpy, so it is only
imported when a query needs it: a small context's search never loads numpy.

Names with a leading underscore are shared between the modules of
:mod:`storage.search` only; this module is internal to it.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import Any

import lmdb
import numpy as np

from storage.search.format import FRAME_BASE
from storage.search.postings import _chunks_newest


class ScoreArrays:
    """Documents found so far and their scores, in the order they were first found.

    ``docs[i]`` scored ``scores[i]``; ``index`` lists the positions of ``docs``
    in ascending docnum order (``docs[index]`` is sorted), so a term's documents
    are matched against those found by binary search. ``full[i]`` is True when a
    term scanned in full found ``docs[i]`` (:meth:`older` reads it).
    """

    def __init__(self, docs: Any, scores: Any, indexed: bool = True, full: Any = None) -> None:
        self.docs = np.asarray(docs, dtype=np.int64)
        self.scores = np.asarray(scores, dtype=np.float64)
        self.index = np.argsort(self.docs, kind="stable") if indexed else self.docs
        self.sorted = self.docs[self.index] if indexed else self.docs
        self.full = np.zeros(len(self.docs), dtype=bool) if full is None else full

    @classmethod
    def of(
        cls, acc: Mapping[int, float], indexed: bool = True, full: Container[int] = ()
    ) -> ScoreArrays:
        """The arrays of a dict accumulator (its order kept), *full* the documents found by
        terms scanned in full; without *indexed*, only for :meth:`alive`, :meth:`best` and
        :meth:`top` (no docnum index is built)."""
        n = len(acc)
        docs = np.fromiter(acc.keys(), dtype=np.int64, count=n)
        flags = np.fromiter((d in full for d in acc), dtype=bool, count=n) if full else None
        return cls(docs, np.fromiter(acc.values(), dtype=np.float64, count=n), indexed, flags)

    def __len__(self) -> int:
        return len(self.docs)

    def top(self) -> float:
        """The best score (0.0 when nothing was found)."""
        return float(self.scores.max()) if len(self.scores) else 0.0

    def scan(
        self,
        txn: lmdb.Transaction[bytes],
        db: Any,
        tk: bytes,
        weights: Mapping[int, float],
        cap: int,
        only: int | None,
        full: bool = False,
    ) -> int:
        """Add term *tk*'s score (``weights[code]`` per posting code) to the documents of its
        newest *cap* postings; *only* (``FRAME_BASE`` or 0) keeps frames or events only.
        With *full* (the term is scanned in full), the documents kept are marked so.

        Returns the lowest docnum scanned if the cap cut the scan short, else 0.
        """
        remaining = cap
        lowest = 0
        docs_parts: list[Any] = []
        code_parts: list[Any] = []
        for value in _chunks_newest(txn, db, tk):
            n = len(value) // 6
            d = np.frombuffer(value, dtype=np.uint32, count=n)
            c = np.frombuffer(value, dtype=np.uint16, count=n, offset=4 * n)
            if n > remaining:
                d, c = d[n - remaining :], c[n - remaining :]
            docs_parts.append(d)
            code_parts.append(c)
            remaining -= len(d)
            if remaining <= 0:
                lowest = int(d[0]) if len(d) else 0
                break
        if not docs_parts:
            return lowest
        docs = np.concatenate(docs_parts).astype(np.int64)
        codes = np.concatenate(code_parts)
        if only is not None:
            keep = (docs >= FRAME_BASE) == (only == FRAME_BASE)
            docs, codes = docs[keep], codes[keep]
        # Each distinct posting code is weighed once, by the same Python float as the dict's.
        if len(codes):
            table = np.zeros(int(codes.max()) + 1, dtype=np.float64)
            distinct = np.flatnonzero(np.bincount(codes))
            table[distinct] = [weights[c] for c in distinct.tolist()]
            self.add(docs, table[codes], full)
        return lowest

    def add(self, docs: Any, weights: Any, full: bool = False) -> None:
        """Add *weights* to the scores of *docs* (distinct), appending those not found yet
        in the order given; with *full*, mark every one of *docs* as found by a term
        scanned in full.

        One merge of two sorted runs (the documents found, by docnum, and *docs* sorted)
        pairs each document already found with its new weight.
        """
        if not len(docs):
            return
        by_doc = np.argsort(docs, kind="stable")
        ranked = docs[by_doc]
        n = len(self.sorted)
        if not n:
            self.docs, self.scores = docs, weights
            self.index, self.sorted = by_doc, ranked
            self.full = np.full(len(docs), full)
            return
        both = np.concatenate((self.sorted, ranked))
        order = np.argsort(both, kind="stable")  # a found document sorts before its twin
        merged = both[order]
        twins = np.flatnonzero(merged[1:] == merged[:-1])
        again = order[twins + 1] - n  # positions in `ranked` of the documents found before
        self.scores[self.index[order[twins]]] += weights[by_doc[again]]
        if full:
            self.full[self.index[order[twins]]] = True
        fresh = np.ones(len(docs), dtype=bool)
        fresh[by_doc[again]] = False
        slot = np.cumsum(fresh) - 1  # where each new document goes among those appended
        positions = np.concatenate((self.index, len(self.docs) + slot[by_doc]))
        self.docs = np.concatenate((self.docs, docs[fresh]))
        self.scores = np.concatenate((self.scores, weights[fresh]))
        self.full = np.concatenate((self.full, np.full(int(fresh.sum()), full)))
        keep = np.ones(len(merged), dtype=bool)
        keep[twins + 1] = False
        self.sorted = merged[keep]
        self.index = positions[order][keep]

    def best(self, n: int) -> dict[int, float]:
        """The documents scoring at least the *n*-th best score (every one if *n* or fewer):
        what the *n* best by any tie-break are chosen among."""
        if len(self.scores) > n:
            cut = len(self.scores) - n
            keep = np.flatnonzero(self.scores >= np.partition(self.scores, cut)[cut])
        else:
            keep = np.arange(len(self.scores))
        return dict(zip(self.docs[keep].tolist(), self.scores[keep].tolist(), strict=True))

    def alive(self, rest: float, theta: float, cap: int) -> tuple[dict[int, float], bool]:
        """The documents that the terms left (worth at most *rest*) could lift to *theta*,
        ascending, with their scores; when more than *cap*, the *cap* best (ties: the
        earlier found), and True.

        As ``[d for d, s in acc.items() if s + rest >= theta]``, then
        ``heapq.nlargest(cap, alive, key=acc.__getitem__)`` over the dict.
        """
        keep = np.flatnonzero(self.scores + rest >= theta)
        cut = len(keep) > cap
        if cut:
            kept = self.scores[keep]
            floor = np.partition(kept, len(kept) - cap)[len(kept) - cap]
            # Those above the cap's score, then the earliest found of those at it.
            above = keep[kept > floor]
            keep = np.concatenate((above, keep[kept == floor][: cap - len(above)]))
        keep = keep[np.argsort(self.docs[keep], kind="stable")]
        return dict(zip(self.docs[keep].tolist(), self.scores[keep].tolist(), strict=True)), cut

    def older(self, below: int, cap: int) -> tuple[dict[int, float], Any]:
        """The documents found by terms scanned in full and numbered below *below*, by
        ascending docnum, with their scores: the *cap* best if there are more (ties: the
        earlier found); and their positions, for :meth:`update`.

        As ``[d for d in acc if d in full and d < below]``, then
        ``heapq.nlargest(cap, older, key=acc.__getitem__)`` over the dict.
        """
        keep = np.flatnonzero(self.full & (self.docs < below))
        if len(keep) > cap:
            kept = self.scores[keep]
            floor = np.partition(kept, len(kept) - cap)[len(kept) - cap]
            # Those above the cap's score, then the earliest found of those at it.
            above = keep[kept > floor]
            keep = np.concatenate((above, keep[kept == floor][: cap - len(above)]))
        keep = keep[np.argsort(self.docs[keep], kind="stable")]
        older = dict(zip(self.docs[keep].tolist(), self.scores[keep].tolist(), strict=True))
        return older, keep

    def update(self, scores: Mapping[int, float], positions: Any) -> None:
        """Set the scores at *positions* to *scores*' (as :meth:`older` gave them, raised)."""
        self.scores[positions] = np.fromiter(scores.values(), dtype=np.float64, count=len(scores))

    def to_dict(self) -> dict[int, float]:
        """The dict accumulator these arrays stand for (same order, same floats)."""
        return dict(zip(self.docs.tolist(), self.scores.tolist(), strict=True))
