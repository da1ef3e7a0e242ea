"""Keyword search (R30): latency, indexing throughput and recall, beside SQLite FTS5.

Two corpora, the same documents and queries for every engine, in one run:

* **STATE-Bench** training trajectories (``--trajectories DIR`` or the
  ``MORPHZ_TRAJECTORIES`` environment variable: the directory of
  ``<domain>/<n>-<name>.json`` files; skipped, saying so, when neither is
  given): every message and every tool call (name, arguments, result) is one
  event. Queries are four-word
  windows cut from random messages; a query is *found* when its message is in
  the top 10.
* **Synthetic**: ``--events`` events (default 1,000,000; ``--quick`` 100,000)
  drawn from topics. Each topic has an English marker word and a Chinese
  marker (2 or 3 ideographs from a set no other word uses). English documents
  are Zipf-distributed words plus the topic's English marker; Chinese
  documents are unspaced runs of Chinese words with the Chinese marker inside;
  mixed documents have both. Relevance comes from generation: for a query on
  topic *t*, the relevant documents are those of *t* that contain the query's
  marker(s). Queries: English (marker + a common word), Chinese (marker + a
  common Chinese word), mixed (both markers), and *common* queries of frequent
  words only (latency; they hit the scan cap on the large corpus).

Engines: Morphz's :class:`storage.search.index.LexicalIndex` (search includes the
snippet and the context read that feeds it), as a user gets it and as
``morphz-plain`` (the same index, BM25 over the words alone: no question rules,
no neighbour evidence, the ranking before them); SQLite FTS5 with the
``unicode61`` tokenizer, with ``porter unicode61`` (Porter stems) and with the
``trigram`` tokenizer, queried with the
query's words OR-ed (``"w1" OR "w2"``), ranked by ``bm25`` with
``snippet()``. Index throughput: Morphz ``rebuild`` (bulk) and incremental
``apply_intents`` in batches of 1,000; FTS5 ``INSERT`` of all rows in one
transaction. Timings are printed, never asserted.

``--vectors [DIM]`` adds, on the synthetic corpus, Morphz's vector index fed by
:class:`HashEmbedder` (a cheap deterministic stand-in: latency depends on the
vectors' number and dimension, not on the model) and the dense and hybrid
searches; query embedding is timed apart. ``--dev-set`` runs only the judged
dev set (:mod:`search_eval`, ``benchmarks/search_dev``): recall and MRR of the
lexical, FTS5, dense and hybrid engines per language and split.

``--keep DIR`` builds the corpora's engines in DIR and leaves them there; a
later run with the same DIR and size reuses them (a 1M corpus takes half an
hour to build on two shared cores). ``--engines`` names the engines timed.
Engines take turns running each query first (the first pays the first reads
of the query's pages).

Longer than 600 lines because every engine a figure is compared with is built
and measured here, beside the others, in the same run (the dev set's engines
live in :mod:`search_eval`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import re
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import search_eval
import testbed  # first: puts this checkout on sys.path

from harness.loadtest.trajectories import TRAJECTORIES_ENV, NoTrajectories, trajectories_dir
from service.store import Store
from storage.search.index import LexicalIndex

SYLLABLES = "ka lo mi ra te su no vi de po zu xa qi be ho fy ne ta ri mo".split()
COMMON_ZH = (
    "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能"
    "下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都"
)
MARKER_ZH_2 = [chr(c) for c in range(0x3400, 0x3500)]
"""Ideographs of two-character markers (CJK Extension A, used by no other word)."""
MARKER_ZH_3 = [chr(c) for c in range(0x3500, 0x3600)]
"""Ideographs of three-character markers: no two-character marker is inside one."""
COMMON_EN = (
    "error warning deploy build test passed failed server region config request timeout retry"
).split()


def log_line(enabled: bool) -> Callable[[str], None]:
    def out(message: str) -> None:
        if enabled:
            print(message, file=sys.stderr, flush=True)

    return out


# -- corpora ---------------------------------------------------------------------


class Synthetic:
    """The synthetic corpus: documents, topics and labelled queries, all from one seed."""

    def __init__(self, n_docs: int, seed: int = 20260601) -> None:
        rng = random.Random(seed)
        self.rng = rng
        self.n_topics = max(50, n_docs // 50)
        words: set[str] = set()
        while len(words) < 20_000:
            words.add("".join(rng.choices(SYLLABLES, k=rng.randint(2, 4))))
        self.vocab = sorted(words)
        self.cum = list(itertools.accumulate(1.0 / (r + 1) ** 1.05 for r in range(len(self.vocab))))
        self.zh_words = sorted({"".join(rng.choices(COMMON_ZH, k=2)) for _ in range(3000)})
        markers_en: set[str] = set()
        while len(markers_en) < self.n_topics:
            markers_en.add("zq" + "".join(rng.choices(SYLLABLES, k=4)))
        self.marker_en = sorted(markers_en)
        rng.shuffle(self.marker_en)
        markers_zh: set[str] = set()
        while len(markers_zh) < self.n_topics:
            pool = MARKER_ZH_2 if len(markers_zh) % 2 else MARKER_ZH_3
            markers_zh.add("".join(rng.choices(pool, k=2 if pool is MARKER_ZH_2 else 3)))
        self.marker_zh = sorted(markers_zh)
        rng.shuffle(self.marker_zh)
        self.docs: list[str] = []
        self.topic: list[int] = []
        self.lang: list[str] = []
        for _ in range(n_docs):
            self._add(rng)

    def _en(self, rng: random.Random, k: int) -> list[str]:
        return rng.choices(self.vocab, cum_weights=self.cum, k=k)

    def _zh(self, rng: random.Random, k: int) -> str:
        return "".join(rng.choices(self.zh_words, k=k))

    def _add(self, rng: random.Random) -> None:
        t = rng.randrange(self.n_topics)
        r = rng.random()
        if r < 0.6:
            lang = "en"
            words = self._en(rng, rng.randint(10, 24))
            words.insert(rng.randrange(len(words)), self.marker_en[t])
            if rng.random() < 0.3:
                words.append(rng.choice(COMMON_EN))
            text = " ".join(words)
        elif r < 0.9:
            lang = "zh"
            text = (
                self._zh(rng, rng.randint(3, 8))
                + self.marker_zh[t]
                + self._zh(rng, rng.randint(3, 8))
            )
            if rng.random() < 0.3:
                text += "，区域 cn-shanghai。"
        else:
            lang = "mixed"
            words = self._en(rng, rng.randint(5, 12))
            words.insert(rng.randrange(len(words)), self.marker_en[t])
            text = " ".join(words) + " " + self._zh(rng, 3) + self.marker_zh[t] + self._zh(rng, 2)
        self.docs.append(text)
        self.topic.append(t)
        self.lang.append(lang)

    def queries(self, n: int) -> list[tuple[str, list[str], set[int]]]:
        """``(kind, words, relevant seqs)``; seqs are 1-based document positions."""
        rng = random.Random(7)
        by_topic: dict[int, list[int]] = {}
        for i, t in enumerate(self.topic):
            by_topic.setdefault(t, []).append(i + 1)
        topics = [t for t in by_topic if len(by_topic[t]) >= 3]
        out: list[tuple[str, list[str], set[int]]] = []
        for i in range(n):
            kind = ("en", "zh", "mixed", "common")[i % 4]
            t = rng.choice(topics)
            docs = by_topic[t]
            if kind == "en":
                words = [self.marker_en[t], rng.choice(COMMON_EN)]
                rel = {d for d in docs if self.lang[d - 1] != "zh"}
            elif kind == "zh":
                words = [self.marker_zh[t], rng.choice(self.zh_words[:200])]
                rel = {d for d in docs if self.lang[d - 1] != "en"}
            elif kind == "mixed":
                words = [self.marker_en[t], self.marker_zh[t]]
                rel = set(docs)
            else:
                words = rng.sample(self.vocab[:30], 2) + [rng.choice(COMMON_EN)]
                rel = set()
            out.append((kind, words, rel))
        return out


def state_bench_docs(path: Path) -> list[tuple[str, str]]:
    """``(kind, text)`` per message and per tool call of every trajectory, in file order."""
    out: list[tuple[str, str]] = []
    for f in sorted(path.glob("*/*.json")):
        for m in json.loads(f.read_text(encoding="utf-8"))["conversation"]:
            kind = "user_message" if m["role"] == "user" else "external"
            if m.get("content"):
                out.append((kind, m["content"]))
            for call in m.get("tool_calls") or []:
                out.append(("tool_result", json.dumps(call, ensure_ascii=False)))
    return out


def state_bench_queries(
    docs: list[tuple[str, str]], n: int
) -> list[tuple[str, list[str], set[int]]]:
    rng = random.Random(11)
    out: list[tuple[str, list[str], set[int]]] = []
    candidates = [i for i, (k, t) in enumerate(docs) if k != "tool_result" and len(t.split()) >= 8]
    for _ in range(n):
        i = rng.choice(candidates)
        words = [w.strip(".,;:!?\"'()") for w in docs[i][1].split()]
        words = [w for w in words if w]
        start = rng.randrange(max(1, len(words) - 4))
        out.append(("window", words[start : start + 4], {i + 1}))
    return out


# -- engines ---------------------------------------------------------------------


class Morphz:
    name = "morphz"

    def __init__(
        self,
        root: Path,
        docs: Sequence[tuple[str, str]],
        incremental: int,
        log: Any,
        reuse: bool = False,
    ) -> None:
        self.store = Store(root / "morphz")
        self.ctx = self.store.open("bench", sync=False)
        self.figures: dict[str, Any] = {}
        if reuse:
            self.index = LexicalIndex.for_backend(self.ctx.backend)
            self.figures = json.loads((root / "morphz-figures.json").read_text())
            log(f"  reusing the Morphz context and index in {root}")
            return
        bulk = len(docs) - incremental
        started = time.perf_counter()
        base = time.time() - len(docs)
        for lo in range(0, bulk, OBSERVE_BATCH):
            self.ctx.observe_many(
                [
                    {"kind": k, "text": t, "session": _session(lo + j), "time": base + lo + j}
                    for j, (k, t) in enumerate(docs[lo : min(bulk, lo + OBSERVE_BATCH)])
                ]
            )
        self.figures["context_write_s"] = round(time.perf_counter() - started, 2)
        log(f"  context written: {bulk} events in {self.figures['context_write_s']} s")
        self.index = LexicalIndex.for_backend(self.ctx.backend)
        stats = self.index.rebuild()
        self.figures["rebuild_s"] = stats["seconds"]
        self.figures["rebuild_docs_per_s"] = round(bulk / max(stats["seconds"], 1e-9))
        log(f"  rebuild: {bulk} docs in {stats['seconds']} s")
        if incremental:
            for lo in range(bulk, len(docs), OBSERVE_BATCH):
                self.ctx.observe_many(
                    [
                        {"kind": k, "text": t, "session": _session(lo + j), "time": base + lo + j}
                        for j, (k, t) in enumerate(docs[lo : lo + OBSERVE_BATCH])
                    ]
                )
            started = time.perf_counter()
            self.index.catch_up(batch=1000)
            took = time.perf_counter() - started
            self.figures["incremental_docs"] = incremental
            self.figures["incremental_docs_per_s"] = round(incremental / max(took, 1e-9))
            log(f"  incremental: {incremental} docs in {took:.2f} s")
        self.figures["index_mib"] = round(_dir_size(root / "morphz" / "bench" / "index") / 2**20, 1)
        (root / "morphz-figures.json").write_text(json.dumps(self.figures))

    def search(self, words: list[str]) -> list[int]:
        result = self.index.search(" ".join(words), limit=10)
        return [int(h.id[2:]) for h in result.hits if h.id.startswith("@e")]

    def close(self) -> None:
        self.index.close()
        self.ctx.close()


class MorphzPlain:
    """The same index ranked by BM25 over the words alone (no question rules, no
    neighbour evidence): the ranking before them, measured in the same run."""

    name = "morphz-plain"

    def __init__(self, morphz: Morphz) -> None:
        self.index = morphz.index
        self.figures: dict[str, Any] = {}

    def search(self, words: list[str]) -> list[int]:
        result = self.index.search(" ".join(words), limit=10, questions=False, neighbours=False)
        return [int(h.id[2:]) for h in result.hits if h.id.startswith("@e")]

    def close(self) -> None:
        pass


OBSERVE_BATCH = 1000
"""Events recorded per call (a call takes at most 1,024)."""
SESSION_TURNS = 40
"""Synthetic events per session (so the search's session rule does its work)."""


def _session(i: int) -> str:
    return f"s{i // SESSION_TURNS}"


class Fts5:
    def __init__(
        self, root: Path, tokenizer: str, docs: Sequence[tuple[str, str]], reuse: bool = False
    ) -> None:
        self.name = f"fts5-{tokenizer.split()[0]}"
        path = root / f"{self.name}.db"
        self.db = sqlite3.connect(path)
        if reuse:
            self.figures = json.loads((root / f"{self.name}-figures.json").read_text())
            return
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(f"CREATE VIRTUAL TABLE docs USING fts5(body, tokenize='{tokenizer}')")
        started = time.perf_counter()
        with self.db:
            self.db.executemany(
                "INSERT INTO docs(rowid, body) VALUES (?, ?)",
                ((i + 1, t) for i, (_, t) in enumerate(docs)),
            )
        took = time.perf_counter() - started
        self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self.figures = {
            "insert_s": round(took, 2),
            "docs_per_s": round(len(docs) / max(took, 1e-9)),
            "db_mib": round(os.path.getsize(path) / 2**20, 1),
        }
        (root / f"{self.name}-figures.json").write_text(json.dumps(self.figures))

    def search(self, words: list[str]) -> list[int]:
        query = " OR ".join('"' + w.replace('"', '""') + '"' for w in words if w)
        if not query:
            return []
        try:
            rows = self.db.execute(
                "SELECT rowid, snippet(docs, 0, '«', '»', '…', 16) FROM docs WHERE docs MATCH ? "
                "ORDER BY bm25(docs) LIMIT 10",
                (query,),
            ).fetchall()
        except sqlite3.OperationalError:
            return []
        return [r[0] for r in rows]

    def close(self) -> None:
        self.db.close()


def _dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def measure(
    engines: list[Any], queries: list[tuple[str, list[str], set[int]]], rounds: int
) -> dict[str, Any]:
    """Latency (interleaved engines, each first in turn; warm) and recall@10 per query kind."""
    for e in engines:  # warm-up
        for _, words, _ in queries[:50]:
            e.search(words)
    times: dict[str, list[float]] = {e.name: [] for e in engines}
    cpu: dict[str, list[float]] = {e.name: [] for e in engines}
    recall: dict[str, dict[str, list[float]]] = {e.name: {} for e in engines}
    for r in range(rounds):
        for q, (kind, words, rel) in enumerate(queries):
            # Each engine goes first as often as the others: the first to run a query
            # pays the first reads of its pages (on a large corpus, page faults), the
            # others find them warm.
            turn = q % len(engines)
            for e in engines[turn:] + engines[:turn]:
                c0 = time.process_time()
                t0 = time.perf_counter()
                got = e.search(words)
                times[e.name].append(time.perf_counter() - t0)
                cpu[e.name].append(time.process_time() - c0)
                if r == 0 and rel:
                    hit = len(set(got[:10]) & rel) / min(10, len(rel))
                    recall[e.name].setdefault(kind, []).append(hit)
    out: dict[str, Any] = {}
    for e in engines:
        ts = sorted(times[e.name])
        cs = sorted(cpu[e.name])
        out[e.name] = {
            "p50_ms": round(ts[len(ts) // 2] * 1e3, 3),
            "p99_ms": round(ts[min(len(ts) - 1, int(len(ts) * 0.99))] * 1e3, 3),
            "mean_ms": round(statistics.fmean(ts) * 1e3, 3),
            "cpu_p50_ms": round(cs[len(cs) // 2] * 1e3, 3),
            "cpu_p99_ms": round(cs[min(len(cs) - 1, int(len(cs) * 0.99))] * 1e3, 3),
            "recall_at_10": {
                k: round(statistics.fmean(v), 3) for k, v in sorted(recall[e.name].items())
            },
        }
    by_kind: dict[str, dict[str, float]] = {}
    for e in engines:
        per: dict[str, list[float]] = {}
        i = 0
        for _ in range(rounds):
            for kind, _, _ in queries:
                per.setdefault(kind, []).append(times[e.name][i])
                i += 1
        by_kind[e.name] = {
            k: round(sorted(v)[int(len(v) * 0.99) - 1] * 1e3, 2) for k, v in sorted(per.items())
        }
    out["p99_ms_by_kind"] = by_kind
    return out


class HashEmbedder:
    """A cheap deterministic embedder for latency at scale (never for quality figures).

    Each word maps (by its digest) to one of 4,096 fixed random unit directions; a
    text's vector is the normalized sum of its words' directions. Documents sharing
    words are near each other, and the vectors are dense and of MiniLM's dimension,
    which is what nearest-neighbour latency depends on (not the model).
    """

    model_id = "bench:hash-words"

    def __init__(self, dimension: int = 384) -> None:
        import numpy as np

        self._np = np
        self.dimension = dimension
        self._table = np.random.default_rng(5).standard_normal((4096, dimension)).astype(np.float32)
        self._words = re.compile(r"\w+")

    def vectors(self, texts: Sequence[str]) -> Any:
        np = self._np
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i, text in enumerate(texts):
            rows = [zlib.crc32(w.encode()) & 4095 for w in self._words.findall(text.lower())]
            if rows:
                out[i] = self._table[rows].sum(axis=0)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-12)

    def embed(self, texts: Sequence[str], *, kind: str = "document") -> list[list[float]]:
        return [list(map(float, row)) for row in self.vectors(texts)]


class MorphzVectors:
    """Morphz's vector index of the Morphz engine's context, fed by :class:`HashEmbedder`."""

    name = "morphz-dense"

    def __init__(self, lexical: Morphz, dimension: int, log: Any) -> None:
        from storage.vectors.index import VectorIndex

        self.lexical = lexical
        self.embedder = HashEmbedder(dimension)
        self.index = VectorIndex.for_backend(lexical.ctx.backend)
        started = time.perf_counter()
        stats = self.index.rebuild(self.embedder)
        self.figures: dict[str, Any] = {"rebuild_s": round(time.perf_counter() - started, 1)}
        log(f"  vector index: {stats} in {self.figures['rebuild_s']} s")
        started = time.perf_counter()
        self.index.search(self.embedder.vectors(["warm up"])[0], limit=10)
        self._wait_for_graph()
        self.figures["graph_s"] = round(time.perf_counter() - started, 1)
        log(f"  first search (loads vectors, builds the graph): {self.figures['graph_s']} s")
        self.query_vectors: dict[str, Any] = {}

    def _wait_for_graph(self, timeout: float = 7200.0) -> None:
        """Wait until the HNSW graph is ready (searches scan exactly meanwhile; timing
        before it is ready would time exact scans)."""
        if not self.index.wait_ready(timeout):
            raise RuntimeError("the HNSW graph was not built in time, or its build failed")

    def prepare(self, queries: list[tuple[str, list[str], set[int]]]) -> None:
        """Embed every query before timing (query embedding is reported apart)."""
        texts = sorted({" ".join(words) for _, words, _ in queries})
        started = time.perf_counter()
        vecs = self.embedder.vectors(texts)
        self.figures["query_embed_us"] = round(
            (time.perf_counter() - started) / max(1, len(texts)) * 1e6, 1
        )
        self.query_vectors = dict(zip(texts, vecs, strict=True))

    def ranked(self, words: list[str], limit: int) -> list[str]:
        result = self.index.search(self.query_vectors[" ".join(words)], limit=limit)
        return [h.id for h in result.hits]

    def search(self, words: list[str]) -> list[int]:
        return [int(i[2:]) for i in self.ranked(words, 10) if i.startswith("@e")]

    def close(self) -> None:
        self.index.close()


class MorphzHybrid:
    """Morphz lexical and vector rankings (top 50 each) fused by reciprocal rank."""

    name = "morphz-hybrid"

    def __init__(self, lexical: Morphz, vectors: MorphzVectors) -> None:
        self.lexical, self.vectors = lexical, vectors
        self.figures = vectors.figures

    def search(self, words: list[str]) -> list[int]:
        from storage.vectors.fusion import fuse

        lex = self.lexical.index.search(" ".join(words), limit=50)
        sem = self.vectors.ranked(words, 50)
        fused = fuse(
            [
                ("lexical", [(h.id, h.score) for h in lex.hits]),
                ("semantic", [(i, 0.0) for i in sem]),
            ]
        )
        return [int(i[2:]) for i, _, _ in fused[:10] if i.startswith("@e")]

    def close(self) -> None:
        pass


def run_corpus(
    name: str,
    root: Path,
    docs: list[tuple[str, str]],
    queries: list[tuple[str, list[str], set[int]]],
    rounds: int,
    log: Any,
    vectors: int = 0,
    timed: Sequence[str] = (),
) -> dict[str, Any]:
    """Build every engine over *docs*, then measure; *vectors* is the hash embedder's
    dimension (0: no vector index, no hybrid); *timed* names the engines measured
    (empty: all; every engine is built either way)."""
    log(f"{name}: {len(docs)} documents, {len(queries)} queries")
    root.mkdir(parents=True, exist_ok=True)
    # A corpus built by an earlier run with --keep is reused (its marker names its size).
    marker = root / "built.json"
    reuse = marker.exists() and json.loads(marker.read_text()) == {"documents": len(docs)}
    marker.unlink(missing_ok=True)
    incremental = min(20_000, len(docs) // 10)
    morphz = Morphz(root, docs, incremental, log, reuse)
    engines: list[Any] = [morphz, MorphzPlain(morphz)]
    try:
        for tokenizer in ("unicode61", "porter unicode61", "trigram"):
            engines.append(Fts5(root, tokenizer, docs, reuse))
        marker.write_text(json.dumps({"documents": len(docs)}))
        for e in engines[2:]:
            log(f"  {e.name}: {e.figures}")
        if vectors:
            vec = MorphzVectors(morphz, vectors, log)
            vec.prepare(queries)
            engines += [vec, MorphzHybrid(morphz, vec)]
        chosen = [e for e in engines if not timed or e.name in timed]
        figures = measure(chosen, queries, rounds)
        for e in chosen:
            figures[e.name]["index"] = e.figures
    finally:
        for e in reversed(engines):
            e.close()
    return {"documents": len(docs), "queries": len(queries), **figures}


def print_report(name: str, doc: dict[str, Any]) -> None:
    print(
        f"\n== {name}: {doc['documents']:,} documents, {doc['queries']} queries "
        f"(load {os.getloadavg()[0]:.2f}) =="
    )
    print(
        f"{'engine':<16}{'p50 ms':>9}{'p99 ms':>9}{'mean ms':>9}{'cpu p50':>9}{'cpu p99':>9}"
        "   recall@10 by query kind"
    )
    engines = [e for e in ENGINES if e in doc]
    for engine in engines:
        f = doc[engine]
        recall = "  ".join(f"{k} {v:.3f}" for k, v in f["recall_at_10"].items())
        print(
            f"{engine:<16}{f['p50_ms']:>9.2f}{f['p99_ms']:>9.2f}{f['mean_ms']:>9.2f}"
            f"{f['cpu_p50_ms']:>9.2f}{f['cpu_p99_ms']:>9.2f}   {recall}"
        )
    print(
        "p99 ms by query kind: "
        + "; ".join(
            f"{e}: " + ", ".join(f"{k} {v}" for k, v in kinds.items())
            for e, kinds in doc["p99_ms_by_kind"].items()
        )
    )
    m = doc["morphz"]["index"]
    line = (
        f"index: morphz rebuild {m['rebuild_docs_per_s']:,} docs/s ({m['rebuild_s']} s)"
        + (
            f", incremental {m['incremental_docs_per_s']:,} docs/s"
            if "incremental_docs_per_s" in m
            else ""
        )
        + f", {m['index_mib']} MiB"
    )
    for engine in ("fts5-unicode61", "fts5-porter", "fts5-trigram"):
        if engine not in doc:
            continue
        f = doc[engine]["index"]
        line += f"; {engine} {f['docs_per_s']:,} docs/s, {f['db_mib']} MiB"
    print(line)
    if "morphz-dense" in doc:
        v = doc["morphz-dense"]["index"]
        print(
            f"vectors ({HashEmbedder.model_id}): index rebuild {v['rebuild_s']} s, first search "
            f"(load + graph) {v['graph_s']} s, query embedding {v['query_embed_us']} us "
            "(excluded from the search times above)"
        )


ENGINES = (
    "morphz",
    "morphz-plain",
    "fts5-unicode61",
    "fts5-porter",
    "fts5-trigram",
    "morphz-dense",
    "morphz-hybrid",
)


def print_dev_set(report: dict[str, Any]) -> None:
    """The dev-set figures: one table per scope, language and split."""
    print(
        f"\n== judged dev set: {report['questions']} questions (load "
        f"{os.getloadavg()[0]:.2f}); morphz-lexical stems {report['languages']} =="
    )
    metrics = ("recall@5", "recall@10", "hit@10", "mrr")
    for scope, by_engine in report["figures"].items():
        for lang in search_eval.LANGS:
            for split in search_eval.SPLITS:
                print(f"\n{scope} scope, {lang}, {split} split")
                print(f"{'engine':<24}" + "".join(f"{m:>11}" for m in metrics))
                for engine, figs in by_engine.items():
                    f = figs[lang][split]
                    if f:
                        print(f"{engine:<24}" + "".join(f"{f[m]:>11.3f}" for m in metrics))
    if "embedding" in report:
        e = report["embedding"]
        print(
            f"\nembeddings ({e['model']}): {e['embedded']} texts embedded this run in "
            f"{e['seconds']} s ({e['texts_per_s']} texts/s; the rest came from the cache); "
            f"Morphz vector indexes built in {report.get('morphz_vectors_build_s')} s"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="100,000 synthetic events, fewer queries"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document of figures")
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    parser.add_argument(
        "--keep",
        default=None,
        metavar="DIR",
        help="build the corpora's engines in DIR and keep them; a later run with the same DIR "
        "and corpus size reuses them instead of building again",
    )
    parser.add_argument(
        "--trajectories",
        default=None,
        help=f"STATE-Bench trajectory directory (default: ${TRAJECTORIES_ENV})",
    )
    parser.add_argument(
        "--events", type=int, default=None, help="synthetic events (default 1,000,000)"
    )
    parser.add_argument(
        "--queries", type=int, default=None, help="queries per corpus (default 400)"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="passes over the queries (default 1; 2 with --quick)",
    )
    parser.add_argument(
        "--vectors",
        type=int,
        nargs="?",
        const=384,
        default=0,
        metavar="DIM",
        help="synthetic corpus: also a vector index (a cheap deterministic embedder of DIM "
        "dimensions, default 384) and the hybrid search's latency",
    )
    parser.add_argument(
        "--engines",
        default="",
        help="the engines timed, comma-separated (default: all of "
        + ", ".join(ENGINES)
        + "); morphz is always timed",
    )
    parser.add_argument(
        "--dev-set",
        action="store_true",
        help="only the judged dev set (benchmarks/search_dev): recall and MRR of every engine",
    )
    parser.add_argument(
        "--no-dense", action="store_true", help="dev set: skip the embedding engines"
    )
    parser.add_argument(
        "--embed-url",
        default=None,
        help="dev set: the dense engines' model behind this OpenAI-compatible endpoint "
        "(default: the packaged all-MiniLM-L6-v2)",
    )
    parser.add_argument("--embed-model", default="embed", help="dev set: the endpoint's model")
    parser.add_argument(
        "--embed-input-type",
        action="store_true",
        help="dev set: requests name their side (input_type), for asymmetric models (e5)",
    )
    parser.add_argument(
        "--scopes",
        default="conversation,pool",
        help="dev set: the scopes to run, comma-separated (conversation, pool)",
    )
    parser.add_argument(
        "--groups",
        default=",".join(search_eval.LANGS),
        help="dev set: the question groups to run, comma-separated (en, zh, mixed, long, chat, "
        "chat-other, chat-long)",
    )
    parser.add_argument(
        "--cache-dir",
        default=None,
        help="dev set: where document embeddings are cached (default: a directory in the "
        "system temp dir)",
    )
    args = parser.parse_args(argv)
    events = args.events or (100_000 if args.quick else 1_000_000)
    n_queries = args.queries or (200 if args.quick else 400)
    rounds = args.rounds or (2 if args.quick else 1)
    log = log_line(not args.json)
    try:
        trajectories: Path | None = trajectories_dir(args.trajectories)
    except NoTrajectories as e:
        # The chats are the dev set's own; every other group's turns are STATE-Bench's.
        if args.dev_set and not set(args.groups.split(",")) <= {"chat", "chat-other", "chat-long"}:
            raise SystemExit(f"bench_search --dev-set: {e.message}") from None
        trajectories = None
    if trajectories is not None and not trajectories.is_dir():
        raise SystemExit(f"bench_search: no trajectory directory {trajectories}")

    probe = sqlite3.connect(":memory:")
    try:
        probe.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='trigram')")
    except sqlite3.OperationalError as e:
        raise SystemExit(f"SQLite {sqlite3.sqlite_version} lacks FTS5 with trigram: {e}") from e
    finally:
        probe.close()

    if args.keep:
        root = Path(args.keep)
        root.mkdir(parents=True, exist_ok=True)
    else:
        parent = args.dir or testbed.scratch_parent()
        root = Path(tempfile.mkdtemp(prefix="morphz-bench-search-", dir=parent))
    report: dict[str, Any] = {
        "machine": testbed.machine(str(root)),
        "sqlite": sqlite3.sqlite_version,
    }
    if not args.json:
        print(testbed.describe(report["machine"]) + f", SQLite {sqlite3.sqlite_version}")
    try:
        if args.dev_set:
            cache = Path(args.cache_dir or Path(tempfile.gettempdir()) / "morphz-search-eval")
            embedder_config = None
            if args.embed_url:
                from adapters.embeddings import EmbedderConfig

                embedder_config = EmbedderConfig(
                    provider="openai",
                    model=args.embed_model,
                    url=args.embed_url,
                    input_type=args.embed_input_type,
                    batch_size=8,
                    timeout=600.0,
                )
            report["dev_set"] = search_eval.run(
                trajectories,
                root / "dev",
                cache,
                log,
                dense=not args.no_dense,
                embedder_config=embedder_config,
                scope_kinds=args.scopes.split(","),
                groups=args.groups.split(","),
            )
            if args.json:
                print(json.dumps(report))
            else:
                print_dev_set(report["dev_set"])
            return
        report["events"] = events
        timed = ["morphz", *args.engines.split(",")] if args.engines else []
        if trajectories is not None:
            docs = state_bench_docs(trajectories)
            queries = state_bench_queries(docs, n_queries)
            report["state_bench"] = run_corpus(
                "STATE-Bench", root / "sb", docs, queries, rounds, log, timed=timed
            )
        else:
            log(f"STATE-Bench corpus skipped: pass --trajectories DIR or set {TRAJECTORIES_ENV}")
        t0 = time.perf_counter()
        corpus = Synthetic(events)
        log(f"synthetic corpus generated in {time.perf_counter() - t0:.1f} s")
        kinds = ("tool_result", "user_message", "external")
        docs = [(kinds[i % 3], text) for i, text in enumerate(corpus.docs)]
        queries = corpus.queries(n_queries)
        del corpus
        report["synthetic"] = run_corpus(
            "synthetic", root / "syn", docs, queries, rounds, log, vectors=args.vectors, timed=timed
        )
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(report))
        return
    if "state_bench" in report:
        print_report(
            "STATE-Bench (found@10 = recall of the message a query was cut from)",
            report["state_bench"],
        )
    print_report("synthetic", report["synthetic"])


if __name__ == "__main__":
    main()
