"""Pieces of a long text for an embedding model: within the token budget, bounded, in order."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from storage.vectors.chunking import MIN_PIECE_TOKENS, RESERVED_TOKENS, chunks, estimate
from storage.vectors.format import MAX_EMBED_CHARS, MAX_EMBED_CHUNKS
from tests.examples import examples

UNITS = st.sampled_from(
    ["refund", "the", "a", "tablet", "2026", "0x3f9a", "部署", "上海", "に", "한국", ",", ".", "🙂"]
)
SPACES = st.sampled_from([" ", " ", " ", "\n", "\t", "  "])
TEXTS = st.lists(st.tuples(UNITS, SPACES), max_size=400).map(
    lambda parts: "".join(u + s for u, s in parts)
)


def check(text: str, max_tokens: int) -> list[str]:
    pieces = chunks(text, max_tokens)
    budget = max(MIN_PIECE_TOKENS, max_tokens - RESERVED_TOKENS)
    assert 1 <= len(pieces) <= MAX_EMBED_CHUNKS
    assert all(estimate(p) <= budget and len(p) <= MAX_EMBED_CHARS for p in pieces)
    # In order, each a slice of the text after the one before.
    at = 0
    for p in pieces:
        found = text.find(p, at)
        assert found >= 0 and text[at:found].isspace() | (found == at)
        at = found + len(p)
    return pieces


@settings(max_examples=examples(300), deadline=None)
@given(TEXTS, st.sampled_from([16, 24, 64, 256, 512, 8191]))
def test_every_piece_is_within_the_budget_and_the_pieces_cover_the_text(
    text: str, max_tokens: int
) -> None:
    pieces = check(text, max_tokens)
    if len(pieces) < MAX_EMBED_CHUNKS:  # nothing was left out: every token is in a piece
        assert "".join(pieces).split() == text.split()
        assert sum(estimate(p) for p in pieces) == estimate(text)


def test_hostile_texts_are_cut_into_a_bounded_number_of_pieces() -> None:
    for text in (
        "",
        " " * 200_000,
        " " * 200_000 + "tail",
        "y" * 200_000,  # one word longer than any piece
        "7" * 50_000,
        "部" * 100_000,
        "!" * 100_000,
        "x " * 100_000,
        "🙂" * 30_000,
        "word " * 10 + "z" * 9_000 + " end",
    ):
        pieces = check(text, 256)
        assert pieces == [""] if not text else pieces[0]
    # A word longer than a piece is cut inside it, each part within the budget.
    long = chunks("y" * 2_000, 64)
    assert "".join(long) == "y" * 2_000 and len(long) == -(-2_000 // ((64 - RESERVED_TOKENS) * 3))
    # Whitespace alone between two pieces is dropped; an all-whitespace text is one piece.
    assert chunks("   ", 256) == ["   "]
    assert chunks("a b", 256) == ["a b"]


def test_the_estimate_counts_what_a_model_reads() -> None:
    assert estimate("") == estimate("   \n\t ") == 0
    assert estimate("the refund") == 1 + 2  # ASCII words: a token per three letters
    assert estimate("order 4471") == 2 + 2  # digits: a token per two
    assert estimate("上海部署") == 4  # a token per CJK character
    assert estimate("ok, done!") == 1 + 1 + 2 + 1  # punctuation: a token each
