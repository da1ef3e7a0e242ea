"""Choosing the nearest-neighbour library of the vector index: usearch, hnswlib, faiss-cpu.

Every library builds an HNSW graph over the same vectors with the same graph
parameters (``M = 16`` neighbours, ``ef_construction = 128``, ``ef_search =
64``, cosine/inner product on normalized float32 vectors) and answers the same
queries, one at a time, top 10. The baseline, measured in the same run, is the
exact answer: a brute-force numpy scan (one matrix-vector product and an
``argpartition``), which also gives the true neighbours for recall@10.

The vectors are "random-ish": *clusters* centres drawn at random in a
48-dimensional latent space, each vector a centre plus Gaussian noise,
projected to *dim* dimensions with a little full-rank noise, normalized
(sentence embeddings have a low intrinsic dimension; uniform noise in 384
dimensions has no meaningful nearest neighbours at all); each query is a data vector plus
more noise (a paraphrase of something stored), which is closer to sentence
embeddings of one conversation than uniform noise. Figures: build seconds
(with *threads* threads), query p50/p99 in milliseconds (one thread), recall@10
vs brute force, and the size of the saved index.

    .venv/bin/python benchmarks/bench_ann.py --n 100000 --dim 384 --queries 1000

A library that is not installed is skipped (it says so).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

M = 16
EF_CONSTRUCTION = 128
EF_SEARCH = 64
K = 10
LATENT = 48


def vectors(n: int, dim: int, clusters: int, seed: int) -> np.ndarray:
    """*n* normalized float32 vectors around *clusters* random centres, of intrinsic
    dimension :data:`LATENT` (a random projection up to *dim*, plus a little noise)."""
    rng = np.random.default_rng(seed)
    basis = rng.standard_normal((LATENT, dim)).astype(np.float32) / float(np.sqrt(LATENT))
    centres = rng.standard_normal((clusters, LATENT)).astype(np.float32)
    which = rng.integers(0, clusters, n)
    latent = centres[which] + 0.8 * rng.standard_normal((n, LATENT)).astype(np.float32)
    out = latent @ basis + 0.05 * rng.standard_normal((n, dim)).astype(np.float32)
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return np.asarray(out, dtype=np.float32)


def exact(data: np.ndarray, queries: np.ndarray) -> tuple[np.ndarray, list[float]]:
    """The true top-K of each query (brute force) and the time each took."""
    truth = np.empty((len(queries), K), dtype=np.int64)
    times = []
    for i, q in enumerate(queries):
        t = time.perf_counter()
        scores = data @ q
        top = np.argpartition(-scores, K)[:K]
        truth[i] = top[np.argsort(-scores[top])]
        times.append(time.perf_counter() - t)
    return truth, times


def recall(found: list[np.ndarray], truth: np.ndarray) -> float:
    hits = sum(len(set(map(int, f)) & set(map(int, t))) for f, t in zip(found, truth, strict=True))
    return hits / (len(truth) * K)


def file_size(path: str) -> int:
    return os.path.getsize(path) if os.path.isfile(path) else 0


def run_usearch(data: np.ndarray, queries: np.ndarray, threads: int, tmp: str) -> dict[str, Any]:
    from usearch.index import Index

    index = Index(
        ndim=data.shape[1],
        metric="cos",
        dtype="f32",
        connectivity=M,
        expansion_add=EF_CONSTRUCTION,
        expansion_search=EF_SEARCH,
    )
    t = time.perf_counter()
    index.add(np.arange(len(data), dtype=np.uint64), data, threads=threads)
    build = time.perf_counter() - t

    def one(q: np.ndarray) -> np.ndarray:
        return np.asarray(index.search(q, K, threads=1).keys)

    path = os.path.join(tmp, "usearch.index")
    index.save(path)
    return {"build": build, "query": one, "size": file_size(path)}


def run_hnswlib(data: np.ndarray, queries: np.ndarray, threads: int, tmp: str) -> dict[str, Any]:
    import hnswlib

    index = hnswlib.Index(space="ip", dim=data.shape[1])
    index.init_index(max_elements=len(data), ef_construction=EF_CONSTRUCTION, M=M)
    index.set_num_threads(threads)
    t = time.perf_counter()
    index.add_items(data, np.arange(len(data)))
    build = time.perf_counter() - t
    index.set_ef(EF_SEARCH)
    index.set_num_threads(1)

    def one(q: np.ndarray) -> np.ndarray:
        labels, _ = index.knn_query(q, k=K)
        return np.asarray(labels[0])

    path = os.path.join(tmp, "hnswlib.index")
    index.save_index(path)
    return {"build": build, "query": one, "size": file_size(path)}


def run_faiss(data: np.ndarray, queries: np.ndarray, threads: int, tmp: str) -> dict[str, Any]:
    import faiss

    faiss.omp_set_num_threads(threads)
    index = faiss.IndexHNSWFlat(data.shape[1], M, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = EF_CONSTRUCTION
    t = time.perf_counter()
    index.add(data)
    build = time.perf_counter() - t
    index.hnsw.efSearch = EF_SEARCH
    faiss.omp_set_num_threads(1)

    def one(q: np.ndarray) -> np.ndarray:
        _, labels = index.search(q.reshape(1, -1), K)
        return np.asarray(labels[0])

    path = os.path.join(tmp, "faiss.index")
    faiss.write_index(index, path)
    return {"build": build, "query": one, "size": file_size(path)}


LIBRARIES: dict[str, Callable[..., dict[str, Any]]] = {
    "usearch": run_usearch,
    "hnswlib": run_hnswlib,
    "faiss-cpu": run_faiss,
}


def ms(values: list[float], q: float) -> float:
    values = sorted(values)
    return 1000 * values[min(len(values) - 1, int(q * len(values)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--clusters", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", nargs="*", default=list(LIBRARIES))
    parser.add_argument("--quick", action="store_true", help="20,000 vectors, 200 queries")
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = parser.parse_args()
    if args.quick:
        args.n, args.queries = min(args.n, 20_000), min(args.queries, 200)
    figures: list[dict[str, Any]] = []
    data = vectors(args.n, args.dim, args.clusters, 1)
    rng = np.random.default_rng(2)
    queries = data[rng.integers(0, len(data), args.queries)] + 0.05 * rng.standard_normal(
        (args.queries, args.dim)
    ).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    print(
        f"{args.n} x {args.dim} float32, {args.queries} queries, top {K}, "
        f"M={M} ef_construction={EF_CONSTRUCTION} ef_search={EF_SEARCH}, "
        f"build threads {args.threads}, load {os.getloadavg()[0]:.2f}"
    )
    truth, times = exact(data, queries)
    print("| library | build s | query p50 ms | query p99 ms | recall@10 | index MiB |")
    print("|---|---|---|---|---|---|")
    print(
        f"| brute force (numpy, baseline) | 0 | {ms(times, 0.5):.3f} | {ms(times, 0.99):.3f} "
        f"| 1.000 | {data.nbytes / 2**20:.0f} |"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only:
            try:
                built = LIBRARIES[name](data, queries, args.threads, tmp)
            except ImportError as e:
                print(f"| {name} | not installed ({e}) | | | | |")
                continue
            one = built["query"]
            for q in queries[:20]:
                one(q)  # warm up
            found, qtimes = [], []
            for q in queries:
                t = time.perf_counter()
                found.append(one(q))
                qtimes.append(time.perf_counter() - t)
            row = {
                "library": name,
                "build_s": round(built["build"], 2),
                "p50_ms": round(ms(qtimes, 0.5), 3),
                "p99_ms": round(ms(qtimes, 0.99), 3),
                "recall_at_10": round(recall(found, truth), 4),
                "index_mib": round(built["size"] / 2**20, 1),
            }
            figures.append(row)
            print(
                f"| {name} | {row['build_s']:.1f} | {row['p50_ms']:.3f} | {row['p99_ms']:.3f} "
                f"| {row['recall_at_10']:.3f} | {row['index_mib']:.0f} |"
            )
    print(f"median brute force {statistics.median(times) * 1000:.2f} ms")
    if args.json:
        baseline = {"p50_ms": round(ms(times, 0.5), 3), "p99_ms": round(ms(times, 0.99), 3)}
        print(
            json.dumps(
                {"n": args.n, "dim": args.dim, "brute_force": baseline, "libraries": figures}
            )
        )


if __name__ == "__main__":
    main()
