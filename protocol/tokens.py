"""Token counting for capacity (R31): a pluggable :class:`Tokenizer` and its offline default.

The compiler needs one number per piece of text: how many input tokens the
model will bill for it. The right answer depends on the model, so the counter
is pluggable; the default needs nothing from the network and no vocabulary
file:

* :class:`EstimateTokenizer` (the default, :data:`DEFAULT_TOKENIZER`) —
  :func:`protocol.state.estimate_tokens`: each CJK ideograph, kana or hangul
  syllable is one token, everything else one token per four characters
  (rounded up). It overestimates English prose a little and code a little
  less; the reserve kept for the answer absorbs the difference.
* :class:`CallableTokenizer` — wraps any ``str -> int`` function.
* :class:`EncodingTokenizer` — wraps a tiktoken-like encoding (anything with
  ``encode_ordinary(text)`` or ``encode(text)`` returning a sequence of ids)::

      import tiktoken
      from protocol.tokens import EncodingTokenizer
      tokenizer = EncodingTokenizer(tiktoken.get_encoding("o200k_base"))

:func:`as_tokenizer` turns whatever a caller passes (None, a tokenizer, an
encoding or a plain function) into a :class:`Tokenizer`. A tokenizer must be
deterministic (the same text always gives the same count) and pure: the
compiler caches counts per rendered piece.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from protocol.state import estimate_tokens


@runtime_checkable
class Tokenizer(Protocol):
    """Counts the input tokens of a text. Must be deterministic and side-effect free."""

    name: str

    def count(self, text: str) -> int:
        """The number of tokens *text* takes in a model request (never negative)."""


class EstimateTokenizer:
    """The offline default, :func:`protocol.state.estimate_tokens`: CJK 1/char, else ~4 chars."""

    name = "estimate"

    def count(self, text: str) -> int:
        """Estimated tokens of *text*."""
        return estimate_tokens(text)

    def __repr__(self) -> str:
        return "EstimateTokenizer()"


class CallableTokenizer:
    """A tokenizer from a plain function ``text -> count``."""

    __slots__ = ("_fn", "name")

    def __init__(self, fn: Callable[[str], int], name: str | None = None) -> None:
        self._fn = fn
        self.name: str = name or str(getattr(fn, "__name__", "callable"))

    def count(self, text: str) -> int:
        """``fn(text)``, checked to be a non-negative int."""
        n = self._fn(text)
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise TypeError(f"tokenizer {self.name!r} returned {n!r}, not a non-negative int")
        return n

    def __repr__(self) -> str:
        return f"CallableTokenizer({self.name!r})"


class EncodingTokenizer:
    """A tokenizer over a tiktoken-like encoding: the length of the encoded ids.

    ``encode_ordinary`` is preferred when present (it reads special-token text
    such as ``<|endoftext|>`` as ordinary text instead of refusing it, which is
    what a request carrying untrusted tool output needs); otherwise ``encode``.
    """

    __slots__ = ("_encode", "name")

    def __init__(self, encoding: Any, name: str | None = None) -> None:
        encode = getattr(encoding, "encode_ordinary", None) or getattr(encoding, "encode", None)
        if not callable(encode):
            raise TypeError("an encoding needs an encode_ordinary(text) or encode(text) method")
        self._encode: Callable[[str], Sequence[Any]] = encode
        self.name: str = name or str(getattr(encoding, "name", type(encoding).__name__))

    def count(self, text: str) -> int:
        """The number of token ids *text* encodes to."""
        return len(self._encode(text))

    def __repr__(self) -> str:
        return f"EncodingTokenizer({self.name!r})"


DEFAULT_TOKENIZER: Tokenizer = EstimateTokenizer()
"""The documented offline default, shared (it holds no state)."""


def as_tokenizer(value: Tokenizer | Callable[[str], int] | Any | None) -> Tokenizer:
    """A :class:`Tokenizer` from None (the default), a tokenizer, an encoding or a function.

    Anything with a ``count`` method and a ``name`` is taken as is; an object
    with ``encode_ordinary``/``encode`` becomes an :class:`EncodingTokenizer`;
    any other callable a :class:`CallableTokenizer`.
    """
    if value is None:
        return DEFAULT_TOKENIZER
    if isinstance(value, (str, bytes)):
        raise TypeError(
            "a tokenizer cannot be a string; pass a Tokenizer, an encoding or a function"
        )
    if isinstance(value, Tokenizer):
        return value
    if callable(getattr(value, "encode_ordinary", None)) or callable(
        getattr(value, "encode", None)
    ):
        return EncodingTokenizer(value)
    if callable(value):
        return CallableTokenizer(value)
    raise TypeError(
        f"not a tokenizer: {type(value).__name__} (pass a Tokenizer, a tiktoken-like "
        "encoding or a function text -> int)"
    )
