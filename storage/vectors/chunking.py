"""Long texts cut into pieces an embedding model reads whole: a token budget per piece.

An embedding model reads a bounded number of tokens (all-MiniLM-L6-v2 256, e5 512,
OpenAI's text-embedding-3 8,191) and silently drops the rest of a longer input. A
document is therefore embedded in pieces of at most the embedder's budget
(:func:`storage.embeddings.token_budget`, less :data:`RESERVED_TOKENS` for the model's
own tokens: ``[CLS]``, ``[SEP]``, an instruction prefix such as e5's ``passage:``) and
the pieces' vectors are pooled (:func:`storage.vectors.documents.pooled`).

Tokens are estimated without the model's tokenizer (none is downloaded or required),
by one linear scan of the text (:func:`estimate`):

* whitespace costs nothing;
* a CJK ideograph, kana or Hangul syllable is one token (WordPiece splits CJK text into
  characters; SentencePiece models need at most that);
* any other character that is neither a letter nor a digit (punctuation, symbols,
  emoji) is one token;
* a run of letters and digits is ``ceil(len / 3)`` tokens when it is ASCII letters only
  (an English word is 1.3 WordPiece tokens on average, 4.7 characters long: the
  estimate is high), else ``ceil(len / 2)`` (numbers, identifiers, other scripts).

The estimate errs high on prose and CJK, so a piece holds fewer tokens than the model
could read rather than more; random identifiers and hexadecimal can still cost more
real tokens than estimated, in which case the model drops the tail of that piece only.

Bounds (hostile input): a piece is also at most
:data:`~storage.vectors.format.MAX_EMBED_CHARS` characters, a document at most
:data:`~storage.vectors.format.MAX_EMBED_CHUNKS` pieces, and only its first
:data:`~storage.vectors.format.MAX_EMBED_TEXT` characters are read; the scan is linear
(one regular expression of single character classes, no nesting).
"""

from __future__ import annotations

import re

from storage.vectors.format import MAX_EMBED_CHARS, MAX_EMBED_CHUNKS

RESERVED_TOKENS = 8
"""Tokens of a model's window left for its own tokens (``[CLS]``, ``[SEP]``, a prefix)."""
MIN_PIECE_TOKENS = 16
"""The smallest budget a piece is given, whatever the embedder says."""

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_UNIT = re.compile(rf"\s+|[{_CJK}]|[^\W_{_CJK}]+|.", re.DOTALL)
"""One unit of the estimate: a whitespace run, a CJK character, a letter-digit run, or
any other single character."""


def _per(run: str) -> int:
    """Characters per estimated token of a letter-digit run."""
    return 3 if run.isascii() and run.isalpha() else 2


def _cost(unit: str) -> int:
    """The estimated tokens of one :data:`_UNIT` match."""
    if unit[0].isspace():
        return 0
    if len(unit) == 1:
        return 1
    return -(-len(unit) // _per(unit))


def estimate(text: str) -> int:
    """The estimated tokens of *text* (the rules in the module's docstring)."""
    return sum(_cost(m.group()) for m in _UNIT.finditer(text))


def chunks(text: str, max_tokens: int) -> list[str]:
    """*text* cut into pieces of at most *max_tokens* less :data:`RESERVED_TOKENS`
    estimated tokens (at least :data:`MIN_PIECE_TOKENS`) and at most
    :data:`~storage.vectors.format.MAX_EMBED_CHARS` characters; at most
    :data:`~storage.vectors.format.MAX_EMBED_CHUNKS` pieces (the rest is not embedded).

    Cuts fall between two units (a run of letters and digits is cut only when it alone
    exceeds a piece); whitespace alone between two pieces is dropped, so every piece
    but an all-whitespace text's holds a token. An empty text is one empty piece.
    Linear in the text scanned.
    """
    budget = max(MIN_PIECE_TOKENS, max_tokens - RESERVED_TOKENS)
    out: list[str] = []
    start = used = 0  # the piece under way is text[start:], holding `used` tokens
    for m in _UNIT.finditer(text):
        at, end = m.span()
        cost = _cost(m.group())
        if not cost:
            while end - start > MAX_EMBED_CHARS:  # whitespace alone fills the piece
                if used:
                    out.append(text[start : start + MAX_EMBED_CHARS])
                    if len(out) == MAX_EMBED_CHUNKS:
                        return out
                start, used = start + MAX_EMBED_CHARS, 0
            continue
        if used + cost > budget or end - start > MAX_EMBED_CHARS:
            if used:
                out.append(text[start:at])
                if len(out) == MAX_EMBED_CHUNKS:
                    return out
            start, used = at, 0
            if cost > budget or end - at > MAX_EMBED_CHARS:  # one run longer than a piece
                per = _per(m.group())
                step = min(budget * per, MAX_EMBED_CHARS)
                while end - start > step:
                    out.append(text[start : start + step])
                    start += step
                    if len(out) == MAX_EMBED_CHUNKS:
                        return out
                cost = -(-(end - start) // per)
        used += cost
    if used or not out:
        out.append(text[start:])
    return out
