"""Snippets of search hits: about 160 characters around the best window of query-term matches.

Word terms are found in the normalized text by a pattern (word edges required
for spaced scripts); stem terms by stemming the text's words
(:data:`~storage.search.morphology.WORDS`) with the index's languages, so
``keybindings`` is highlighted for the query ``keybinding``.
"""

from __future__ import annotations

import re

from protocol.view import ReadView
from storage.search.documents import frame_text
from storage.search.format import FRAME_BASE, _frame_id
from storage.search.morphology import WORDS, Morphology
from storage.search.text import Normalized, _plain_word, is_spaced, normalize

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

    def __init__(
        self,
        weights: dict[str, float],
        stems: dict[str, float] | None = None,
        morphology: Morphology | None = None,
    ) -> None:
        self.stems = stems if stems and morphology is not None else {}
        self.morphology = morphology
        self.weights = {**weights, **self.stems}
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
        # Stem matches are looked for in the whole text only when no word matched;
        # otherwise the words choose the window and stems are marked inside it.
        stems_in_window = bool(self.stems and matches)
        if self.stems and not matches:
            matches = self._stem_matches(text, norm, matches, 0, len(norm.text))
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
        if stems_in_window:
            matches = self._stem_matches(text, norm, matches, win_start, win_end)
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

    def _stem_matches(
        self,
        text: str,
        norm: Normalized,
        matches: list[tuple[int, int, str]],
        start: int,
        end: int,
    ) -> list[tuple[int, int, str]]:
        """*matches* and the words in ``norm.text[start:end]`` whose stem terms the query
        looks up, in order of start."""
        assert self.morphology is not None
        morph = self.morphology
        get = morph._cache.get
        wanted = self.stems
        found_at: list[tuple[int, int, str]] = []
        if end - start <= 4 * SNIPPET_CHARS:
            # A window: stem each word.
            for m in WORDS.finditer(norm.text, start, end):
                word = m.group()
                stems = get(word)
                if stems is None:
                    stems = morph.stems(word)
                for term in stems:
                    if term in wanted:
                        found_at.append((m.start(), m.end(), term))
                        break
        else:
            # A whole text: stem each distinct word once, then find the ones that match.
            forms: dict[str, str] = {}
            for word in set(WORDS.findall(norm.text, start, end)):
                stems = get(word)
                if stems is None:
                    stems = morph.stems(word)
                for term in stems:
                    if term in wanted:
                        forms[word] = term
                        break
            if forms:
                alternatives = "|".join(
                    re.escape(f) for f in sorted(forms, key=lambda f: (-len(f), f))
                )
                pattern = re.compile(rf"(?<![\w'\u2019])(?:{alternatives})(?![\w'\u2019])")
                for m in pattern.finditer(norm.text, start, end):
                    found_at.append((m.start(), m.end(), forms[m.group()]))
        added = 0
        for s, e, term in found_at:
            if _plain_word(text, *norm.span(s, e)):
                matches.append((s, e, term))
                added += 1
                if added >= self.MAX_MATCHES:
                    break
        matches.sort(key=lambda x: (x[0], x[1]))
        return matches


def _clip(text: str, start: int, width: int) -> str:
    piece = text[start : start + width]
    return piece + ("…" if start + width < len(text) else "")
