"""The local MiniLM's query latency (p50/p99 of one-query calls) and document throughput,
for one backend: ``python benchmarks/local_embed_latency.py numpy`` (or
``sentence-transformers``, in an environment holding torch). Run both back to back on
the same machine for a same-run comparison (docs/search.md, "Reranking")."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from adapters.embeddings import EmbedderConfig, LocalEmbedder  # noqa: E402
from tests.adapters.minilm_reference import LONG  # noqa: E402


def main() -> None:
    backend = sys.argv[1] if len(sys.argv) > 1 else "auto"
    config = EmbedderConfig(provider="local", model="all-MiniLM-L6-v2", batch_size=32)
    e = LocalEmbedder(config, backend=backend)
    queries = [
        "when did she move to Berlin?",
        "what did the user decide about the refund",
        "tablet refund",
        "deploy eu-west-1 region status",
        "用户决定退款",
    ] * 40
    e.embed(["warm up"], kind="query")
    lat = []
    for q in queries:
        t = time.perf_counter()
        e.embed([q], kind="query")
        lat.append((time.perf_counter() - t) * 1000)
    lat.sort()
    docs = [
        f"Turn {i}: the user asked the assistant to move the standup to Thursday at"
        f" 10:{i % 60:02d} and book room {i}."
        for i in range(256)
    ] + [LONG] * 32
    t = time.perf_counter()
    e.embed(docs)
    seconds = time.perf_counter() - t
    figures = {
        "backend": e.backend,
        "query_p50_ms": round(lat[len(lat) // 2], 2),
        "query_p99_ms": round(lat[int(len(lat) * 0.99)], 2),
        "docs_per_s": round(len(docs) / seconds, 1),
        "docs": len(docs),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
