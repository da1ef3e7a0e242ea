"""The embeddings interface the vector index needs: :class:`Embedder` and its error.

An :class:`Embedder` turns texts into vectors of one fixed dimension. Storage only
consumes one (:mod:`storage.vectors` embeds documents and queries through it); the
implementations — an OpenAI-compatible HTTP client and a local sentence-transformers
model — talk to the world and live in :mod:`adapters.embeddings`, above storage.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

from protocol.errors import StoreError

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "ERROR_CODES",
    "KINDS",
    "Embedder",
    "EmbeddingError",
    "token_budget",
]

DEFAULT_MAX_TOKENS = 256
"""The tokens one text may hold for an embedder that does not say (all-MiniLM-L6-v2's)."""
MAX_TOKENS_LIMIT = 1_000_000
"""The largest token budget taken from an embedder (a larger one is taken as this)."""

KINDS = ("document", "query")
"""What a text is to the model: a stored document or a search query."""

ERROR_CODES = (
    "embed_auth",
    "embed_bad_reply",
    "embed_closed",
    "embed_dimension",
    "embed_model",
    "embed_not_installed",
    "embed_rate_limited",
    "embed_rejected",
    "embed_unreachable",
)


class EmbeddingError(StoreError):
    """An embedder could not produce vectors; nothing was embedded.

    ``code`` says why (one of :data:`ERROR_CODES`): ``embed_unreachable`` (connection
    failures, timeouts, 5xx after the retries), ``embed_rate_limited`` (429 after the
    retries), ``embed_auth`` (401/403, or the key's environment variable unset),
    ``embed_rejected`` (another 4xx: unknown model, input too long ...), ``embed_bad_reply``
    (a reply that is not a valid embeddings answer), ``embed_dimension`` (vectors of a
    dimension other than the one fixed by the config or the first reply),
    ``embed_not_installed`` (the ``morphz[embed]`` extra is missing), ``embed_model`` (a
    local model could not be loaded), ``embed_closed`` (used after :meth:`Embedder.close`).
    Messages never contain an API key.
    """

    code = "embed_unreachable"


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors of one dimension; safe to call from several threads."""

    @property
    def model_id(self) -> str:
        """A stable id of the model (and revision), e.g. ``openai:text-embedding-3-small``
        or ``st:all-MiniLM-L6-v2``: vectors from embedders with different ids are not
        comparable; the vector index stores it beside its vectors."""
        ...

    @property
    def dimension(self) -> int:
        """The length of every vector: from the config, the model, or the first reply
        (an OpenAI-compatible embedder asks the endpoint once if nothing told it yet)."""
        ...

    def embed(
        self, texts: Sequence[str], *, kind: Literal["document", "query"] = "document"
    ) -> list[list[float]]:
        """One vector per text, in order; ``[]`` for no texts (no call is made).

        *kind* says whether the texts are stored documents or search queries (models
        that embed them differently use it). Raises :class:`EmbeddingError`, or
        :class:`RequestError` (code ``embed_input``) when *texts* is not a sequence of
        strings."""
        ...

    def close(self) -> None:
        """Release connections or the model; idempotent."""
        ...


def token_budget(embedder: object) -> int:
    """The tokens one text sent to *embedder* may hold: its ``max_tokens`` attribute (the
    model's input window, e.g. 256 for all-MiniLM-L6-v2, 512 for e5) when it has a
    positive integer one, else :data:`DEFAULT_MAX_TOKENS`.

    ``max_tokens`` is optional on an :class:`Embedder` (the adapters' embedders have it);
    a longer text is silently cut by most models, so the vector index embeds a long
    document in pieces of this budget (:mod:`storage.vectors.chunking`).
    """
    value = getattr(embedder, "max_tokens", None)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return DEFAULT_MAX_TOKENS
    return min(value, MAX_TOKENS_LIMIT)
