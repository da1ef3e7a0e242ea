"""Snippets of search hits: about 160 characters around the best window of query-term matches."""

from __future__ import annotations

import re

from protocol.view import ReadView
from storage.search.documents import frame_text
from storage.search.format import FRAME_BASE, _frame_id
from storage.search.text import is_spaced, normalize

SNIPPET_CHARS = 160
"""Characters of a snippet, not counting the match markers and ellipses."""
SNIPPET_SCAN_CHARS = 1 << 15
"""Characters of a document searched for the snippet; past them the snippet is its start."""


def _doc_text(view: ReadView, doc: int, rec: bytes) -> str:
    if doc >= FRAME_BASE:
        frame_id = _frame_id(rec)
        f = view.frame(frame_id)
        return frame_text(f) if f is not None else frame_id
    return view.event_chunk(doc, 0, SNIPPET_SCAN_CHARS) or ""


class _Highlighter:
    """Builds ~160-character snippets around the best window of query-term matches."""

    OPEN = "«"
    CLOSE = "»"
    MAX_MATCHES = 256

    def __init__(self, weights: dict[str, float]) -> None:
        self.weights = weights
        parts = []
        for term in sorted(weights, key=lambda t: (-len(t), t)):
            escaped = re.escape(term)
            parts.append(rf"(?<![^\W_]){escaped}(?![^\W_])" if is_spaced(term) else escaped)
        self.pattern = re.compile("|".join(parts)) if parts else None

    def snippet(self, text: str) -> str:
        if not text:
            return ""
        norm = normalize(text)
        matches: list[tuple[int, int, str]] = []
        if self.pattern is not None:
            for m in self.pattern.finditer(norm.text):
                matches.append((m.start(), m.end(), m.group()))
                if len(matches) >= self.MAX_MATCHES:
                    break
        if not matches:
            return _clip(text, 0, SNIPPET_CHARS)
        # The window (in normalized offsets) holding the most weight of distinct terms.
        best_i, best_w = 0, -1.0
        for i, (start, _, _) in enumerate(matches):
            seen: set[str] = set()
            w = 0.0
            for _, e, term in matches[i:]:
                if e - start > SNIPPET_CHARS:
                    break
                if term not in seen:
                    seen.add(term)
                    w += self.weights.get(term, 0.0)
            if w > best_w:
                best_i, best_w = i, w
        anchor = matches[best_i][0]
        size = len(norm.text)
        win_start = 0 if size <= SNIPPET_CHARS else max(0, anchor - SNIPPET_CHARS // 4)
        if win_start:
            # Start at a word edge when there is one shortly before.
            space = norm.text.rfind(" ", max(0, win_start - 24), anchor)
            if space >= 0:
                win_start = space + 1
        win_end = min(size, win_start + SNIPPET_CHARS)
        spans: list[tuple[int, int]] = []
        for s, e, _ in matches:
            if s < win_start or e > win_end:
                continue
            o_s, o_e = norm.span(s, e)
            if spans and o_s < spans[-1][1]:
                spans[-1] = (spans[-1][0], max(spans[-1][1], o_e))
            else:
                spans.append((o_s, o_e))
        o_start = norm.span(win_start, win_start + 1)[0] if win_start < len(norm.text) else 0
        o_end = norm.span(win_end - 1, win_end)[1] if win_end > 0 else 0
        out = ["…"] if o_start > 0 else []
        pos = o_start
        for s, e in spans:
            out.append(text[pos:s])
            out.append(self.OPEN + text[s:e] + self.CLOSE)
            pos = e
        out.append(text[pos:o_end])
        if o_end < len(text):
            out.append("…")
        return "".join(out)


def _clip(text: str, start: int, width: int) -> str:
    piece = text[start : start + width]
    return piece + ("…" if start + width < len(text) else "")
