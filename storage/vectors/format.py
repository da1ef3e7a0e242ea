"""The vector index's on-disk layout: its LMDB databases, its state record and codecs.

The index lives in ``<context dir>/vectors/``, an LMDB environment of its own
beside the lexical index (``index/``); deleting it loses nothing but the
embedding work (the next update re-embeds everything). Databases:

=============  =====================================================================
``meta``       ``b"state"`` → msgpack map (:class:`VectorState`)
``docs``       label (u64 big-endian) → msgpack ``[kind, lifecycle, time, id, trust,
               valid_from, valid_to, digest]`` (frames: ``id`` is the frame id and
               the envelope fields are set; events: ``id`` is ``@eN``, trust None)
``vecs``       label → the vector, ``dimension`` little-endian float32, unit length
``frame_ids``  frame id (UTF-8) → label
=============  =====================================================================

Labels: an event's is its sequence number; a frame's is :data:`FRAME_LABEL` plus
the order in which the index first saw it. Labels are never reused.
"""

from __future__ import annotations

import struct
from dataclasses import asdict, dataclass, field
from typing import Any

import msgpack

VECTOR_DIR = "vectors"
"""The index's directory inside a context's directory."""
VECTOR_FORMAT = 1
"""The layout version; an index of another format is rebuilt."""
FRAME_LABEL = 1 << 40
"""Frames get labels from here up; events are labelled by their sequence number."""
MAX_EMBED_CHARS = 4096
"""The most characters embedded in one piece, whatever the model's token budget."""
MAX_EMBED_CHUNKS = 32
"""The most pieces of one document embedded (:mod:`storage.vectors.chunking`); the rest is not."""
MAX_EMBED_TEXT = 65_536
"""The most characters of one document read for embedding (its first 64 KiB)."""

_U64 = struct.Struct(">Q")
_STATE = b"state"


@dataclass(slots=True)
class VectorState:
    """The index's counters, as last committed.

    ``applied`` is the last outbox intent applied; ``indexed_version`` the
    context version the vectors reflect; ``model_id``/``dimension`` the
    embedder the vectors came from; ``generation`` grows with every write (a
    process holding the vectors in memory reloads when it changed under it);
    ``syncing`` is True while a rebuild is in progress (``sync_seq`` the last
    event it covered, ``sync_target`` the intent it will claim when done).
    """

    format: int = 0
    created: float = 0.0
    model_id: str = ""
    dimension: int = 0
    applied: int = 0
    indexed_version: int = 0
    next_frame: int = FRAME_LABEL
    documents: int = 0
    generation: int = 0
    syncing: bool = False
    sync_seq: int = 0
    sync_frames: bool = False
    sync_target: int = 0
    sync_version: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def usable(self) -> bool:
        """True if the records are of this layout (else the index answers as empty)."""
        return self.format == VECTOR_FORMAT

    def encode(self) -> bytes:
        return bytes(msgpack.packb(asdict(self)))

    @classmethod
    def decode(cls, raw: bytes | None) -> VectorState:
        if raw is None:
            return cls()
        try:
            doc = msgpack.unpackb(raw)
            known = {k: v for k, v in doc.items() if k in cls.__dataclass_fields__}
            return cls(**known)
        except (ValueError, TypeError, msgpack.UnpackException):
            return cls()


@dataclass(frozen=True, slots=True)
class DocRecord:
    """What the index keeps of a document besides its vector: the filter fields and a digest."""

    kind: str
    lifecycle: str
    time: float
    id: str
    trust: str | None
    valid_from: float
    valid_to: float
    digest: bytes

    @property
    def is_frame(self) -> bool:
        return not self.id.startswith("@e")

    def encode(self) -> bytes:
        return bytes(
            msgpack.packb(
                [
                    self.kind,
                    self.lifecycle,
                    self.time,
                    self.id,
                    self.trust,
                    self.valid_from,
                    self.valid_to,
                    self.digest,
                ]
            )
        )

    @classmethod
    def decode(cls, raw: bytes) -> DocRecord:
        kind, life, when, ident, trust, lo, hi, digest = msgpack.unpackb(raw)
        return cls(kind, life, float(when), ident, trust, float(lo), float(hi), digest)


def label_key(label: int) -> bytes:
    """The LMDB key of *label*."""
    return _U64.pack(label)


def key_label(key: bytes) -> int:
    """The label of an LMDB key."""
    return int(_U64.unpack(key)[0])


def state_key() -> bytes:
    """The key of the state record in ``meta``."""
    return _STATE
