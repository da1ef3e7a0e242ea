"""Lexical search over a context: the index fed by the outbox, its text analysis and ranking."""
