"""Rendering records into input text, with the caches that make a compile cheap (R35, R36).

A :class:`Renderer` turns an observation or a frame into its entry text and
token count (a :class:`Piece`), and remembers both: observations by event id,
sequence number and size (their text never changes), frames by id and
record (a hit needs an equal record, checked cheaply by ``updated_version``
first), the ``@eN`` references of frame sources by event id. It also holds
the fixed pieces every input starts with: the system message (the protocol
text it was given and the model's limits) and the observation headers.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.compiler.config import (
    BATCH_HEADER,
    LONG_KINDS,
    OBSERVATIONS_HEADER,
    CompilerConfig,
    limits_text,
)
from protocol.compiler.sections import indent
from protocol.sexpr import print_form
from protocol.state import CANDIDATE, RETIRING, Event, Frame
from protocol.tokens import EstimateTokenizer, Tokenizer
from protocol.view import ReadView


@dataclass(slots=True)
class Piece:
    """A rendered text and its token count."""

    text: str
    tokens: int


class Renderer:
    """Renders and caches the entries of one context's inputs. Not thread-safe.

    :meth:`begin` starts a compile (another context, another ``meta.created``,
    clears the caches); :meth:`prune` ends it, keeping the cache near the size
    of what the recent inputs used.
    """

    def __init__(self, config: CompilerConfig, tokenizer: Tokenizer, protocol_text: str) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self._estimate = isinstance(tokenizer, EstimateTokenizer)
        text = protocol_text.rstrip("\n")
        self.protocol = self.piece((text + "\n\n" if text else "") + limits_text(config))
        """The system message: the protocol text (if any), then the model's limits."""
        self.obs_header = self.piece(OBSERVATIONS_HEADER)
        self.batch_header = self.piece(BATCH_HEADER)
        self._identity: float | None = None
        self._obs: dict[tuple[str, int, int], Piece] = {}
        self._frames: dict[str, tuple[Frame, Piece]] = {}
        self._seqs: dict[str, int | None] = {}
        self._used_obs: set[tuple[str, int, int]] = set()
        self._used_frames: set[str] = set()

    def begin(self, identity: float) -> None:
        """Start a compile of the context created at *identity* (``meta.created``)."""
        if self._identity != identity:
            self._identity = identity
            self._obs.clear()
            self._frames.clear()
            self._seqs.clear()
        self._used_obs = set()
        self._used_frames = set()

    def prune(self) -> None:
        """End a compile: keep the cache near the size of what the last inputs used."""
        if len(self._obs) > 2 * len(self._used_obs) + 1024:
            self._obs = {k: v for k, v in self._obs.items() if k in self._used_obs}
        if len(self._frames) > 2 * len(self._used_frames) + 1024:
            self._frames = {k: v for k, v in self._frames.items() if k in self._used_frames}
        if len(self._seqs) > 65_536:
            self._seqs.clear()

    def count(self, text: str) -> int:
        """Tokens of *text* by this renderer's tokenizer."""
        return self.tokenizer.count(text)

    def piece(self, text: str) -> Piece:
        """*text* with its token count."""
        return Piece(text, self.tokenizer.count(text))

    def observation(self, view: ReadView, e: Event) -> Piece:
        """The entry of observation *e*, ``@eN kind [session] : text`` (cached)."""
        key = (e.id, e.seq, e.size)
        self._used_obs.add(key)
        p = self._obs.get(key)
        if p is None:
            p = self._obs[key] = self._render_obs(view, e)
        return p

    def _render_obs(self, view: ReadView, e: Event) -> Piece:
        cfg = self.config
        head = f"{e.ref} {e.kind} [{e.session}] : "
        text: str | None
        cut = False
        if e.kind in LONG_KINDS and self._estimate:
            # The stored estimate is this tokenizer's count: no need to read it all.
            cut = e.tokens > cfg.long_result_tokens
            if cut:
                text = view.event_chunk(e.seq, 0, cfg.preview_chars)
            else:
                text = view.event_content(e.seq)
        else:
            text = view.event_content(e.seq)
            if text is not None and e.kind in LONG_KINDS:
                cut = self.tokenizer.count(text) > cfg.long_result_tokens
                if cut:
                    text = text[: cfg.preview_chars]
        if text is None:
            return self.piece(f"{head}(text unavailable; read_event {e.ref})")
        body = indent(text)
        if cut and e.size > len(text):
            more = e.size - len(text)
            body += f"\n  (… {more} more chars; read_event {e.ref} for the rest)"
        return self.piece(head + body)

    def frame(self, view: ReadView, f: Frame) -> Piece:
        """The entry of frame *f*: its header line and its body (cached)."""
        self._used_frames.add(f.id)
        hit = self._frames.get(f.id)
        # Equal records render equally; comparing whole records (not just the
        # version) keeps the cache right even for a fork that reuses versions.
        if hit is not None and hit[0].updated_version == f.updated_version and hit[0] == f:
            return hit[1]
        p = self.piece(self._render_frame(view, f))
        self._frames[f.id] = (f, p)
        return p

    def _render_frame(self, view: ReadView, f: Frame) -> str:
        parts = [f"frame {f.id} r{f.revision} {f.lifecycle}"]
        if f.trust == CANDIDATE:
            parts.append("[candidate]")
        if f.protected:
            parts.append("protected")
        if f.lifecycle == RETIRING:
            parts.append(f"due-tick {f.due_tick}")
            if f.retire_reason:
                parts.append("reason " + print_form(f.retire_reason))
        if f.sources:
            parts.append("(from " + " ".join(self._source_ref(view, s) for s in f.sources) + ")")
        line = " ".join(parts)
        if f.body:
            line += "\n  " + " ".join(print_form(x) for x in f.body)
        return line

    def _source_ref(self, view: ReadView, source: str) -> str:
        if not source.startswith("ev:"):
            return source
        if source in self._seqs:
            seq = self._seqs[source]
        else:
            seq = self._seqs[source] = view.event_seq(source)
        return f"@e{seq}" if seq is not None else source
