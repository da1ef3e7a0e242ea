"""Context compilation (R35–R37): prompt-cache prefix stability and compile latency.

(a) Prefix stability. Every STATE-Bench training trajectory (``--data``,
default ``<checkout>/../shared/data/state-bench/train_task_trajectories``) is
replayed as a tool loop into a fresh in-memory context, one session per task:
the system prompt becomes an ``external`` observation (the task briefing),
each user message a ``user_message``, each tool call with its arguments and
result a ``tool_result``, each assistant reply an ``external`` observation
(after which the user request is delivered). Each step observes one record,
claims it and compiles the next model input. Every ``TX_EVERY`` steps a
scripted transaction derives (then revises) the frame ``task/<name>`` citing
the records since the last one and retires the tool results already
processed (all but the newest). For every call after the first of a task it
takes the longest byte-identical prefix of the serialized request (the chat
messages as a template would lay them out) shared with the previous call, and
reports the token-weighted share of input that prefix covers — the
prompt-cache hit a provider that caches every shared prefix would report —
without and with ContextDelta, plus the extra input tokens ContextDelta
sends. Seed figures printed beside: 85.67 % (Kimi K3) and 86.46 % (GLM 5.3)
without, 93.37 % (GPT-5.6 Sol) with. Aim: >= 95 % with.

(b) Compile latency at 100,000 input tokens. A store (LMDB, ``sync=False``)
holds one session with ~400 active tool results, some long (shown as
previews), ~70 frames with sources and relations, two other sessions, and a
retired history. Each round runs one tool-loop step untimed (observe, claim,
commit a transaction that revises a frame and retires the oldest tool
result), then times, in random order, each in its own read snapshot:

* ``Compiler.compile``   — a long-lived compiler (follows the store from the
  log of changed keys and caches rendered records);
* ``Compiler.compile, delta`` — the same with ContextDelta on (its own chain);
* ``compile_input``      — the same code with a fresh compiler (no cache);
* baseline ``naive``     — a plain function that reads every frame, event and
  event text from the store and renders and counts the whole text anew.

It prints p50 / p99 / mean and the ratios. Aim from the issue: p50 <= 20 ms.
Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import testbed  # first: puts this checkout on sys.path

from protocol.compiler import Compiler, CompilerConfig, compile_input
from protocol.engine import source_ref
from protocol.sexpr import print_form
from protocol.state import RETIRED, estimate_tokens
from protocol.turns import CompiledInput
from protocol.view import ReadView
from service.context import Context
from service.protocol_text import PROTOCOL_TEXT
from storage import LmdbStore
from storage.memory import MemoryBackend

DEFAULT_DATA = testbed.ROOT.parent / "shared" / "data" / "state-bench" / "train_task_trajectories"
TX_EVERY = 3
SEED_WITHOUT = {"Kimi K3": 85.67, "GLM 5.3": 86.46}
SEED_WITH = {"GPT-5.6 Sol": 93.37}
AIM_WITH = 95.0
AIM_P50_MS = 20.0
TARGET_TOKENS = 100_000


# -- (a) prefix stability ----------------------------------------------------


def serialize(messages: tuple[dict[str, Any], ...]) -> str:
    """The request as a chat template lays it out: role markers, then content."""
    return "".join(f"<|{m['role']}|>\n{m['content']}<|end|>\n" for m in messages)


def common_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix of *a* and *b* (binary search on slices)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def steps_of(conversation: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The trajectory as (kind, text) steps; ``reply`` marks an assistant answer."""
    out: list[tuple[str, str]] = []
    for m in conversation:
        role, content = m.get("role"), m.get("content") or ""
        if role == "system":
            out.append(("external", "task briefing: " + content))
        elif role == "user":
            if content.strip() != "[TASK_DONE]":
                out.append(("user_message", content))
        elif role == "assistant":
            for call in m.get("tool_calls") or ():
                doc = {
                    "tool": call.get("name"),
                    "arguments": call.get("arguments"),
                    "result": call.get("result"),
                }
                out.append(("tool_result", json.dumps(doc, ensure_ascii=False)))
            if content:
                out.append(("reply", content))
    return out


COUNTERS = ("calls", "tokens", "prefix", "ceiling", "all_tokens", "deltas")


def new_piece(c: CompiledInput, ref: str) -> str:
    """The rendered entry of observation *ref* in *c* (the newest message that holds it)."""
    for m in reversed(c.messages):
        text = m["content"]
        start = text.find("\n" + ref + " ")
        if start >= 0:
            end = text.find("\n@e", start + 1)
            entry = text[start + 1 : end if end >= 0 else len(text)]
            return entry.split("\n\n", 1)[0]
    return ""


def replay_task(
    name: str, steps: list[tuple[str, str]], configs: dict[str, CompilerConfig]
) -> dict[str, dict[str, int]]:
    """Replay one trajectory; per config: calls, input tokens, prefix tokens (after call 1)."""
    ctx = Context(MemoryBackend())
    session = "task"
    compilers = {k: Compiler(c, protocol_text=PROTOCOL_TEXT) for k, c in configs.items()}
    previous: dict[str, CompiledInput | None] = dict.fromkeys(configs)
    serial: dict[str, str | None] = dict.fromkeys(configs)
    stats = {k: dict.fromkeys(COUNTERS, 0) for k in configs}
    frame = f"task/{name}"
    since: list[str] = []
    tool_results: list[str] = []
    pending: list[str] = []
    tools_seen: list[str] = []
    for i, (kind, text) in enumerate(steps, 1):
        if kind == "reply":
            for ref in pending:
                ctx.deliver(ref)
            pending.clear()
            e = ctx.observe("external", "assistant reply: " + text, session=session)
        else:
            e = ctx.observe(kind, text, session=session)
            if kind == "user_message":
                pending.append(e.ref)
            if kind == "tool_result":
                tool_results.append(e.ref)
                tools_seen.append(json.loads(text).get("tool") or "tool")
        since.append(e.ref)
        ctx.claim()
        for k, comp in compilers.items():
            c = ctx.backend.read(
                lambda v, comp=comp, p=previous[k]: comp.compile(v, session=session, previous=p)
            )
            s = serialize(c.messages)
            total = estimate_tokens(s)
            st = stats[k]
            st["all_tokens"] += total
            st["deltas"] += c.encoding == "delta"
            if serial[k] is not None:
                st["calls"] += 1
                st["tokens"] += total
                st["prefix"] += estimate_tokens(s[: common_prefix(serial[k] or "", s)])
                # The ceiling: only the new observation's own text is uncached.
                st["ceiling"] += total - comp.tokenizer.count(new_piece(c, e.ref))
            previous[k], serial[k] = c, s
        if i % TX_EVERY == 0:
            processed = tool_results[:-1]
            tools = " ".join(dict.fromkeys(t.replace(" ", "_") for t in tools_seen)) or "none"
            body = f"(status in-progress) (step {i}) (tools {tools})"
            op = "derive" if ctx.version() == 0 else "revise"
            ops = [f"({op} {frame} (from {' '.join(since)}) {body})"]
            if processed:
                ops.append(f"(retire {' '.join(processed)})")
            receipt = ctx.commit(
                f'(context-tx (base-version {ctx.version()}) (reason "step {i}") {" ".join(ops)})'
            )
            assert receipt.status == "committed", receipt
            since.clear()
            del tool_results[:-1]
    ctx.close()
    return stats


def prefix_stability(data: Path, per_domain: int | None) -> dict[str, Any]:
    configs = {
        "without": CompilerConfig(),
        "with": CompilerConfig(context_delta=True),
        "with, no periodic re-render": CompilerConfig(
            context_delta=True, delta_rebase_every=1_000_000
        ),
    }
    totals = {k: dict.fromkeys(COUNTERS, 0) for k in configs}
    tasks = 0
    steps_total = 0
    for domain in sorted(p for p in data.iterdir() if p.is_dir()):
        files = sorted(domain.glob("*.json"), key=lambda p: (len(p.name), p.name))
        for path in files[:per_domain] if per_domain else files:
            doc = json.loads(path.read_text(encoding="utf-8"))
            steps = steps_of(doc["conversation"])
            name = f"{domain.name}/{path.stem.split('-', 1)[0]}"
            for k, st in replay_task(name, steps, configs).items():
                for key, value in st.items():
                    totals[k][key] += value
            tasks += 1
            steps_total += len(steps)
    out: dict[str, Any] = {"tasks": tasks, "steps": steps_total}
    tools = tool_schema_tokens()
    out["tool_schema_tokens"] = tools
    for k, t in totals.items():
        n = t["calls"]
        out[k] = {
            "calls_after_first": t["calls"],
            "input_tokens_after_first": t["tokens"],
            "prefix_tokens": t["prefix"],
            "prefix_share_pct": round(100 * t["prefix"] / t["tokens"], 2) if t["tokens"] else 0.0,
            "ceiling_pct": round(100 * t["ceiling"] / t["tokens"], 2) if t["tokens"] else 0.0,
            # The same request with the memory tools' schemas, which every call sends first.
            "prefix_share_with_tools_pct": (
                round(100 * (t["prefix"] + n * tools) / (t["tokens"] + n * tools), 2)
                if t["tokens"]
                else 0.0
            ),
            "uncached_tokens": t["tokens"] - t["prefix"],
            "input_tokens_all_calls": t["all_tokens"],
            "delta_calls": t["deltas"],
        }
    extra = out["with"]["input_tokens_all_calls"] - out["without"]["input_tokens_all_calls"]
    out["delta_extra_tokens"] = extra
    base = out["without"]["input_tokens_all_calls"]
    out["delta_extra_pct"] = round(100 * extra / base, 2) if base else 0.0
    return out


def tool_schema_tokens() -> int:
    """Tokens of the memory tools' JSON schemas the OpenAI-compatible client sends; 0 if absent."""
    try:
        from agents.tools import MEMORY_TOOL_SPECS
    except ImportError:
        return 0
    return estimate_tokens(json.dumps(MEMORY_TOOL_SPECS))


# -- (b) latency ---------------------------------------------------------------


def naive_compile(view: ReadView, session: str) -> tuple[str, int]:
    """The baseline: read every record and render and count the whole input anew."""
    meta = view.meta()
    parts = [PROTOCOL_TEXT, "## observations (active, oldest first)"]
    for e in view.iter_events():
        if e.lifecycle == RETIRED or e.claimed_tick is None or e.session != session:
            continue
        text = view.event_content(e.seq) or ""
        if e.kind in ("tool_result", "external") and estimate_tokens(text) > 400:
            more = len(text) - 600
            text = f"{text[:600]}\n  (… {more} more chars; read_event {e.ref} for the rest)"
        parts.append(f"{e.ref} {e.kind} [{e.session}] : " + text.replace("\n", "\n  "))
    parts.append("## frames")
    for f in view.iter_frames():
        if f.lifecycle == RETIRED:
            continue
        refs = " ".join(source_ref(view, s) for s in f.sources)
        parts.append(f"frame {f.id} r{f.revision} {f.lifecycle} (from {refs})")
        parts.append("  " + " ".join(print_form(x) for x in f.body))
    parts.append("## relations")
    parts.extend(" ".join(r) for r in view.iter_relations())
    parts.append(f"## runtime\nversion: {meta.version}\ntick: {meta.tick}")
    text = "\n".join(parts)
    return text, estimate_tokens(text)


WORDS = "build test deploy region cluster node latency error retry config shard".split()
LARGE_RESULTS = 370


def filler(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) + str(rng.randrange(100)) for _ in range(n_words))


def note_body(rng: random.Random) -> str:
    return " ".join(f'(fact{i} "{filler(rng, 12)}")' for i in range(6))


def build_large(path: str, rng: random.Random) -> Context:
    """A context whose compiled input is about TARGET_TOKENS tokens."""
    ctx = Context(LmdbStore.open(path, sync=False, map_size=1 << 30))

    def text(n_words: int) -> str:
        return filler(rng, n_words)

    batch: list[tuple[str, str, str]] = []
    for k in range(LARGE_RESULTS):
        long = k % 40 == 7
        batch.append(("tool_result", f"[run {k}] " + text(4000 if long else 130), "main"))
    for k in range(30):
        batch.append(("user_message" if k % 10 == 0 else "tool_result", text(60), "billing"))
        batch.append(("tool_result", text(60), "archive"))
    batch.append(("user_message", "Ship the release once the tests are green.", "main"))
    events = ctx.observe_many(batch)
    ctx.claim()
    pairs = zip(events, batch, strict=True)
    main = [e for e, (kind, _, session) in pairs if (kind, session) == ("tool_result", "main")]
    txs = []
    for j in range(70):
        srcs = " ".join(e.ref for e in main[j * 5 : j * 5 + 3])
        cites = f" note/{j - 1}" if j else ""
        body = note_body(rng)
        ops = [f"(derive note/{j} (from {srcs}{cites}) {body})"]
        if j:
            ops.append(f"(relate note/{j} follows note/{j - 1})")
        txs.append(f"(context-tx (base-version {j}) {' '.join(ops)})")
    for r in ctx.commit_many(txs):
        assert r.status == "committed", r
    # A retired history: the first 60 tool results were processed.
    retire = " ".join(e.ref for e in main[:60])
    ctx.commit(f"(context-tx (base-version {ctx.version()}) (retire {retire}))")
    return ctx


def latency(rounds: int, warmup: int, base_dir: str, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    path = tempfile.mkdtemp(prefix="compile-", dir=base_dir)
    ctx = build_large(os.path.join(path, "ctx"), rng)
    config = CompilerConfig()
    compiler = Compiler(config, protocol_text=PROTOCOL_TEXT)
    delta_config = CompilerConfig(context_delta=True)
    delta_compiler = Compiler(delta_config, protocol_text=PROTOCOL_TEXT)
    delta_previous: CompiledInput | None = None
    times: dict[str, list[float]] = {k: [] for k in KINDS}
    sizes: list[int] = []
    previous: CompiledInput | None = None
    try:
        first = ctx.backend.read(lambda v: compiler.compile(v, session="main"))
        previous = first
        for i in range(rounds + warmup):
            e = ctx.observe("tool_result", f"[step {i}] " + filler(rng, 130), session="main")
            ctx.claim()
            oldest = ctx.backend.read(
                lambda v: next(
                    x.ref
                    for x in v.iter_events()
                    if x.session == "main" and x.kind == "tool_result" and x.lifecycle != RETIRED
                )
            )
            n = i % 70
            receipt = ctx.commit(
                f"(context-tx (base-version {ctx.version()}) "
                f"(revise note/{n} (from {e.ref}) {note_body(rng)}) (retire {oldest}))"
            )
            assert receipt.status == "committed", receipt

            def run_cached(v: ReadView, p: CompiledInput | None = previous) -> CompiledInput:
                return compiler.compile(v, session="main", previous=p)

            def run_delta(v: ReadView, p: CompiledInput | None = delta_previous) -> CompiledInput:
                return delta_compiler.compile(v, session="main", previous=p)

            def run_fresh(v: ReadView, p: CompiledInput | None = previous) -> CompiledInput:
                return compile_input(
                    v, session="main", config=config, previous=p, protocol_text=PROTOCOL_TEXT
                )

            def run_naive(v: ReadView) -> tuple[str, int]:
                return naive_compile(v, "main")

            fns: dict[str, Callable[[ReadView], Any]] = {
                "Compiler.compile (cached)": run_cached,
                "Compiler.compile, delta": run_delta,
                "compile_input (no cache)": run_fresh,
                "baseline: naive": run_naive,
            }
            order = list(fns)
            rng.shuffle(order)
            results: dict[str, Any] = {}
            for kind in order:
                t0 = time.perf_counter()
                results[kind] = ctx.backend.read(fns[kind])
                elapsed = time.perf_counter() - t0
                if i >= warmup:
                    times[kind].append(elapsed)
            cached = results["Compiler.compile (cached)"]
            fresh = results["compile_input (no cache)"]
            assert cached.messages == fresh.messages, "the cache changed the output"
            previous = cached
            delta_previous = results["Compiler.compile, delta"]
            if i >= warmup:
                sizes.append(cached.tokens)
    finally:
        ctx.close()
        shutil.rmtree(path, ignore_errors=True)
    figures = {kind: summary(ts) for kind, ts in times.items()}
    base = figures["baseline: naive"]["p50_ms"]
    for kind in KINDS:
        figures[kind]["x_naive"] = testbed.ratio(figures[kind]["p50_ms"], base)
    assert previous is not None
    return {
        "figures": figures,
        "input_tokens_p50": int(statistics.median(sizes)),
        "events_shown": len(previous.events_present),
        "frames_shown": len(previous.frames_present),
        "pressure": round(previous.capacity.pressure, 3),
        "maintenance": previous.capacity.maintenance,
    }


KINDS = (
    "Compiler.compile (cached)",
    "Compiler.compile, delta",
    "compile_input (no cache)",
    "baseline: naive",
)


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {
        "p50_ms": round(statistics.median(ordered) * 1e3, 3),
        "p99_ms": round(p99 * 1e3, 3),
        "mean_ms": round(statistics.fmean(ordered) * 1e3, 3),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", nargs="?", default=str(DEFAULT_DATA), help="trajectory folder")
    parser.add_argument("--quick", action="store_true", help="10 tasks per domain, 40 rounds")
    parser.add_argument("--json", action="store_true", help="print one JSON document of figures")
    parser.add_argument("--dir", default=None, help="where the latency store is built")
    parser.add_argument("--rounds", type=int, default=None, help="timed latency rounds")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    data = Path(args.data)
    if not data.is_dir():
        parser.error(f"no trajectory folder at {data}")
    rounds = args.rounds or (40 if args.quick else 200)
    base = args.dir or testbed.scratch_parent()
    os.makedirs(base, exist_ok=True)

    prefix = prefix_stability(data, 10 if args.quick else None)
    lat = latency(rounds, warmup=max(5, rounds // 10), base_dir=base, seed=args.seed)
    with_pct = prefix["with"]["prefix_share_pct"]
    p50 = lat["figures"]["Compiler.compile (cached)"]["p50_ms"]
    doc = {
        "machine": testbed.machine(base),
        "prefix": prefix,
        "seed_without_pct": SEED_WITHOUT,
        "seed_with_pct": SEED_WITH,
        "aim_with_pct": AIM_WITH,
        "aim_with_met": with_pct >= AIM_WITH,
        "latency": lat,
        "rounds": rounds,
        "aim_p50_ms": AIM_P50_MS,
        "aim_p50_met": p50 <= AIM_P50_MS,
    }
    if args.json:
        print(json.dumps(doc))
        return
    print(f"machine: {testbed.describe(doc['machine'])}")
    print(
        f"(a) prefix stability: {prefix['tasks']} STATE-Bench trajectories, "
        f"{prefix['steps']} steps, a transaction every {TX_EVERY} steps"
    )
    seeds_without = ", ".join(f"{k} {v:.2f} %" for k, v in SEED_WITHOUT.items())
    seeds_with = ", ".join(f"{k} {v:.2f} %" for k, v in SEED_WITH.items())
    for k, label, seeds in (
        ("without", "without ContextDelta", f"seed: {seeds_without}"),
        ("with", "with ContextDelta", f"seed: {seeds_with}"),
        ("with, no periodic re-render", "with, never re-rendered", "for comparison"),
    ):
        f = prefix[k]
        print(
            f"  {label:24}: shared prefix {f['prefix_share_pct']:6.2f} % of "
            f"{f['input_tokens_after_first']:,} input tokens over {f['calls_after_first']:,} calls "
            f"after the first ({f['uncached_tokens']:,} uncached); ceiling "
            f"{f['ceiling_pct']:.2f} %; with the tool schemas "
            f"{f['prefix_share_with_tools_pct']:.2f} %   ({seeds})"
        )
    print(
        f"  ContextDelta: {prefix['with']['delta_calls']:,} delta-encoded calls; costs "
        f"{prefix['delta_extra_tokens']:+,} input tokens over all calls "
        f"({prefix['delta_extra_pct']:+.2f} %)"
    )
    print(
        "  ceiling: the share if only each call's new observation were uncached; with the tool "
        f"schemas: {prefix['tool_schema_tokens']} more tokens of memory-tool JSON schemas "
        "(agents.tools) counted as the shared start of every request"
    )
    verdict = "met" if doc["aim_with_met"] else "missed"
    print(f"  aim: with ContextDelta >= {AIM_WITH} %: {verdict} ({with_pct} %)")
    print(
        f"(b) compile latency: input p50 {lat['input_tokens_p50']:,} tokens "
        f"({lat['events_shown']} observations, {lat['frames_shown']} frames shown; pressure "
        f"{lat['pressure']:.1%}, maintenance {lat['maintenance']}); {rounds} rounds"
    )
    print(f"  {'':28} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'x naive':>8}")
    for kind, f in lat["figures"].items():
        print(
            f"  {kind:28} {f['p50_ms']:8.3f} {f['p99_ms']:8.3f} {f['mean_ms']:8.3f} "
            f"{f['x_naive']:8.2f}"
        )
    verdict = "met" if doc["aim_p50_met"] else "missed"
    print(f"  aim: Compiler.compile p50 <= {AIM_P50_MS} ms: {verdict} ({p50} ms)")


if __name__ == "__main__":
    sys.exit(main())
