"""What the vector index reads and answers: documents from the context, hits, results.

A document is an event (its first :data:`~storage.vectors.format.MAX_EMBED_TEXT`
characters) or a frame (:func:`storage.search.frame_text`, the lexical index's
text), with the filter record the index keeps (:class:`~storage.vectors.format.DocRecord`)
and a digest of the text embedded, so only changed text is embedded again.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from protocol.errors import RequestError
from protocol.state import Event, Frame
from protocol.view import ReadView
from storage.search import frame_text
from storage.vectors.format import MAX_EMBED_TEXT, DocRecord

SNIPPET_CHARS = 160
"""The longest snippet of a hit the lexical index did not find (the text's start)."""


@dataclass(frozen=True, slots=True)
class VectorHit:
    """A document near the query: ``id`` is a frame id or ``@eN``, ``score`` the cosine."""

    id: str
    type: str
    kind: str
    lifecycle: str
    score: float
    time: float
    trust: str | None
    snippet: str


@dataclass(frozen=True, slots=True)
class VectorResult:
    """Hits, best first, and how far the vectors are behind the context.

    ``lag`` counts outbox intents not yet embedded (None without a context
    store to compare with); ``building`` is True while a rebuild is under way;
    ``approximate`` when the nearest-neighbour graph was used or a filter
    could not be filled from :data:`MAX_CANDIDATES` neighbours.
    """

    hits: tuple[VectorHit, ...]
    model_id: str
    indexed_version: int
    lag: int | None
    building: bool = False
    approximate: bool = False


@dataclass(slots=True)
class _Doc:
    """A document read from the context: its filter record (digest included) and its text."""

    ident: str
    label: int | None  # an event's seq; None for a frame (looked up or assigned)
    record: DocRecord
    text: str
    vector: np.ndarray | None = None


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


def _frame_time(view: ReadView, frame: Frame) -> float:
    rec = view.txlog(frame.updated_version) if frame.updated_version else None
    value = rec.get("time") if rec else None
    return float(value) if isinstance(value, (int, float)) else 0.0


def pooled(vectors: list[np.ndarray]) -> np.ndarray:
    """One document's vector from its chunks' unit vectors: their mean, made unit length."""
    if len(vectors) == 1:
        return vectors[0]
    mean: np.ndarray = np.mean(np.stack(vectors), axis=0).astype(np.float32)
    norm = float(np.linalg.norm(mean))
    out: np.ndarray = mean / norm if norm > 0 else mean
    return out


def _event_doc(view: ReadView, e: Event) -> _Doc:
    text = view.event_chunk(e.seq, 0, MAX_EMBED_TEXT) or ""
    rec = DocRecord(e.kind, e.lifecycle, e.time, e.ref, None, -math.inf, math.inf, _digest(text))
    return _Doc(e.ref, e.seq, rec, text)


def _frame_doc(view: ReadView, f: Frame) -> _Doc:
    text = frame_text(f)[:MAX_EMBED_TEXT]
    env = f.envelope
    lo, hi = env.get("valid_from"), env.get("valid_to")
    rec = DocRecord(
        "frame",
        f.lifecycle,
        _frame_time(view, f),
        f.id,
        f.trust,
        -math.inf if lo is None else float(lo),
        math.inf if hi is None else float(hi),
        _digest(text),
    )
    return _Doc(f.id, None, rec, text)


def _unit(values: Any, dimension: int, what: str) -> np.ndarray:
    """*values* as a unit-length float32 vector of *dimension*; RequestError if it is not one."""
    try:
        vec = np.asarray(values, dtype=np.float32)
    except (TypeError, ValueError) as e:
        raise RequestError(f"{what} is not a vector of numbers", code="bad_vector") from e
    if vec.ndim != 1 or len(vec) != dimension:
        raise RequestError(
            f"{what} has {vec.size} dimensions; the index holds {dimension}-dimensional vectors",
            code="bad_dimension",
        )
    if not np.all(np.isfinite(vec)):
        raise RequestError(f"{what} has a value that is not finite", code="bad_vector")
    norm = float(np.linalg.norm(vec))
    return vec / norm if norm > 0 else vec


def _lead(text: str) -> str:
    """The start of *text*, whitespace collapsed, cut at :data:`SNIPPET_CHARS` (``…``)."""
    flat = " ".join(text[: SNIPPET_CHARS * 4].split())
    return flat if len(flat) <= SNIPPET_CHARS else flat[: SNIPPET_CHARS - 1] + "…"
