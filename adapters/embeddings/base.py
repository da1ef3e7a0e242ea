"""What every embedder client shares: its configuration and the checks of texts and vectors.

The interface itself (:class:`~storage.embeddings.Embedder`, :class:`EmbeddingError`) is
storage's: the vector index consumes it. Two implementations exist here:
:class:`adapters.embeddings.openai.OpenAIEmbedder` (any OpenAI-compatible
``/v1/embeddings`` endpoint: OpenAI, vLLM, Ollama, text-embeddings-inference ...) and
:class:`adapters.embeddings.local.LocalEmbedder` (a sentence-transformers model in this
process, the optional ``morphz[embed]`` extra). :func:`adapters.embeddings.make_embedder`
builds one from an :class:`EmbedderConfig`.

The configuration never holds a secret: ``api_key_env`` is the *name* of the environment
variable holding the key, read when the embedder is built, so a config can be logged,
stored and sent to a Ray actor as it is.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from protocol.errors import RequestError
from storage.embeddings import KINDS, EmbeddingError

PROVIDERS = ("openai", "local")
OPENAI_URL = "https://api.openai.com/v1"
LOCAL_DEFAULT_MODEL = "all-MiniLM-L6-v2"

# Environment variables read by EmbedderConfig.from_env.
ENV_PROVIDER = "MORPHZ_EMBED_PROVIDER"
ENV_URL = "MORPHZ_EMBED_URL"
ENV_MODEL = "MORPHZ_EMBED_MODEL"
ENV_KEY_ENV = "MORPHZ_EMBED_KEY_ENV"
ENV_KEY = "MORPHZ_EMBED_KEY"
ENV_DIMENSIONS = "MORPHZ_EMBED_DIMENSIONS"
ENV_BATCH_SIZE = "MORPHZ_EMBED_BATCH_SIZE"
ENV_TIMEOUT = "MORPHZ_EMBED_TIMEOUT"
ENV_MAX_RETRIES = "MORPHZ_EMBED_MAX_RETRIES"
ENV_NORMALIZE = "MORPHZ_EMBED_NORMALIZE"
ENV_INPUT_TYPE = "MORPHZ_EMBED_INPUT_TYPE"
ENV_MAX_TOKENS = "MORPHZ_EMBED_MAX_TOKENS"
ENV_VARS = (
    ENV_PROVIDER,
    ENV_URL,
    ENV_MODEL,
    ENV_KEY_ENV,
    ENV_KEY,
    ENV_DIMENSIONS,
    ENV_BATCH_SIZE,
    ENV_TIMEOUT,
    ENV_MAX_RETRIES,
    ENV_NORMALIZE,
    ENV_INPUT_TYPE,
    ENV_MAX_TOKENS,
)

MAX_DIMENSION = 65_536
MAX_BATCH_SIZE = 4096
MAX_TIMEOUT = 3600.0
MAX_RETRIES = 20
MAX_MODEL_CHARS = 1024
MIN_MAX_TOKENS = 16
MAX_MAX_TOKENS = 1_000_000
UNKNOWN_MODEL_TOKENS = 512
"""The token window assumed for a model this module does not know (most BERT-sized
embedding models read 512)."""
MODEL_TOKENS = {
    "all-minilm-l6-v2": 256,
    "all-minilm-l12-v2": 256,
    "paraphrase-multilingual-minilm-l12-v2": 128,
    "multilingual-e5-small": 512,
    "multilingual-e5-base": 512,
    "multilingual-e5-large": 512,
    "multilingual-e5-large-instruct": 512,
    "e5-small-v2": 512,
    "e5-base-v2": 512,
    "e5-large-v2": 512,
    "bge-small-en-v1.5": 512,
    "bge-base-en-v1.5": 512,
    "bge-large-en-v1.5": 512,
    "bge-m3": 8192,
    "nomic-embed-text": 2048,
    "text-embedding-3-small": 8191,
    "text-embedding-3-large": 8191,
    "text-embedding-ada-002": 8191,
}
"""The input window in tokens of well-known embedding models, by the last part of the
model's name (lower case; for a local model directory, its name)."""


def known_max_tokens(model: str) -> int | None:
    """The token window :data:`MODEL_TOKENS` gives the model named *model*, or None."""
    name = model.rstrip("/").rsplit("/", 1)[-1].lower()
    return MODEL_TOKENS.get(name.split(":", 1)[0])


# Upper case only: a mixed- or lower-case value is far more likely a key pasted by mistake
# (which a later "variable X is not set" message would then print) than a variable name.
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,127}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
_NUMBER_TYPES = frozenset({float, int})


def check_texts(texts: object, kind: object) -> list[str]:
    """*texts* as a list, after checking it is a sequence of strings and *kind* is known."""
    if kind not in KINDS:
        raise RequestError(f"kind must be one of {KINDS}, not {kind!r}", code="embed_input")
    if isinstance(texts, str | bytes) or not isinstance(texts, Sequence):
        raise RequestError(
            f"texts must be a sequence of strings, not {type(texts).__name__}", code="embed_input"
        )
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise RequestError(
                f"texts[{i}] must be a string, not {type(text).__name__}", code="embed_input"
            )
    return list(texts)


def check_vector(values: object, where: str) -> list[float]:
    """*values* as a list of finite floats; :class:`EmbeddingError` (``embed_bad_reply``)
    when it is not a non-empty list of finite numbers."""
    if not isinstance(values, list) or not values:
        raise EmbeddingError(f"{where}: not a non-empty list of numbers", code="embed_bad_reply")
    # Fast path (type checks at C speed): all floats, and a finite sum means no NaN or
    # infinity among them.
    types = set(map(type, values))
    if types <= _NUMBER_TYPES and math.isfinite(sum(values)):
        return list(values) if types == {float} else [float(x) for x in values]
    vector: list[float] = []
    for x in values:
        if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
            raise EmbeddingError(
                f"{where}: holds {type(x).__name__} {str(x)[:20]!r}, not a finite number",
                code="embed_bad_reply",
            )
        vector.append(float(x))
    if not math.isfinite(sum(vector)):
        raise EmbeddingError(f"{where}: values too large", code="embed_bad_reply")
    return vector


def normalized(vector: list[float]) -> list[float]:
    """*vector* scaled to length 1 (a zero vector, or one already of length 1 within
    1e-9, is returned as it is)."""
    norm = math.hypot(*vector)
    if abs(norm - 1.0) <= 1e-9 or not 0.0 < norm < math.inf:
        return vector
    return [x / norm for x in vector]


def _config_error(message: str) -> RequestError:
    return RequestError(f"embedder config: {message}", code="embed_config")


def _check_int(name: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _config_error(f"{name} must be an integer in {low}..{high}, not {value!r}")


def _check_url(url: str) -> None:
    scheme, sep, rest = url.partition("://")
    host = rest.split("/", 1)[0]
    if not sep or scheme.lower() not in ("http", "https") or not host:
        raise _config_error(f"url must be an http:// or https:// URL, not {url[:200]!r}")
    if "@" in host:
        raise _config_error(
            "url must not carry credentials (user:password@): name the key's environment"
            " variable in api_key_env instead"
        )
    if _CONTROL.search(url) or " " in url or len(url) > 2048:
        raise _config_error("url holds spaces or control characters, or is too long")


@dataclass(frozen=True, slots=True)
class EmbedderConfig:
    """Which embedder to build and how it behaves. Immutable; every field is validated on
    construction (:class:`RequestError`, code ``embed_config``), so every way of making one
    (the constructor, :meth:`from_dict`, :meth:`from_env`) is checked.

    - ``provider``: ``"openai"`` (an OpenAI-compatible endpoint) or ``"local"``
      (sentence-transformers in this process);
    - ``model``: the model name sent to the endpoint, or a local model's name or path;
    - ``url``: the API root (``http://localhost:8000/v1``; ``/embeddings`` is appended
      unless the URL already ends with it); ``openai`` only, default OpenAI's own;
    - ``api_key_env``: the *name* of the environment variable that holds the API key
      (never the key); ``openai`` only; ``None``: no ``Authorization`` header;
    - ``dimensions``: the vector length to ask for (sent as ``dimensions``) and to expect;
      ``None``: whatever the model gives, fixed by the first reply;
    - ``batch_size``: texts per request (or per local ``encode`` batch);
    - ``timeout``: seconds per HTTP request; ``max_retries``: retries after the first try;
    - ``normalize``: scale every vector to length 1;
    - ``input_type``: send each request's side (``"input_type": "query"`` or
      ``"document"``), which servers of asymmetric models (e5, bge, nomic; Voyage- and
      NIM-style APIs) read to prefix the text; ``openai`` only;
    - ``max_tokens``: the model's input window in tokens (16..1,000,000): long documents
      are embedded in pieces that fit it. ``None``: the window of a model named in
      :data:`MODEL_TOKENS`, a local model's own ``max_seq_length``, else
      :data:`UNKNOWN_MODEL_TOKENS`.

    A plain dataclass rather than a pydantic model so that the constructor itself
    validates and raises the project's typed error; :meth:`to_dict` / :meth:`from_dict`
    are its JSON and msgpack form.
    """

    provider: str
    model: str
    url: str | None = None
    api_key_env: str | None = None
    dimensions: int | None = None
    batch_size: int = 32
    timeout: float = 30.0
    max_retries: int = 4
    normalize: bool = True
    input_type: bool = False
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.provider not in PROVIDERS:
            raise _config_error(f"provider must be one of {PROVIDERS}, not {self.provider!r}")
        if not isinstance(self.model, str) or not self.model.strip():
            raise _config_error("model must be a non-empty string")
        if len(self.model) > MAX_MODEL_CHARS or _CONTROL.search(self.model):
            raise _config_error(f"model must be at most {MAX_MODEL_CHARS} printable characters")
        if self.url is not None:
            if not isinstance(self.url, str):
                raise _config_error(f"url must be a string, not {type(self.url).__name__}")
            if self.provider != "openai":
                raise _config_error("url is for provider 'openai' only")
            _check_url(self.url)
        if self.api_key_env is not None:
            if not isinstance(self.api_key_env, str) or not _ENV_NAME.fullmatch(self.api_key_env):
                raise _config_error(
                    "api_key_env must be the NAME of an environment variable (upper-case"
                    " letters, digits, underscores), not the key itself"
                )
            if self.provider != "openai":
                raise _config_error("api_key_env is for provider 'openai' only")
        if self.dimensions is not None:
            _check_int("dimensions", self.dimensions, 1, MAX_DIMENSION)
        _check_int("batch_size", self.batch_size, 1, MAX_BATCH_SIZE)
        if self.max_tokens is not None:
            _check_int("max_tokens", self.max_tokens, MIN_MAX_TOKENS, MAX_MAX_TOKENS)
        _check_int("max_retries", self.max_retries, 0, MAX_RETRIES)
        timeout = self.timeout
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not 0 < timeout <= MAX_TIMEOUT
        ):
            raise _config_error(f"timeout must be seconds in (0, {MAX_TIMEOUT:g}], not {timeout!r}")
        object.__setattr__(self, "timeout", float(timeout))
        for name in ("normalize", "input_type"):
            if not isinstance(getattr(self, name), bool):
                raise _config_error(f"{name} must be true or false, not {getattr(self, name)!r}")
        if self.input_type and self.provider != "openai":
            raise _config_error("input_type is for provider 'openai' only")

    @property
    def endpoint(self) -> str:
        """The embeddings URL requests go to (``openai`` only)."""
        root = (self.url or OPENAI_URL).rstrip("/")
        return root if root.endswith("/embeddings") else root + "/embeddings"

    def to_dict(self) -> dict[str, Any]:
        """The JSON- and msgpack-ready form (plain types only); :meth:`from_dict` inverts it."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: object) -> EmbedderConfig:
        """A config from :meth:`to_dict`'s form; unknown or missing fields are refused."""
        if not isinstance(data, Mapping):
            raise _config_error(f"expected an object, not {type(data).__name__}")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(str(k) for k in data if k not in known)
        if unknown:
            raise _config_error(f"unknown fields {unknown}")
        for name in ("provider", "model"):
            if name not in data:
                raise _config_error(f"{name} is required")
        return cls(**{str(k): v for k, v in data.items()})

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> EmbedderConfig | None:
        """The config the ``MORPHZ_EMBED_*`` environment variables describe, or ``None``
        when none of them is set (empty counts as unset): search then stays lexical.

        ``MORPHZ_EMBED_PROVIDER`` (``openai`` or ``local``; default ``openai`` when a URL
        or a key is given, else ``local``), ``MORPHZ_EMBED_URL``, ``MORPHZ_EMBED_MODEL``
        (required for ``openai``; ``local`` defaults to all-MiniLM-L6-v2),
        ``MORPHZ_EMBED_KEY_ENV`` (the name of the variable holding the key) or
        ``MORPHZ_EMBED_KEY`` (the key itself, then read from that variable), and the
        tuning variables ``MORPHZ_EMBED_DIMENSIONS``, ``_BATCH_SIZE``, ``_TIMEOUT``,
        ``_MAX_RETRIES``, ``_NORMALIZE``, ``_INPUT_TYPE``, ``_MAX_TOKENS``. Invalid values raise
        :class:`RequestError` (code ``embed_config``) naming the variable, never its
        value when it is a key.
        """
        source = os.environ if env is None else env
        values = {name: source[name] for name in ENV_VARS if source.get(name)}
        if not values:
            return None
        if ENV_KEY_ENV in values and ENV_KEY in values:
            raise _config_error(f"set {ENV_KEY_ENV} or {ENV_KEY}, not both")
        key_env = values.get(ENV_KEY_ENV) or (ENV_KEY if ENV_KEY in values else None)
        url = values.get(ENV_URL)
        provider = values.get(ENV_PROVIDER) or ("openai" if url or key_env else "local")
        model = values.get(ENV_MODEL)
        if model is None:
            if provider != "local":
                raise _config_error(f"{ENV_MODEL} is required for provider {provider!r}")
            model = LOCAL_DEFAULT_MODEL
        fields: dict[str, Any] = {"provider": provider, "model": model}
        if url is not None:
            fields["url"] = url
        if key_env is not None:
            fields["api_key_env"] = key_env
        for name, field, parse in (
            (ENV_DIMENSIONS, "dimensions", int),
            (ENV_BATCH_SIZE, "batch_size", int),
            (ENV_TIMEOUT, "timeout", float),
            (ENV_MAX_RETRIES, "max_retries", int),
            (ENV_MAX_TOKENS, "max_tokens", int),
        ):
            if name in values:
                try:
                    fields[field] = parse(values[name])
                except ValueError:
                    raise _config_error(
                        f"{name} must be a number, not {values[name][:40]!r}"
                    ) from None
        for name, field in ((ENV_NORMALIZE, "normalize"), (ENV_INPUT_TYPE, "input_type")):
            if name in values:
                flag = values[name].strip().lower()
                if flag not in _TRUE | _FALSE:
                    raise _config_error(f"{name} must be true or false")
                fields[field] = flag in _TRUE
        return cls(**fields)
