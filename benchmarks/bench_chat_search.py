"""Question latency on a long chat between people: what the conversation rules cost.

The judged chats of the dev set (``benchmarks/search_dev/chat_turns.jsonl``: turns written
``<speaker>: <text>``, as a chat log records them) are cycled into one context of
``--turns`` events (default 1,000,000; ``--quick`` 100,000), 25 turns a session, and the
chats' 200 questions ("when did Tom bring Dottie home?", "how did Sam react to Leila's new
flat?") are asked of it. Cycling repeats each turn hundreds of times, so every word of a
question is common: a worst case for the scan, not a realistic ranking (the dev set
measures quality; ``bench_search.py --dev-set``).

Engines, on the same events and questions, in one run: Morphz's lexical index as a user
gets it (every question rule, the named-speaker and reaction rules among them); the same
without the rule for turns that ask something (``ANSWER_WEIGHT`` and ``FOLLOW_WEIGHT`` 0: no
probe of the ask term); the same without the named-speaker rule (the question names no
speaker); the same with the rules off (``questions=False, neighbours=False``: BM25 over the
words); SQLite FTS5 ``porter unicode61`` with the question's words OR-ed, ranked by
``bm25``. Top 10, no snippets (the rules are what is timed). Timings are printed, never asserted.

    .venv/bin/python benchmarks/bench_chat_search.py [--quick] [--turns N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import storage.search.ranking as ranking_module  # noqa: E402
import storage.search.text as text_module  # noqa: E402
from service.store import Store  # noqa: E402
from storage.search import LexicalIndex  # noqa: E402

DEV = Path(__file__).resolve().parent / "search_dev"
SESSION_TURNS = 25


def _chat(dev: Path) -> tuple[list[str], list[str]]:
    turns = [json.loads(line) for line in (dev / "chat_turns.jsonl").open(encoding="utf-8")]
    questions = [
        json.loads(line)["question"]
        for line in (dev / "chat_questions.jsonl").open(encoding="utf-8")
    ]
    return [f"{t['speaker']}: {t['text']}" for t in turns], questions


def _time(ask: Callable[[str], Any], questions: list[str], rounds: int) -> dict[str, float]:
    wall: list[float] = []
    cpu: list[float] = []
    for _ in range(rounds):
        for q in questions:
            w, c = time.perf_counter(), time.process_time()
            ask(q)
            wall.append((time.perf_counter() - w) * 1e3)
            cpu.append((time.process_time() - c) * 1e3)
    wall.sort()
    cpu.sort()
    p99 = int(len(wall) * 0.99)
    return {
        "p50_ms": round(statistics.median(wall), 2),
        "p99_ms": round(wall[p99], 2),
        "cpu_p50_ms": round(statistics.median(cpu), 2),
        "cpu_p99_ms": round(cpu[p99], 2),
    }


def run(turns: int, where: Path, rounds: int, log: Callable[[str], None]) -> dict[str, Any]:
    texts, questions = _chat(DEV)
    started = time.perf_counter()
    ctx = Store(where / "store").open("chat", sync=False)
    for lo in range(0, turns, 1000):
        ctx.observe_many(
            [
                {
                    "kind": "user_message",
                    "text": texts[i % len(texts)],
                    "session": str(i // SESSION_TURNS),
                    "time": 1.0e9 + i,
                }
                for i in range(lo, min(turns, lo + 1000))
            ]
        )
    index = LexicalIndex.for_backend(ctx.backend)
    index.rebuild()
    log(f"{turns:,} turns written and indexed in {time.perf_counter() - started:.1f} s")
    db = sqlite3.connect(str(where / "fts.db"))
    db.execute("CREATE VIRTUAL TABLE t USING fts5(body, tokenize='porter unicode61')")
    db.executemany(
        "INSERT INTO t(rowid, body) VALUES (?, ?)",
        ((i + 1, texts[i % len(texts)]) for i in range(turns)),
    )
    db.commit()

    def fts5(q: str) -> Any:
        match = " OR ".join('"' + w + '"' for w in re.findall(r"\w+", q))
        sql = (
            "SELECT rowid, snippet(t, 0, '«', '»', '…', 12) FROM t WHERE t MATCH ?"
            " ORDER BY bm25(t) LIMIT 10"
        )
        return db.execute(sql, (match,)).fetchall()

    names = text_module.asked_names

    def unnamed(q: str) -> Any:
        text_module.asked_names = lambda *_: ()
        try:
            return index.search(q, limit=10)
        finally:
            text_module.asked_names = names

    def unasked(q: str) -> Any:
        weights = ranking_module.ANSWER_WEIGHT, ranking_module.FOLLOW_WEIGHT
        ranking_module.ANSWER_WEIGHT = ranking_module.FOLLOW_WEIGHT = 0.0
        try:
            return index.search(q, limit=10)
        finally:
            ranking_module.ANSWER_WEIGHT, ranking_module.FOLLOW_WEIGHT = weights

    engines: dict[str, Callable[[str], Any]] = {
        "morphz": lambda q: index.search(q, limit=10),
        "morphz-no-asked-turns": unasked,
        "morphz-no-named-speaker": unnamed,
        "morphz-rules-off": lambda q: index.search(q, limit=10, questions=False, neighbours=False),
        "fts5-porter": fts5,
    }
    report: dict[str, Any] = {"turns": turns, "questions": len(questions), "engines": {}}
    for ask in engines.values():  # warm up: every page the questions touch is mapped
        for q in questions:
            ask(q)
    for name, ask in engines.items():
        report["engines"][name] = _time(ask, questions, rounds)
    report["load"] = round(os.getloadavg()[0], 2)
    db.close()
    index.close()
    ctx.close()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100,000 turns")
    parser.add_argument("--turns", type=int, default=None, help="events (default 1,000,000)")
    parser.add_argument("--rounds", type=int, default=2, help="passes over the questions")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    args = parser.parse_args()
    turns = args.turns or (100_000 if args.quick else 1_000_000)
    log = (lambda _: None) if args.json else print
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="morphz-bench-chat-") as where:
        report = run(turns, Path(where), args.rounds, log)
    if args.json:
        print(json.dumps(report))
        return
    print(f"\n== {turns:,} chat turns, {report['questions']} questions (load {report['load']}) ==")
    print(f"{'engine':<26}{'p50 ms':>9}{'p99 ms':>9}{'cpu p50':>9}{'cpu p99':>9}")
    for name, f in report["engines"].items():
        print(f"{name:<26}{f['p50_ms']:>9}{f['p99_ms']:>9}{f['cpu_p50_ms']:>9}{f['cpu_p99_ms']:>9}")


if __name__ == "__main__":
    main()
