"""Retrieval quality on the judged dev set (``benchmarks/search_dev``), every engine in one run.

The dev set (its README says how it was built and judged) holds natural-language
questions about earlier turns of STATE-Bench conversations, each with the ids
of every turn that answers it. A turn is one document: a message's text
(``<conversation>#<message index>``) or one tool call with its arguments and
result (``#<message index>.<call index>``, the JSON the load test records).
English questions search the trajectories themselves; Chinese and mixed
questions search the translated conversations of ``corpus_<lang>.jsonl``
(their tool calls are the original ones).

Two scopes:

* ``conversation`` (the headline): each conversation is one context and a
  question searches its own conversation;
* ``pool``: a question searches a context holding every conversation of its
  English domain (100 conversations, thousands of turns, each conversation a
  session of its own) or, for Chinese and mixed, every translated conversation
  of its language. Harder, and closer to
  one long-running agent's memory; the relevant turns are still only the
  judged ones.

Engines, on the same documents and questions: Morphz lexical with stemming off
(``languages=()``) and on (the default languages); SQLite FTS5 with the
``unicode61`` tokenizer and with ``porter``, queried with the question's words
OR-ed and ranked by ``bm25``; and, when the embedding model is installed
(the ``morphz[embed]`` extra), a brute-force dense scan (numpy cosine over
all-MiniLM-L6-v2 embeddings), Morphz's vector index with the same model, Morphz
hybrid (:meth:`service.search.Searcher.find`: its lexical and vector rankings,
50 deep, fused by reciprocal rank) and FTS5 porter + dense fused the same way.
Document embeddings are cached on disk (``--cache-dir``), so reruns skip the
model for texts already embedded.

Metrics per language, split and scope, top 10: recall@5 and recall@10 (the
share of a question's judged turns in the top k), hit@10 (any judged turn in
the top 10) and MRR (1 / rank of the first judged turn, 0 past 10).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import testbed  # noqa: F401  (first: puts this checkout on sys.path)

from service.store import Store
from storage.search.index import LexicalIndex

DEV_DIR = Path(__file__).resolve().parent / "search_dev"
LANGS = ("en", "zh", "mixed", "long", "chat", "chat-other", "chat-long")
"""Figure groups: the three languages of single conversations, ``long`` (English questions
over a customer's whole multi-session history, ``long_conversations.jsonl``), ``chat``
(English questions over two friends' dated multi-session chats, ``chat_turns.jsonl``),
``chat-other`` (each chat question that names one of its two friends, asked with the other
one's name instead: the judged turns unchanged, :func:`misattributed`) and ``chat-long``
(each chat question asked of its chat lengthened with the other chats of its split, their
friends renamed as its own: :func:`long_chat_docs`)."""
LONG_CHAT = "chat-long/"
"""The prefix of a ``chat-long`` question's conversation (``chat-long/c1``)."""
MISATTRIBUTED = "misattributed"
"""The kind of a ``chat-other`` question."""
SPLITS = ("dev", "test")
TOP = 10
DEPTH = 50
"""How many hits of each ranking a fusion takes."""
RESCORE_WEIGHTS = (0.25, 0.5, 1.0)
"""Weights of the model's order in :class:`Rescored` (one engine each)."""
MODEL = "all-MiniLM-L6-v2"
OBSERVE_BATCH = 1000
"""Observations recorded per call (a call takes at most 1,024)."""
KINDS = {"user": "user_message", "assistant": "external", "tool": "tool_result"}


# -- the dev set -----------------------------------------------------------------


@dataclass(frozen=True)
class Question:
    id: str
    lang: str
    split: str
    domain: str
    conversation: str
    source: str
    question: str
    turns: tuple[str, ...]
    kind: str = ""
    """A chat question's kind (``single``, ``temporal``, ``multi``, ``said``, ``change``)."""
    answer: str = ""
    """A chat question's short answer (for reading failures; not scored)."""


@dataclass(frozen=True)
class Doc:
    id: str
    kind: str
    text: str
    session: str = "main"
    time: float | None = None
    """When it was said (seconds since the epoch); None: the document's place in its scope."""


def group(q: Question) -> str:
    """The figure group of a question: its language, ``long`` for a long conversation's,
    ``chat`` for a chat's."""
    if q.domain == "chat":
        if q.conversation.startswith(LONG_CHAT):
            return "chat-long"
        return "chat-other" if q.kind == MISATTRIBUTED else "chat"
    return "long" if q.conversation.startswith("long/") else q.lang


def _rows(path: Path, required: bool = True) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSON Lines file, one a non-blank line; none if the file is
    missing and not *required*."""
    if not required and not path.exists():
        return
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def long_conversations(dev_dir: Path = DEV_DIR) -> dict[str, list[str]]:
    """Each long conversation (``long/<domain>/<customer>``) and its sessions (trajectories)
    in order."""
    rows = _rows(dev_dir / "long_conversations.jsonl", required=False)
    return {row["conversation"]: list(row["sessions"]) for row in rows}


def long_docs(trajectories: Path, sessions: Sequence[str]) -> list[Doc]:
    """A long conversation's documents: every session's turns in order, each turn recorded
    with its session (the trajectory it comes from)."""
    return [
        Doc(d.id, d.kind, d.text, source)
        for source in sessions
        for d in trajectory_docs(trajectories, source)
    ]


def load_questions(dev_dir: Path = DEV_DIR) -> list[Question]:
    """Every judged question of ``questions.jsonl`` then ``chat_questions.jsonl`` (when
    there), in file order, then the chat questions' :func:`misattributed` copies and their
    copies asked of the lengthened chats (``-long`` after the id, conversation
    ``chat-long/<chat>``, :func:`long_chat_docs`)."""
    out = []
    for name in ("questions.jsonl", "chat_questions.jsonl"):
        for row in _rows(dev_dir / name, required=name == "questions.jsonl"):
            out.append(Question(**{**row, "turns": tuple(row["turns"])}))
    chat = [q for q in out if q.domain == "chat"]
    longer = [
        replace(q, id=f"{q.id}-long", conversation=LONG_CHAT + q.conversation.split("/", 1)[1])
        for q in chat
    ]
    return out + misattributed(chat, dev_dir) + longer


def misattributed(questions: Sequence[Question], dev_dir: Path = DEV_DIR) -> list[Question]:
    """Each chat question that names exactly one of its chat's two speakers, asked with the
    other's name in its place (``-other`` after its id, kind :data:`MISATTRIBUTED`), the
    judged turns unchanged: a user who misremembers who said what, or a benchmark's
    adversarial question, still wants the turns that answer it."""
    speakers: dict[str, set[str]] = {}
    for row in _rows(dev_dir / "chat_turns.jsonl", required=False):
        speakers.setdefault(row["conversation"], set()).add(row["speaker"])
    out = []
    for q in questions:
        pair = sorted(speakers.get(q.conversation, ()))
        named = [p for p in pair if re.search(rf"\b{re.escape(p)}\b", q.question)]
        if len(pair) != 2 or len(named) != 1:
            continue
        other = pair[1] if named[0] == pair[0] else pair[0]
        text = re.sub(rf"\b{re.escape(named[0])}\b", other, q.question)
        out.append(replace(q, id=f"{q.id}-other", question=text, kind=MISATTRIBUTED))
    return out


def chat_docs(dev_dir: Path = DEV_DIR) -> dict[str, list[Doc]]:
    """Each chat (``chat/<id>``) and its turns in order: ``<chat>#<session>.<turn>``, the
    text ``<speaker>: <text>`` (as a chat log records it) from the user, in the session
    ``<chat>/<session>``, at its session's date and time (UTC) plus a second a turn."""
    out: dict[str, list[Doc]] = {}
    for row in _rows(dev_dir / "chat_turns.jsonl", required=False):
        conv = row["conversation"]
        start = datetime.strptime(row["date"], "%Y-%m-%d %H:%M").replace(tzinfo=UTC)
        out.setdefault(conv, []).append(
            Doc(
                f"{conv}#{row['session']}.{row['turn']}",
                "user_message",
                f"{row['speaker']}: {row['text']}",
                f"{conv}/{row['session']}",
                start.timestamp() + row["turn"],
            )
        )
    return out


def long_chat_docs(dev_dir: Path = DEV_DIR) -> dict[str, list[Doc]]:
    """Each chat lengthened (``chat-long/<chat>``): its own sessions and those of every other
    chat of its split, sessions in date order, the other chats' two friends renamed as its
    own (in the order each pair first speaks; in labels and in the text).

    Five chats of about 110 turns make one of about 550, as long as the public benchmarks'
    conversations, where the same two people also talk about things the question does not
    ask about. The judged turns are the chat's own; another chat's turn is never judged, even
    where, renamed, it happens to answer."""
    rows = list(_rows(dev_dir / "chat_turns.jsonl", required=False))
    splits = {
        row["conversation"]: row["split"]
        for row in _rows(dev_dir / "chat_questions.jsonl", required=False)
    }
    speakers: dict[str, list[str]] = {}
    for row in rows:
        pair = speakers.setdefault(row["conversation"], [])
        if row["speaker"] not in pair:
            pair.append(row["speaker"])
    out: dict[str, list[Doc]] = {}
    for conv, pair in speakers.items():
        if len(pair) != 2 or conv not in splits:
            continue
        names: dict[str, dict[str, str]] = {
            other: dict(zip(others, pair, strict=True))
            for other, others in speakers.items()
            if len(others) == 2 and splits.get(other) == splits[conv]
        }
        chosen = [row for row in rows if row["conversation"] in names]
        chosen.sort(key=lambda r: (r["date"], r["conversation"], r["session"], r["turn"]))
        docs = []
        for row in chosen:
            rename = names[row["conversation"]]
            text = row["text"]
            for old, new in rename.items():
                if old != new:
                    text = re.sub(rf"\b{re.escape(old)}\b", new, text)
            start = datetime.strptime(row["date"], "%Y-%m-%d %H:%M").replace(tzinfo=UTC)
            docs.append(
                Doc(
                    f"{row['conversation']}#{row['session']}.{row['turn']}",
                    "user_message",
                    f"{rename[row['speaker']]}: {text}",
                    f"{row['conversation']}/{row['session']}",
                    start.timestamp() + row["turn"],
                )
            )
        out[LONG_CHAT + conv.split("/", 1)[1]] = docs
    return out


def trajectory_docs(trajectories: Path, source: str, prefix: str | None = None) -> list[Doc]:
    """The documents of one trajectory (``<domain>/<file stem>``): every message with text
    and every tool call, ids ``<prefix>#<i>`` and ``<prefix>#<i>.<j>``."""
    prefix = prefix or source
    path = trajectories / f"{source}.json"
    messages = json.loads(path.read_text(encoding="utf-8"))["conversation"]
    out = []
    for i, m in enumerate(messages):
        if m["role"] == "system":
            continue
        if m.get("content"):
            out.append(Doc(f"{prefix}#{i}", KINDS[m["role"]], str(m["content"])))
        for j, call in enumerate(m.get("tool_calls") or ()):
            text = json.dumps(
                {
                    "name": call["name"],
                    "arguments": call.get("arguments"),
                    "result": call.get("result"),
                },
                ensure_ascii=False,
                sort_keys=True,
            )
            out.append(Doc(f"{prefix}#{i}.{j}", KINDS["tool"], text))
    return out


def translated_docs(dev_dir: Path, trajectories: Path, lang: str) -> dict[str, list[Doc]]:
    """The translated conversations of *lang* (``corpus_<lang>.jsonl``), by conversation id
    (``<lang>/<source>``): the translated messages, then each message's original tool calls,
    in message order."""
    by_conv: dict[str, dict[int, str]] = {}
    sources: dict[str, str] = {}
    for row in _rows(dev_dir / f"corpus_{lang}.jsonl"):
        by_conv.setdefault(row["conversation"], {})[int(row["turn"])] = row["text"]
        sources[row["conversation"]] = row["source"]
    out: dict[str, list[Doc]] = {}
    for conv, texts in by_conv.items():
        docs = []
        for d in trajectory_docs(trajectories, sources[conv], conv):
            msg = d.id.rsplit("#", 1)[1]
            if "." in msg:
                docs.append(d)
            else:
                docs.append(Doc(d.id, d.kind, texts[int(msg)]))
        out[conv] = docs
    return out


def scopes(
    questions: Sequence[Question], trajectories: Path | None, dev_dir: Path = DEV_DIR
) -> tuple[dict[str, list[Doc]], dict[str, dict[str, str]]]:
    """The documents of every scope and, per scope kind, each question's scope id (chats
    need no *trajectories*; every other group does). A ``chat-long`` question has no pool:
    its lengthened chat already holds every chat of its split."""
    if trajectories is None:
        if any(q.domain != "chat" for q in questions):
            raise ValueError("only the chat questions can be asked without the trajectories")
        trajectories = Path()
    docs: dict[str, list[Doc]] = {}
    of: dict[str, dict[str, str]] = {"conversation": {}, "pool": {}}
    translated = {
        lang: translated_docs(dev_dir, trajectories, lang)
        if any(q.lang == lang for q in questions)
        else {}
        for lang in ("zh", "mixed")
    }
    longs = long_conversations(dev_dir)
    chats = chat_docs(dev_dir)
    longer = long_chat_docs(dev_dir) if any(group(q) == "chat-long" for q in questions) else {}
    for q in questions:
        if q.conversation not in docs:
            if q.conversation in longer:
                docs[q.conversation] = longer[q.conversation]
            elif q.domain == "chat":
                docs[q.conversation] = chats[q.conversation]
            elif q.conversation in longs:
                docs[q.conversation] = long_docs(trajectories, longs[q.conversation])
            elif q.lang == "en":
                docs[q.conversation] = trajectory_docs(trajectories, q.source)
            else:
                docs[q.conversation] = translated[q.lang][q.conversation]
        of["conversation"][q.id] = q.conversation
        if q.conversation in longer:
            continue  # the lengthened chats are already a pool of the chats of a split
        pool = f"pool:{q.domain}" if q.lang == "en" else f"pool:{q.lang}"
        if pool not in docs:
            if q.domain == "chat":
                docs[pool] = [d for c in sorted(chats) for d in chats[c]]
            elif q.lang == "en":
                files = sorted((trajectories / q.domain).glob("*.json"))
                docs[pool] = long_docs(trajectories, [f"{q.domain}/{f.stem}" for f in files])
            else:
                docs[pool] = [d for c in sorted(translated[q.lang]) for d in translated[q.lang][c]]
        of["pool"][q.id] = pool
    return docs, of


# -- metrics ---------------------------------------------------------------------


def recall_at(ranked: Sequence[str], relevant: Iterable[str], k: int) -> float:
    """The share of *relevant* in the first *k* of *ranked*."""
    rel = set(relevant)
    if not rel:
        raise ValueError("a judged question has at least one relevant turn")
    return len(rel.intersection(ranked[:k])) / len(rel)


def hit_at(ranked: Sequence[str], relevant: Iterable[str], k: int) -> float:
    """1.0 if any of *relevant* is in the first *k* of *ranked*, else 0.0."""
    return 1.0 if set(relevant).intersection(ranked[:k]) else 0.0


def reciprocal_rank(ranked: Sequence[str], relevant: Iterable[str], k: int = TOP) -> float:
    """1 / the rank of the first relevant document in the first *k*, else 0.0."""
    rel = set(relevant)
    for rank, ident in enumerate(ranked[:k], start=1):
        if ident in rel:
            return 1.0 / rank
    return 0.0


def score(ranked: Sequence[str], relevant: Sequence[str]) -> dict[str, float]:
    """The four metrics of one question."""
    return {
        "recall@5": recall_at(ranked, relevant, 5),
        "recall@10": recall_at(ranked, relevant, 10),
        "hit@10": hit_at(ranked, relevant, 10),
        "mrr": reciprocal_rank(ranked, relevant, TOP),
    }


def mean_scores(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    """The mean of each metric over *rows* (one per question)."""
    return {m: round(statistics.fmean(r[m] for r in rows), 3) for m in rows[0]} if rows else {}


def rrf(lists: Sequence[Sequence[str]], k: int = 60) -> list[str]:
    """Reciprocal-rank fusion of id rankings (Morphz's own :func:`fuse`, scores unused)."""
    from storage.vectors.fusion import fuse

    return [
        i for i, _, _ in fuse([(f"r{n}", [(d, 0.0) for d in r]) for n, r in enumerate(lists)], k)
    ]


# -- embeddings ------------------------------------------------------------------


class CachedEmbedder:
    """An embedder whose document and query vectors are cached on disk by text digest.

    Wraps the real one (``model_id`` and ``dimension`` pass through), so Morphz's vector
    index and the brute-force scan embed each text once across runs.
    """

    def __init__(self, inner: Any, cache_dir: Path) -> None:
        import numpy as np

        self.inner = inner
        self._np = np
        safe = re.sub(r"[^\w.-]+", "_", inner.model_id)
        self.path = cache_dir / f"{safe}.npz"
        self.cache: dict[str, Any] = {}
        if self.path.exists():
            data = np.load(self.path)
            self.cache = dict(zip(data["keys"].tolist(), data["vectors"], strict=True))
        self.embedded = 0
        self.embed_seconds = 0.0
        self.embedded_chars = 0

    @property
    def model_id(self) -> str:
        return str(self.inner.model_id)

    @property
    def dimension(self) -> int:
        return int(self.inner.dimension)

    @property
    def max_tokens(self) -> int:
        from storage.embeddings import token_budget

        return token_budget(self.inner)

    def embed(self, texts: Sequence[str], *, kind: str = "document") -> list[list[float]]:
        keys = [hashlib.blake2b(f"{kind}\0{t}".encode(), digest_size=16).hexdigest() for t in texts]
        missing = sorted(
            {k: t for k, t in zip(keys, texts, strict=True) if k not in self.cache}.items()
        )
        if missing:
            started = time.perf_counter()
            vectors = self.inner.embed([t for _, t in missing], kind=kind)
            self.embed_seconds += time.perf_counter() - started
            self.embedded += len(missing)
            self.embedded_chars += sum(len(t) for _, t in missing)
            for (k, _), v in zip(missing, vectors, strict=True):
                self.cache[k] = self._np.asarray(v, dtype=self._np.float32)
        return [self.cache[k].tolist() for k in keys]

    def matrix(self, texts: Sequence[str], kind: str = "document") -> Any:
        """The unit vectors of *texts* as one float32 matrix."""
        m = self._np.asarray(self.embed(texts, kind=kind), dtype=self._np.float32)
        norms = self._np.linalg.norm(m, axis=1, keepdims=True)
        return m / self._np.maximum(norms, 1e-12)

    def save(self) -> None:
        if not self.cache:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        keys = sorted(self.cache)
        tmp = self.path.with_suffix(".tmp.npz")
        self._np.savez(
            tmp, keys=self._np.array(keys), vectors=self._np.stack([self.cache[k] for k in keys])
        )
        os.replace(tmp, self.path)


def load_embedder(cache_dir: Path, config: Any = None) -> CachedEmbedder | None:
    """The embedder of *config* (an ``EmbedderConfig``: e.g. an OpenAI-compatible endpoint
    serving a multilingual model), else all-MiniLM-L6-v2 through Morphz's local embedder;
    cached. None when the local model's extra is not installed."""
    from adapters.embeddings import EmbedderConfig, EmbeddingError, LocalEmbedder, make_embedder

    if config is not None:
        return CachedEmbedder(make_embedder(config), cache_dir)
    try:
        inner = LocalEmbedder(EmbedderConfig(provider="local", model=MODEL, batch_size=64))
    except EmbeddingError:
        return None
    return CachedEmbedder(inner, cache_dir)


# -- engines ---------------------------------------------------------------------


class MorphzContexts:
    """One Morphz context per scope, its events the scope's documents in order."""

    def __init__(self, root: Path, docs: dict[str, list[Doc]]) -> None:
        self.store = Store(root)
        self.ctx: dict[str, Any] = {}
        self.ids: dict[str, dict[str, str]] = {}
        for n, (scope, ds) in enumerate(sorted(docs.items())):
            ctx = self.store.open(f"s{n}", sync=False)
            items = [
                {
                    "kind": d.kind,
                    "text": d.text,
                    "session": d.session,
                    "time": 1.0e9 + i if d.time is None else d.time,
                }
                for i, d in enumerate(ds)
            ]
            replies = [
                r
                for i in range(0, len(items), OBSERVE_BATCH)
                for r in ctx.observe_many(items[i : i + OBSERVE_BATCH])
            ]
            self.ctx[scope] = ctx
            self.ids[scope] = {r.ref: d.id for r, d in zip(replies, ds, strict=True)}

    def close(self) -> None:
        for ctx in self.ctx.values():
            ctx.close()


class MorphzLexical:
    def __init__(
        self, name: str, contexts: MorphzContexts, languages: tuple[str, ...] | None
    ) -> None:
        self.name = name
        self.contexts = contexts
        self.index: dict[str, LexicalIndex] = {}
        for scope, ctx in contexts.ctx.items():
            index = LexicalIndex.for_backend(ctx.backend, languages=languages)
            index.rebuild()
            self.index[scope] = index

    def search(self, scope: str, query: str, limit: int = TOP) -> list[str]:
        ids = self.contexts.ids[scope]
        result = self.index[scope].search(query, limit=limit)
        return [ids[h.id] for h in result.hits if h.id in ids]

    def close(self) -> None:
        for index in self.index.values():
            index.close()


class Fts5:
    """One FTS5 table per scope (so bm25's statistics are the scope's, like a context's)."""

    def __init__(self, tokenizer: str, docs: dict[str, list[Doc]]) -> None:
        self.name = "fts5-" + tokenizer.split()[0]
        self.db = sqlite3.connect(":memory:")
        self.table: dict[str, str] = {}
        self.ids: dict[str, list[str]] = {}
        for n, (scope, ds) in enumerate(sorted(docs.items())):
            table = f"d{n}"
            self.db.execute(
                f"CREATE VIRTUAL TABLE {table} USING fts5(body, tokenize='{tokenizer}')"
            )
            self.db.executemany(
                f"INSERT INTO {table}(rowid, body) VALUES (?, ?)",
                ((i + 1, d.text) for i, d in enumerate(ds)),
            )
            self.table[scope] = table
            self.ids[scope] = [d.id for d in ds]

    def search(self, scope: str, query: str, limit: int = TOP) -> list[str]:
        words = re.findall(r"\w+", query)
        if not words:
            return []
        match = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
        table = self.table[scope]
        rows = self.db.execute(
            f"SELECT rowid FROM {table} WHERE {table} MATCH ? ORDER BY bm25({table}) LIMIT ?",
            (match, limit),
        ).fetchall()
        return [self.ids[scope][r[0] - 1] for r in rows]

    def close(self) -> None:
        self.db.close()


class DenseScan:
    """Brute force: the cosine of the query with every document of the scope."""

    name = "dense-scan"

    def __init__(self, embedder: CachedEmbedder, docs: dict[str, list[Doc]]) -> None:
        import numpy as np

        from storage.vectors.chunking import chunks
        from storage.vectors.documents import pooled

        self.embedder = embedder
        self.ids = {s: [d.id for d in ds] for s, ds in docs.items()}
        # As the vector index embeds: pieces of a long text (the model's token budget)
        # pooled into one vector.
        budget = embedder.max_tokens
        self.matrix = {
            s: np.stack([pooled(list(embedder.matrix(chunks(d.text, budget)))) for d in ds])
            for s, ds in docs.items()
        }

    def search(self, scope: str, query: str, limit: int = TOP) -> list[str]:
        import numpy as np

        q = self.embedder.matrix([query], kind="query")[0]
        sims = self.matrix[scope] @ q
        order = np.argsort(-sims, kind="stable")[:limit]
        return [self.ids[scope][int(i)] for i in order]

    def close(self) -> None:
        pass


class MorphzHybrid:
    """Morphz's own hybrid search: a :class:`service.search.Searcher` with the embedder
    (its lexical index and its vector index, fused by reciprocal rank in
    :meth:`~service.search.Searcher.find`), per scope's context."""

    name = "morphz-hybrid"

    def __init__(self, embedder: CachedEmbedder, contexts: MorphzContexts) -> None:
        from service.search import Searcher

        self.contexts = contexts
        self.searcher = {}
        for scope, ctx in contexts.ctx.items():
            searcher = Searcher(ctx.backend, embedder=embedder)
            if not searcher.catch_up(timeout=3600.0):
                raise RuntimeError(f"the indexes of scope {scope} did not catch up")
            self.searcher[scope] = searcher

    def search(self, scope: str, query: str, limit: int = TOP) -> list[str]:
        ids = self.contexts.ids[scope]
        result = self.searcher[scope].find(query, limit=limit)
        return [ids[h.id] for h in result.hits if h.id in ids]

    def close(self) -> None:
        for searcher in self.searcher.values():
            searcher.close()


class MorphzDense:
    """Morphz's vector index alone (``storage.vectors``): the hybrid's semantic side."""

    name = "morphz-dense"

    def __init__(self, embedder: CachedEmbedder, hybrid: MorphzHybrid) -> None:
        self.embedder = embedder
        self.hybrid = hybrid

    def search(self, scope: str, query: str, limit: int = TOP) -> list[str]:
        ids = self.hybrid.contexts.ids[scope]
        vector = self.embedder.embed([query], kind="query")[0]
        result = self.hybrid.searcher[scope].vectors.search(vector, limit=limit)
        return [ids[h.id] for h in result.hits if h.id in ids]

    def close(self) -> None:
        pass


class Fused:
    """Reciprocal-rank fusion of two engines' top :data:`DEPTH`."""

    def __init__(self, name: str, a: Any, b: Any) -> None:
        self.name, self.a, self.b = name, a, b

    def search(self, scope: str, query: str, limit: int = TOP) -> list[str]:
        return rrf([self.a.search(scope, query, DEPTH), self.b.search(scope, query, DEPTH)])[:limit]

    def close(self) -> None:
        pass


class Rescored:
    """The lexical top :data:`DEPTH` re-ordered with the model: each candidate scores
    ``1 / (k + lexical rank) + weight / (k + its cosine's rank among the candidates)``
    (ties: the lexical order). Only what the lexical search found can be a hit, unlike the
    hybrid, whose semantic side searches every document."""

    def __init__(self, lexical: Any, scan: DenseScan, weight: float, k: int = 5) -> None:
        self.name = f"morphz-rescore-{weight:g}"
        self.lexical, self.scan, self.weight, self.k = lexical, scan, weight, k
        self.row = {s: {d: i for i, d in enumerate(ids)} for s, ids in scan.ids.items()}

    def search(self, scope: str, query: str, limit: int = TOP) -> list[str]:
        candidates = self.lexical.search(scope, query, DEPTH)
        if not candidates:
            return []
        q = self.scan.embedder.matrix([query], kind="query")[0]
        rows = [self.row[scope][d] for d in candidates]
        sims = self.scan.matrix[scope][rows] @ q
        by_sim = sorted(range(len(candidates)), key=lambda i: (-float(sims[i]), i))
        sem_rank = {i: r for r, i in enumerate(by_sim)}
        k, w = self.k, self.weight
        order = sorted(
            range(len(candidates)), key=lambda i: (-(1 / (k + i) + w / (k + sem_rank[i])), i)
        )
        return [candidates[i] for i in order[:limit]]

    def close(self) -> None:
        pass


# -- the run ---------------------------------------------------------------------


def evaluate(
    engines: Sequence[Any],
    questions: Sequence[Question],
    of: dict[str, dict[str, str]],
    log: Callable[[str], None],
) -> tuple[dict[str, Any], dict[str, dict[str, list[str]]]]:
    """Figures ``[scope][engine][lang][split] = metrics`` and every ranking (for analysis)."""
    figures: dict[str, Any] = {}
    rankings: dict[str, dict[str, list[str]]] = {}
    for scope_kind, by_q in of.items():
        figures[scope_kind] = {}
        for e in engines:
            started = time.perf_counter()
            rows: dict[tuple[str, str], list[dict[str, float]]] = {}
            for q in questions:
                if q.id not in by_q:
                    continue  # a question with no scope of this kind
                ranked = e.search(by_q[q.id], q.question, TOP)
                rankings.setdefault(f"{scope_kind}/{e.name}", {})[q.id] = ranked
                rows.setdefault((group(q), q.split), []).append(score(ranked, q.turns))
            figures[scope_kind][e.name] = {
                lang: {split: mean_scores(rows.get((lang, split), [])) for split in SPLITS}
                for lang in LANGS
            }
            log(
                f"  {scope_kind}/{e.name}: {len(questions)} questions in "
                f"{time.perf_counter() - started:.1f} s"
            )
    return figures, rankings


def run(
    trajectories: Path | None,
    scratch: Path,
    cache_dir: Path,
    log: Callable[[str], None],
    dense: bool = True,
    dev_dir: Path = DEV_DIR,
    *,
    embedder_config: Any = None,
    scope_kinds: Sequence[str] = ("conversation", "pool"),
    groups: Sequence[str] = LANGS,
) -> dict[str, Any]:
    """Build every engine over the dev set's scopes, ask every question, return the figures.

    *embedder_config* (an ``EmbedderConfig``) replaces the packaged MiniLM as the dense
    engines' model; *scope_kinds* and *groups* restrict the run (a slow model need not
    embed every pool)."""
    questions = [q for q in load_questions(dev_dir) if group(q) in groups]
    docs, of = scopes(questions, trajectories, dev_dir)
    of = {kind: by_q for kind, by_q in of.items() if kind in scope_kinds}
    wanted = {scope for by_q in of.values() for scope in by_q.values()}
    docs = {scope: ds for scope, ds in docs.items() if scope in wanted}
    log(
        f"dev set: {len(questions)} questions, {len(docs)} scopes, "
        f"{sum(len(d) for d in docs.values()):,} documents"
    )
    report: dict[str, Any] = {"questions": len(questions), "figures": {}, "rankings": {}}

    def phase(engines: list[Any]) -> None:
        """Evaluate *engines*, then close them (each index maps address space: a process
        holds only so many open at once)."""
        try:
            figures, rankings = evaluate(engines, questions, of, log)
            for scope_kind, by_engine in figures.items():
                report["figures"].setdefault(scope_kind, {}).update(by_engine)
            report["rankings"].update(rankings)
        finally:
            for e in reversed(engines):
                e.close()

    off = MorphzContexts(scratch / "stem-off", docs)
    try:
        phase([MorphzLexical("morphz-lexical-nostem", off, ())])
    finally:
        off.close()
    contexts = MorphzContexts(scratch / "stem-on", docs)
    engines: list[Any] = []
    embedder = None
    try:
        engines.append(MorphzLexical("morphz-lexical", contexts, None))
        report["languages"] = list(engines[-1].index[next(iter(docs))].state().languages)
        engines.append(Fts5("unicode61", docs))
        engines.append(Fts5("porter unicode61", docs))
        embedder = load_embedder(cache_dir, embedder_config) if dense else None
        if embedder is None:
            log("  dense engines skipped (no sentence-transformers: the morphz[embed] extra)")
        else:
            started = time.perf_counter()
            scan = DenseScan(embedder, docs)
            embedder.save()
            engines.append(scan)
            log(
                f"  dense scan built in {time.perf_counter() - started:.1f} s "
                f"({embedder.embedded} texts embedded, the rest cached)"
            )
            started = time.perf_counter()
            hybrid = MorphzHybrid(embedder, contexts)
            report["morphz_vectors_build_s"] = round(time.perf_counter() - started, 1)
            engines += [MorphzDense(embedder, hybrid), hybrid]
            engines.append(Fused("fts5-porter+dense", engines[2], scan))
            engines += [Rescored(engines[0], scan, w) for w in RESCORE_WEIGHTS]
        phase(engines)
    finally:
        contexts.close()
        if embedder is not None:
            embedder.save()
    if embedder is not None:
        report["embedding"] = {
            "model": embedder.model_id,
            "embedded": embedder.embedded,
            "seconds": round(embedder.embed_seconds, 1),
            "texts_per_s": round(embedder.embedded / embedder.embed_seconds, 1)
            if embedder.embed_seconds
            else None,
        }
    return report
