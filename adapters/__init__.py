"""Adapters: clients of outside services that the layers above storage plug in.

:mod:`adapters.embeddings` holds the embedding clients (an OpenAI-compatible HTTP client,
a local sentence-transformers model) that implement storage's
:class:`~storage.embeddings.Embedder` interface. Adapters import protocol and storage,
never the service or a port.
"""

__all__: list[str] = []
