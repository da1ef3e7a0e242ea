"""Building an embedder from its configuration: the one place that knows every provider."""

from __future__ import annotations

from collections.abc import Mapping

from adapters.embeddings.base import EmbedderConfig
from adapters.embeddings.local import LocalEmbedder
from adapters.embeddings.openai import OpenAIEmbedder
from storage.embeddings import Embedder


def make_embedder(config: EmbedderConfig, *, env: Mapping[str, str] | None = None) -> Embedder:
    """The embedder *config* describes: :class:`OpenAIEmbedder` for ``openai`` (the API key
    read now from the variable ``api_key_env`` names, in *env* or the process environment),
    :class:`LocalEmbedder` for ``local`` (the model loaded now).

    Raises :class:`~storage.embeddings.EmbeddingError`: ``embed_auth`` when the key's
    variable is unset, ``embed_not_installed`` / ``embed_model`` for a local model.
    """
    if config.provider == "openai":
        return OpenAIEmbedder(config, env=env)
    return LocalEmbedder(config)
