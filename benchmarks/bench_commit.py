"""Durable commit throughput of a typical context transaction, beside raw LMDB puts.

The transaction, committed once per claimed tool result ``@eN``::

    (context-tx (base-version V)
      (derive result/i (from @eN frame/base) (tests passed) (run i))
      (relate result/i supports frame/base)
      (retire @eN))

Every transaction is based on the version current when it commits, so none is
rebased and none conflicts. Observations are recorded and claimed beforehand,
outside the timed part; so is parsing, except in the "from text" figure.

(a) single durable commits: ``Context.commit`` per LMDB write (fsync'd), against
    a raw ``put`` + commit per write of a value as large as everything one
    committed transaction writes (all its keys and values, counted on one
    commit);
(b) group commit: ``Context.commit_many`` of 64 parsed transactions per write,
    against 64 raw puts of that size per write, and the same as a context
    actor runs it (each transaction beside its text with its own client id, each
    receipt turned into its dict);
(c) the cost of ``parse_tx`` per transaction, against ``json.loads`` of the same
    transaction's JSON wire form.

Rounds interleave the measured and baseline runs so drift on a shared machine
hits both. Timings are printed, never asserted.

``--instructions`` counts instructions instead, which do not move with the
machine's load: each kind of write (single commit, group commit, group commit as a
context actor hands it, and their raw put baselines) runs in a child under
``valgrind --tool=callgrind`` twice, once
writing nothing and once writing N transactions after the same setup; the
difference over N is the instructions per transaction (Python included).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import resource
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import lmdb
import msgpack
import testbed  # first: puts this checkout on sys.path

from protocol.receipts import Receipt
from protocol.tx import ContextTx
from protocol.txlang import parse_tx
from protocol.txwire import SubmittedTx, tx_from_json, tx_to_json
from protocol.view import WriteView
from service.context import Context
from service.transactions import new_client_id
from storage import LmdbStore

TX = (
    "(context-tx (base-version {version})"
    " (derive result/{i} (from {ref} frame/base) (tests passed) (run {i}))"
    " (relate result/{i} supports frame/base)"
    " (retire {ref}))"
)
BASE_TX = '(context-tx (base-version 0) (derive frame/base (goal "ship the release")))'
OBSERVATION = "pytest -q: 412 passed, 3 skipped in 41.7s; coverage 87%; artefact dist/app-{i}.whl"
BATCH = 64
AIM_SINGLE_RATIO = 0.80
AIM_GROUP_TPS = 20_000
WARM_UP = 20
_KEY = struct.Struct(">Q")


class _CountingTxn:
    """An LMDB transaction that counts the puts and deletes passed through it."""

    def __init__(self, txn: Any) -> None:
        self._txn = txn
        self.puts = 0
        self.deletes = 0
        self.bytes = 0

    def put(self, key: bytes, value: bytes, **kwargs: Any) -> Any:
        self.puts += 1
        self.bytes += len(key) + len(value)
        return self._txn.put(key, value, **kwargs)

    def delete(self, key: bytes, *args: Any, **kwargs: Any) -> Any:
        self.deletes += 1
        self.bytes += len(key)
        return self._txn.delete(key, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._txn, name)


def write_size(store: LmdbStore, tx: ContextTx) -> dict[str, int]:
    """Commit *tx* once (untimed) and count what it writes: puts, deletes, key+value bytes.

    It wraps the store view's private LMDB transaction; this is measurement only.
    """
    counter: dict[str, _CountingTxn] = {}

    class Counting:
        def read(self, fn: Callable[[Any], Any]) -> Any:
            return store.read(fn)

        def transact(self, fn: Callable[[WriteView], Any]) -> Any:
            def counted(view: Any) -> Any:
                counter["txn"] = view._txn = _CountingTxn(view._txn)
                return fn(view)

            return store.transact(counted)

        def close(self) -> None:
            pass

    ctx = Context(Counting())
    _check(ctx.commit(tx))
    txn = counter["txn"]
    record = ctx.txlog(ctx.version())
    return {
        "puts": txn.puts,
        "deletes": txn.deletes,
        "bytes": txn.bytes,
        "txlog_record_bytes": len(msgpack.packb(record, use_bin_type=True)),
    }


def written(fn: Callable[..., object], *args: Any) -> int:
    """Bytes this process passed to write calls while running ``fn(*args)`` (-1: unknown).

    LMDB (without ``writemap``) writes each dirty page and the meta page with
    ``pwrite``, so this is the page traffic a commit sends to the file.
    """

    def wchar() -> int:
        try:
            with open("/proc/self/io", encoding="ascii") as f:
                for line in f:
                    if line.startswith("wchar:"):
                        return int(line.split()[1])
        except OSError:
            pass
        return -1

    before = wchar()
    fn(*args)
    after = wchar()
    return after - before if before >= 0 and after >= 0 else -1


def _check(receipt: Receipt) -> None:
    if receipt.status != "committed":
        raise RuntimeError(f"the benchmark transaction was not committed: {receipt}")


class Workload:
    """Hands out transaction texts, each citing and retiring the next claimed observation."""

    def __init__(self, ctx: Context, refs: Sequence[str]) -> None:
        self.ctx = ctx
        self.refs = iter(refs)
        self.next_id = 0

    def texts(self, n: int) -> list[str]:
        """*n* texts whose base versions follow the context's current version."""
        version = self.ctx.version()
        out = []
        for k in range(n):
            i = self.next_id
            self.next_id += 1
            out.append(TX.format(version=version + k, i=i, ref=next(self.refs)))
        return out


def submitted(texts: Sequence[str]) -> list[SubmittedTx]:
    """*texts* as a context actor hands them to ``commit_many``: parsed, each beside its
    text, with its own client id and the agent that sent it."""
    out = []
    for text in texts:
        tx = parse_tx(text).model_copy(update={"client_id": new_client_id()})
        out.append(SubmittedTx(tx, text, "agent:bench"))
    return out


def commit_groups_as_actor(ctx: Context, txs: Sequence[SubmittedTx], batch: int) -> None:
    """:func:`commit_groups` as the context actor's inbox runs it: each receipt is turned
    into the dict it answers with."""
    for k in range(0, len(txs), batch):
        for receipt in ctx.commit_many(txs[k : k + batch]):
            _check(receipt)
            receipt.to_dict()


def _cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


class Tally:
    """Wall and CPU (user, system) seconds spent on operations, summed over the rounds."""

    def __init__(self) -> None:
        self.count = 0
        self.wall = 0.0
        self.user = 0.0
        self.system = 0.0
        self.round_rates: list[float] = []

    def time(self, count: int, fn: Callable[..., object], *args: Any) -> None:
        """Run ``fn(*args)``, which performs *count* operations, and add its time."""
        (user, system), wall = _cpu(), time.perf_counter()
        fn(*args)
        wall = time.perf_counter() - wall
        user_after, system_after = _cpu()
        self.count += count
        self.wall += wall
        self.user += user_after - user
        self.system += system_after - system
        self.round_rates.append(round(count / wall, 1))

    @property
    def rate(self) -> float:
        """Operations per wall-clock second."""
        return self.count / self.wall if self.wall else 0.0

    def round_ratio(self, baseline: Tally) -> float:
        """The median over rounds of this rate / *baseline*'s rate in the same round."""
        pairs = zip(self.round_rates, baseline.round_rates, strict=True)
        return round(statistics.median(a / b for a, b in pairs), 3)

    def figures(self) -> dict[str, Any]:
        per_op = 1e6 / self.count if self.count else 0.0
        return {
            "count": self.count,
            "per_s": round(self.rate, 1),
            "wall_us_per_op": round(self.wall * per_op, 1),
            "user_us_per_op": round(self.user * per_op, 1),
            "system_us_per_op": round(self.system * per_op, 1),
            "round_rates": self.round_rates,
        }


def commit_each(ctx: Context, items: Sequence[ContextTx | str]) -> None:
    """Commit *items* one per durable write."""
    for item in items:
        _check(ctx.commit(item))


def commit_groups(ctx: Context, txs: Sequence[ContextTx], batch: int) -> None:
    """Commit *txs* *batch* per durable write."""
    for k in range(0, len(txs), batch):
        for receipt in ctx.commit_many(txs[k : k + batch]):
            _check(receipt)


class RawLmdb:
    """The baseline: an LMDB environment opened as the store opens its own."""

    def __init__(self, path: str, value_size: int) -> None:
        self.env = lmdb.open(
            path,
            map_size=1 << 30,
            subdir=True,
            sync=True,
            metasync=True,
            max_dbs=32,
            lock=True,
        )
        self.db = self.env.open_db(b"raw")
        self.value = os.urandom(value_size)
        self.key = 0

    def puts(self, writes: int, per_write: int) -> None:
        """*writes* durable write transactions of *per_write* puts each."""
        env, db, value = self.env, self.db, self.value
        for _ in range(writes):
            with env.begin(write=True, db=db) as txn:
                for _ in range(per_write):
                    self.key += 1
                    txn.put(_KEY.pack(self.key), value)

    def close(self) -> None:
        self.env.close()


def parse_baseline(texts: list[str], repeat: int = 3) -> dict[str, float]:
    """Microseconds per transaction, best of *repeat*: parse_tx, tx_from_json, json.loads.

    The JSON inputs are the transactions' JSON wire form (:func:`tx_to_json`).
    """
    wire = [tx_to_json(parse_tx(t)) for t in texts]
    figures = {}
    for name, fn, inputs in (
        ("parse_tx_us", parse_tx, texts),
        ("tx_from_json_us", tx_from_json, wire),
        ("json_loads_us", json.loads, wire),
    ):
        best = float("inf")
        for _ in range(repeat):
            start = time.perf_counter()
            for item in inputs:
                fn(item)
            best = min(best, time.perf_counter() - start)
        figures[name] = round(best / len(inputs) * 1e6, 1)
    return figures


def profile_groups(ctx: Context, txs: Sequence[ContextTx], batch: int, top: int) -> str:
    """The top *top* cumulative entries of cProfile over group-committing *txs*."""
    profiler = cProfile.Profile()
    profiler.enable()
    commit_groups(ctx, txs, batch)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def observe_all(ctx: Context, count: int) -> list[str]:
    """Record and claim *count* tool results; their references, oldest first."""
    refs: list[str] = []
    for k in range(0, count, 1024):  # observe_many takes at most 1,024 items
        items = [
            ("tool_result", OBSERVATION.format(i=i), "main") for i in range(k, min(count, k + 1024))
        ]
        refs.extend(e.ref for e in ctx.observe_many(items))
    ctx.claim()
    return refs


def run(args: argparse.Namespace, where: str) -> dict[str, Any]:
    rounds = args.rounds
    per_round = max(1, args.single // rounds)
    groups_per_round = max(1, args.groups // rounds)
    group_txs = groups_per_round * args.batch
    profile_txs = args.batch * 20 if args.profile else 0
    needed = 1 + WARM_UP + rounds * (2 * per_round + 2 * group_txs) + profile_txs
    tally = {
        name: Tally() for name in ("parsed", "text", "raw", "group", "submitted", "raw_group")
    }

    store = LmdbStore.open(os.path.join(where, "context"), sync=True)
    raw: RawLmdb | None = None
    try:
        ctx = Context(store)
        _check(ctx.commit(BASE_TX))
        work = Workload(ctx, observe_all(ctx, needed))
        sizes = write_size(store, parse_tx(work.texts(1)[0]))
        warm_up = [parse_tx(t) for t in work.texts(WARM_UP)]
        sizes["file_bytes"] = written(commit_each, ctx, warm_up) // WARM_UP
        raw = RawLmdb(os.path.join(where, "raw"), sizes["bytes"])
        sizes["raw_file_bytes"] = written(raw.puts, WARM_UP, 1) // WARM_UP
        for _ in range(rounds):
            parsed = [parse_tx(t) for t in work.texts(per_round)]
            tally["parsed"].time(per_round, commit_each, ctx, parsed)
            tally["text"].time(per_round, commit_each, ctx, work.texts(per_round))
            tally["raw"].time(per_round, raw.puts, per_round, 1)
            group = [parse_tx(t) for t in work.texts(group_txs)]
            tally["group"].time(group_txs, commit_groups, ctx, group, args.batch)
            sent = submitted(work.texts(group_txs))
            tally["submitted"].time(group_txs, commit_groups_as_actor, ctx, sent, args.batch)
            tally["raw_group"].time(group_txs, raw.puts, groups_per_round, args.batch)
        profile = None
        if args.profile:
            txs = [parse_tx(t) for t in work.texts(profile_txs)]
            profile = profile_groups(ctx, txs, args.batch, 15)
        final_version = ctx.version()
    finally:
        if raw is not None:
            raw.close()
        store.close()
    parse = parse_baseline(
        [TX.format(version=i + 1, i=i, ref=f"@e{i + 1}") for i in range(args.parse)]
    )

    single_us = 1e6 / tally["parsed"].rate
    group_us = 1e6 / tally["group"].rate
    figures: dict[str, Any] = {
        "benchmark": "bench_commit",
        "machine": testbed.machine(where),
        "compiled": compiled_modules(),
        "transaction": TX,
        "write": sizes,
        "baseline_value_bytes": sizes["bytes"],
        "rounds": rounds,
        "single": {
            "commit_parsed": tally["parsed"].figures(),
            "commit_text": tally["text"].figures(),
            "raw_put": tally["raw"].figures(),
            "parsed_ratio": testbed.ratio(tally["parsed"].rate, tally["raw"].rate),
            "text_ratio": testbed.ratio(tally["text"].rate, tally["raw"].rate),
            "parsed_ratio_median_round": tally["parsed"].round_ratio(tally["raw"]),
            "text_ratio_median_round": tally["text"].round_ratio(tally["raw"]),
            "aim_ratio": AIM_SINGLE_RATIO,
        },
        "group": {
            "batch": args.batch,
            "commit_many": tally["group"].figures(),
            "commit_many_submitted": tally["submitted"].figures(),
            "submitted_ratio": testbed.ratio(tally["submitted"].rate, tally["raw_group"].rate),
            "raw_puts": tally["raw_group"].figures(),
            "ratio": testbed.ratio(tally["group"].rate, tally["raw_group"].rate),
            "ratio_median_round": tally["group"].round_ratio(tally["raw_group"]),
            "aim_tx_per_s": AIM_GROUP_TPS,
        },
        "parse": {
            **parse,
            "ratio_to_json_loads": testbed.ratio(parse["parse_tx_us"], parse["json_loads_us"]),
            "share_of_single_commit": testbed.ratio(parse["parse_tx_us"], single_us),
            "share_of_group_tx": testbed.ratio(parse["parse_tx_us"], group_us),
        },
        "final_version": final_version,
    }
    if profile is not None:
        figures["profile"] = profile
    return figures


def anatomy(where: str, commits: int, batch: int, groups: int) -> dict[str, Any]:
    """Where one commit's write goes: rows, bytes and B-tree depth per named database,
    pages sent to the file, and time split between the engine's decision, encoding and
    LMDB puts, and the LMDB commit (page writes + fsync), single and group.

    It wraps the store view's private LMDB transaction and times ``evaluate`` and
    ``apply`` by patching them in this process; this is measurement only.
    """
    import service.transactions as service_transactions
    from storage.lmdb.views import _LmdbWriteView

    store = LmdbStore.open(os.path.join(where, "context"), sync=True)
    names: dict[int, str] = {id(db): name for name, db in store._shared.dbs.items()}
    clock = time.perf_counter
    spent = {"evaluate": 0.0, "apply": 0.0, "put": 0.0, "callback": 0.0, "transact": 0.0}
    rows: dict[str, list[int]] = {}

    class TimedTxn(_CountingTxn):
        def put(self, key: bytes, value: bytes, **kwargs: Any) -> Any:
            t = clock()
            row = rows.setdefault(names.get(id(kwargs.get("db")), "?"), [0, 0])
            row[0] += 1
            row[1] += len(key) + len(value)
            out = self._txn.put(key, value, **kwargs)
            spent["put"] += clock() - t
            return out

    real_evaluate = service_transactions.evaluate
    real_apply = _LmdbWriteView.apply

    def evaluate(*args: Any, **kwargs: Any) -> Any:
        t = clock()
        try:
            return real_evaluate(*args, **kwargs)
        finally:
            spent["evaluate"] += clock() - t

    def apply(self: Any, changes: Any) -> None:
        t = clock()
        try:
            real_apply(self, changes)
        finally:
            spent["apply"] += clock() - t

    class Timed:
        def read(self, fn: Callable[[Any], Any]) -> Any:
            return store.read(fn)

        def transact(self, fn: Callable[[WriteView], Any]) -> Any:
            def timed(view: Any) -> Any:
                view._txn = TimedTxn(view._txn)
                t = clock()
                try:
                    return fn(view)
                finally:
                    spent["callback"] += clock() - t

            t = clock()
            try:
                return store.transact(timed)
            finally:
                spent["transact"] += clock() - t

        def close(self) -> None:
            pass

    def split(n: int) -> dict[str, float]:
        us = {k: round(v * 1e6 / n, 1) for k, v in spent.items()}
        return {
            "engine_us": us["evaluate"],
            "encode_us": round(us["apply"] - us["put"], 1),
            "lmdb_put_us": us["put"],
            "other_in_write_us": round(us["callback"] - us["evaluate"] - us["apply"], 1),
            "lmdb_commit_fsync_us": round(us["transact"] - us["callback"], 1),
            "total_us": us["transact"],
        }

    service_transactions.evaluate = evaluate  # type: ignore[assignment]
    _LmdbWriteView.apply = apply  # type: ignore[method-assign]
    try:
        ctx = Context(Timed())
        _check(ctx.commit(BASE_TX))
        work = Workload(ctx, observe_all(ctx, 1 + WARM_UP + commits + groups * batch))
        commit_each(ctx, [parse_tx(t) for t in work.texts(WARM_UP)])
        # One commit, counted row by row.
        for k in spent:
            spent[k] = 0.0
        rows.clear()
        one = [parse_tx(t) for t in work.texts(1)]
        file_bytes = written(commit_each, ctx, one)
        per_db = dict(sorted(rows.items()))
        depth = store.read(
            lambda v: {name: v._txn.stat(store._shared.dbs[name])["depth"] for name in per_db}
        )
        table = {
            name: {"rows": r, "bytes": b, "depth": depth[name]} for name, (r, b) in per_db.items()
        }
        # Timed: single commits, then group commits.
        txs = [parse_tx(t) for t in work.texts(commits)]
        for k in spent:
            spent[k] = 0.0
        single_bytes = written(commit_each, ctx, txs)
        single = split(commits) | {"file_bytes_per_commit": single_bytes // commits}
        group_txs = [parse_tx(t) for t in work.texts(groups * batch)]
        for k in spent:
            spent[k] = 0.0
        group_bytes = written(commit_groups, ctx, group_txs, batch)
        group = split(groups * batch) | {
            "file_bytes_per_write": group_bytes // groups,
        }
    finally:
        service_transactions.evaluate = real_evaluate  # type: ignore[assignment]
        _LmdbWriteView.apply = real_apply  # type: ignore[method-assign]
        store.close()
    return {
        "benchmark": "bench_commit --anatomy",
        "machine": testbed.machine(where),
        "databases": table,
        "databases_touched": len(table),
        "file_bytes_one_commit": file_bytes,
        "pages_one_commit": round(file_bytes / 4096, 1),
        "single": single,
        "group": group | {"batch": batch},
    }


INSTRUCTION_KINDS = ("single", "group", "actor", "raw_single", "raw_group")


def instructions_child(kind: str, n: int, total: int, batch: int, where: str) -> None:
    """The setup every count shares, then *n* writes of *kind* (run under callgrind).

    The setup parses *total* transactions whatever *n* is, so the difference
    between two children is the writes alone.
    """
    store = LmdbStore.open(os.path.join(where, "context"), sync=True)
    try:
        ctx = Context(store)
        _check(ctx.commit(BASE_TX))
        work = Workload(ctx, observe_all(ctx, total + WARM_UP + 1))
        size = write_size(store, parse_tx(work.texts(1)[0]))["bytes"]
        commit_each(ctx, [parse_tx(t) for t in work.texts(WARM_UP)])
        texts = work.texts(total)
        txs = [parse_tx(t) for t in texts]
        sent = submitted(texts)
        raw = RawLmdb(os.path.join(where, "raw"), size)
        raw.puts(WARM_UP, 1)
        if kind == "single":
            commit_each(ctx, txs[:n])
        elif kind == "group":
            commit_groups(ctx, txs[:n], batch)
        elif kind == "actor":
            commit_groups_as_actor(ctx, sent[:n], batch)
        elif kind == "raw_single":
            raw.puts(n, 1)
        else:
            raw.puts(n // batch, batch)
        raw.close()
    finally:
        store.close()


def _callgrind(kind: str, n: int, total: int, batch: int, parent: str) -> int:
    """Instructions a child running :func:`instructions_child` executed, in all."""
    where = tempfile.mkdtemp(prefix="morphz-bench-commit-cg-", dir=parent)
    out = os.path.join(where, "callgrind.out")
    try:
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}",
                sys.executable,
                os.path.abspath(__file__),
                "--instructions-child",
                kind,
                str(n),
                str(total),
                str(batch),
                where,
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        with open(out, encoding="utf-8") as f:
            for line in f:
                if line.startswith(("summary:", "totals:")):
                    return int(line.split()[1])
        raise RuntimeError("callgrind wrote no totals")
    finally:
        shutil.rmtree(where, ignore_errors=True)


def compiled_modules() -> list[str]:
    """The commit path's modules this run loads compiled (``./dev compile``), if any."""
    import protocol.engine.records
    import protocol.view
    import storage.lmdb.views

    mods = (protocol.engine.records, protocol.view, storage.lmdb.views)
    return [m.__name__ for m in mods if not (m.__file__ or "").endswith(".py")]


def count_instructions(n: int, batch: int, parent: str) -> dict[str, Any]:
    """Instructions per transaction of each kind of write, by difference of two children."""
    per_tx: dict[str, int] = {}
    for kind in INSTRUCTION_KINDS:
        empty = _callgrind(kind, 0, n, batch, parent)
        full = _callgrind(kind, n, n, batch, parent)
        per_tx[kind] = round((full - empty) / n)
    return {
        "benchmark": "bench_commit --instructions",
        "compiled": compiled_modules(),
        "transactions": n,
        "batch": batch,
        "instructions_per_tx": per_tx,
        "single_over_raw": testbed.ratio(per_tx["single"], per_tx["raw_single"]),
        "group_over_raw": testbed.ratio(per_tx["group"], per_tx["raw_group"]),
    }


# -- --phases: the group commit's instructions phase by phase ----------------------------

PHASES: tuple[tuple[str, str, str], ...] = (
    # (phase, module, attribute the commit path calls it by)
    ("prepare", "service.transactions", "prepare"),
    ("evaluate", "service.transactions", "evaluate"),
    ("digest", "protocol.engine.evaluation", "tx_digest"),
    ("check_client", "protocol.engine.evaluation", "check_client"),
    ("check_base", "protocol.engine.evaluation", "check_base"),
    ("decision", "protocol.engine.evaluation", "Decision"),
    ("successor_rule", "protocol.engine.evaluation", "successor_rule"),
    ("records", "protocol.engine.evaluation", "commit"),
    ("receipt", "protocol.engine.records", "committed_receipt"),
    ("net_relations", "protocol.engine.records", "_net_relations"),
    ("changeset", "protocol.engine.records", "Changeset"),
)
OPERATION_PHASES = ("derive", "relate", "retire")
PHASE_NAMES = (
    ("total",) + tuple(p[0] for p in PHASES) + OPERATION_PHASES + ("apply", "flush", "to_dict")
)


def _marker_source() -> str:
    """C source of a module of one-line trampolines, one per phase: ``name(fn, *args)``
    calls ``fn(*args)`` from a C function of its own, which callgrind counts inclusively."""
    out = ["#define PY_SSIZE_T_CLEAN\n#include <Python.h>\n"]
    for name in PHASE_NAMES:
        out.append(
            f"__attribute__((noinline)) static PyObject *ph_{name}(PyObject *self, "
            "PyObject *args, PyObject *kw) {\n"
            "  PyObject *rest = PyTuple_GetSlice(args, 1, PyTuple_GET_SIZE(args));\n"
            "  if (rest == NULL) return NULL;\n"
            "  PyObject *r = PyObject_Call(PyTuple_GET_ITEM(args, 0), rest, kw);\n"
            "  Py_DECREF(rest);\n  return r;\n}\n"
        )
    table = "".join(
        f'  {{"{n}", (PyCFunction)(void (*)(void))ph_{n}, METH_VARARGS | METH_KEYWORDS, NULL}},\n'
        for n in PHASE_NAMES
    )
    out.append(f"static PyMethodDef methods[] = {{\n{table}  {{NULL, NULL, 0, NULL}}}};\n")
    out.append(
        'static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "phase_markers", NULL, -1, '
        "methods};\nPyMODINIT_FUNC PyInit_phase_markers(void) "
        "{ return PyModule_Create(&module); }\n"
    )
    return "".join(out)


def _build_markers(where: str) -> None:
    """Compile the trampolines into *where* with the C compiler Python was built with."""
    import sysconfig

    source = os.path.join(where, "phase_markers.c")
    with open(source, "w", encoding="ascii") as f:
        f.write(_marker_source())
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    include = sysconfig.get_paths()["include"]
    subprocess.run(
        [cc, "-shared", "-fPIC", "-O1", "-g", "-fno-ipa-icf", f"-I{include}", source, "-o"]
        + [os.path.join(where, "phase_markers" + suffix)],
        check=True,
    )


def phases_child(n: int, batch: int, where: str) -> None:
    """Group-commit *n* transactions as a context actor hands them, each phase wrapped in
    its trampoline (run under callgrind)."""
    import importlib

    sys.path.insert(0, where)
    markers = importlib.import_module("phase_markers")
    store = LmdbStore.open(os.path.join(where, "context"), sync=False)
    try:
        ctx = Context(store)
        _check(ctx.commit(BASE_TX))
        work = Workload(ctx, observe_all(ctx, n + WARM_UP))
        commit_each(ctx, [parse_tx(t) for t in work.texts(WARM_UP)])
        sent = submitted(work.texts(n))

        def wrapped(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
            mark = getattr(markers, name)
            return lambda *a, **k: mark(fn, *a, **k)

        for name, module, attr in PHASES:
            mod = importlib.import_module(module)
            setattr(mod, attr, wrapped(name, getattr(mod, attr)))
        from protocol.engine.operations import HANDLERS
        from protocol.tx import Derive, Relate, Retire
        from protocol.view import BatchView

        for cls, name in ((Derive, "derive"), (Relate, "relate"), (Retire, "retire")):
            HANDLERS[cls] = wrapped(name, HANDLERS[cls])
        for name, attr in (("apply", "apply"), ("flush", "flush")):
            setattr(BatchView, attr, wrapped(name, getattr(BatchView, attr)))

        def run() -> None:
            for k in range(0, n, batch):
                for receipt in ctx.commit_many(sent[k : k + batch]):
                    _check(receipt)
                    markers.to_dict(receipt.to_dict)

        markers.total(run)
    finally:
        store.close()


def count_phases(n: int, batch: int, parent: str) -> dict[str, Any]:
    """Instructions per transaction of each phase (inclusive), from one callgrind run."""
    import re

    where = tempfile.mkdtemp(prefix="morphz-bench-commit-phases-", dir=parent)
    out = os.path.join(where, "callgrind.out")
    try:
        _build_markers(where)
        subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable]
            + [os.path.abspath(__file__), "--phases-child", str(n), str(batch), where],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        text = subprocess.run(
            ["callgrind_annotate", "--inclusive=yes", "--threshold=100", out],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    finally:
        shutil.rmtree(where, ignore_errors=True)
    found: dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+) .*phase_markers\.c:ph_(\w+) ", line)
        if m and m.group(2) not in found:
            found[m.group(2)] = round(int(m.group(1).replace(",", "")) / n)
    return {
        "benchmark": "bench_commit --phases",
        "transactions": n,
        "batch": batch,
        "instructions_per_tx": {name: found.get(name, 0) for name in PHASE_NAMES},
    }


def _row(label: str, t: dict[str, Any], unit: str) -> str:
    return (
        f"{label:<28}{t['per_s']:>9,.0f} {unit:<7}{t['wall_us_per_op']:>8,.0f} µs/op  CPU "
        f"{t['user_us_per_op']:>5,.0f} user + {t['system_us_per_op']:>4,.0f} sys µs/op"
    )


def report(f: dict[str, Any]) -> str:
    """The figures as the text this benchmark prints."""
    s, g, p, w = f["single"], f["group"], f["parse"], f["write"]
    lines = [
        "bench_commit: durable commits (sync=True) of one typical transaction",
        "  " + testbed.describe(f["machine"]),
        "  compiled modules (./dev compile): " + (", ".join(f["compiled"]) or "none"),
        f"  one commit writes {w['puts']} puts + {w['deletes']} deletes, "
        f"{w['bytes']:,} bytes of keys and values; its txlog record alone is "
        f"{w['txlog_record_bytes']:,} bytes (msgpack)",
        f"  baseline value: {f['baseline_value_bytes']:,} bytes "
        "(everything one commit writes, as one put)",
        f"  bytes written to the LMDB file per durable write (pages + meta): commit "
        f"{w['file_bytes']:,}, raw put {w['raw_file_bytes']:,}",
        "",
        f"(a) single durable commits, one LMDB write each "
        f"({s['commit_parsed']['count']:,} per variant, {f['rounds']} interleaved rounds)",
        "    " + _row("commit(parsed ContextTx)", s["commit_parsed"], "tx/s"),
        "    " + _row("commit(text)", s["commit_text"], "tx/s"),
        "    " + _row("baseline: raw put+commit", s["raw_put"], "puts/s"),
        f"    ratio parsed {s['parsed_ratio']:.2f}, text {s['text_ratio']:.2f} "
        f"(median over rounds: {s['parsed_ratio_median_round']:.2f}, "
        f"{s['text_ratio_median_round']:.2f}; aim >= {s['aim_ratio']:.2f})",
        f"(b) group commit, {g['batch']} per LMDB write "
        f"({g['commit_many']['count']:,} transactions)",
        "    " + _row("commit_many(parsed)", g["commit_many"], "tx/s"),
        "    " + _row("commit_many(as an actor)", g["commit_many_submitted"], "tx/s"),
        "    " + _row(f"baseline: {g['batch']} raw puts+commit", g["raw_puts"], "puts/s"),
        f"    ratio {g['ratio']:.3f} (median over rounds {g['ratio_median_round']:.3f}); "
        f"{g['commit_many']['per_s']:,.0f} tx/s (aim >= {g['aim_tx_per_s']:,} tx/s); "
        f"as an actor: ratio {g['submitted_ratio']:.3f}",
        "(c) parsing one transaction (best of 3)",
        f"    {'parse_tx(text)':<28}{p['parse_tx_us']:>10,.1f} µs",
        f"    {'tx_from_json(JSON form)':<28}{p['tx_from_json_us']:>10,.1f} µs",
        f"    {'baseline: json.loads(JSON)':<28}{p['json_loads_us']:>10,.1f} µs",
        f"    ratio parse_tx / json.loads {p['ratio_to_json_loads']:.0f}; parse_tx is "
        f"{p['share_of_single_commit']:.0%} of a single durable commit and "
        f"{p['share_of_group_tx']:.0%} of a group-committed transaction",
    ]
    if "profile" in f:
        lines += ["", "cProfile of the group-commit path, top 15 by cumulative time:", f["profile"]]
    return "\n".join(lines)


def anatomy_report(f: dict[str, Any]) -> str:
    """The :func:`anatomy` figures as text."""
    lines = [
        "bench_commit --anatomy: one typical durable commit, database by database",
        "  " + testbed.describe(f["machine"]),
        f"  {'database':<12}{'rows':>6}{'bytes':>8}{'depth':>7}",
    ]
    for name, row in f["databases"].items():
        lines.append(f"  {name:<12}{row['rows']:>6}{row['bytes']:>8,}{row['depth']:>7}")
    lines.append(
        f"  {f['databases_touched']} databases touched; {f['file_bytes_one_commit']:,} bytes "
        f"(~{f['pages_one_commit']} pages of 4 KiB) written to the file by one commit"
    )
    for kind in ("single", "group"):
        t = f[kind]
        lines.append(
            f"  {kind:<7} µs per tx: engine {t['engine_us']}, encode {t['encode_us']}, "
            f"LMDB puts {t['lmdb_put_us']}, other {t['other_in_write_us']}, "
            f"commit+fsync {t['lmdb_commit_fsync_us']}, total {t['total_us']}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Durable commit throughput of Morphz beside raw LMDB puts (never asserted).",
    )
    parser.add_argument("--quick", action="store_true", help="a short run (about 10 s)")
    parser.add_argument("--json", action="store_true", help="print one JSON document of figures")
    parser.add_argument(
        "--dir",
        help="parent directory of the scratch stores (default: a temp dir on the project's "
        "filesystem); the stores are deleted afterwards",
    )
    parser.add_argument(
        "--single", type=int, help="single commits per variant (default 1500; 150 with --quick)"
    )
    parser.add_argument(
        "--groups", type=int, help="group-commit batches (default 200; 21 with --quick)"
    )
    parser.add_argument(
        "--parse", type=int, help="transactions parsed for (c) (default 2000; 300 with --quick)"
    )
    parser.add_argument(
        "--batch", type=int, default=BATCH, help="transactions per group commit (default 64)"
    )
    parser.add_argument(
        "--rounds", type=int, help="interleaved rounds (default 30; 6 with --quick)"
    )
    parser.add_argument(
        "--profile", action="store_true", help="also profile group commit with cProfile"
    )
    parser.add_argument(
        "--instructions",
        type=int,
        metavar="N",
        help="count instructions per transaction over N transactions under callgrind "
        "(needs valgrind; N a multiple of --batch, e.g. 640) instead of timing",
    )
    parser.add_argument(
        "--anatomy",
        action="store_true",
        help="where one commit's write goes: rows, bytes and depth per named database, "
        "pages written, and the time split (engine, encoding, LMDB puts, commit+fsync)",
    )
    parser.add_argument(
        "--phases",
        type=int,
        metavar="N",
        help="instructions per transaction of each phase of a group commit as a context actor "
        "hands it (callgrind over N transactions, from source; needs valgrind and a C compiler)",
    )
    parser.add_argument("--instructions-child", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--phases-child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.anatomy:
        parent = args.dir or testbed.scratch_parent()
        where = tempfile.mkdtemp(prefix="morphz-bench-commit-", dir=parent)
        try:
            found = anatomy(where, args.single or 200, args.batch, args.groups or 10)
        finally:
            shutil.rmtree(where, ignore_errors=True)
        print(json.dumps(found, indent=2) if args.json else anatomy_report(found))
        return
    if args.phases_child:
        n, batch, where = args.phases_child
        phases_child(int(n), int(batch), where)
        return
    if args.phases is not None:
        if args.phases < args.batch or args.phases % args.batch:
            parser.error("--phases wants a positive multiple of --batch")
        if shutil.which("valgrind") is None or shutil.which("callgrind_annotate") is None:
            parser.error("--phases needs valgrind and callgrind_annotate on the PATH")
        if compiled_modules():
            parser.error("--phases wraps functions of the sources: run ./dev pure first")
        phases = count_phases(args.phases, args.batch, args.dir or testbed.scratch_parent())
        if args.json:
            print(json.dumps(phases, indent=2))
        else:
            print(f"instructions per transaction, phase by phase (inclusive), over {args.phases}:")
            for name, count in phases["instructions_per_tx"].items():
                print(f"  {name:<16}{count:>10,}")
        return
    if args.instructions_child:
        kind, n, total, batch, where = args.instructions_child
        instructions_child(kind, int(n), int(total), int(batch), where)
        return
    if args.instructions is not None:
        if args.instructions < args.batch or args.instructions % args.batch:
            parser.error("--instructions wants a positive multiple of --batch")
        if shutil.which("valgrind") is None:
            parser.error("--instructions needs valgrind on the PATH")
        parent = args.dir or testbed.scratch_parent()
        counts = count_instructions(args.instructions, args.batch, parent)
        if args.json:
            print(json.dumps(counts, indent=2))
        else:
            per = counts["instructions_per_tx"]
            print(
                f"instructions per transaction over {args.instructions} (callgrind; compiled "
                f"modules: {', '.join(counts['compiled']) or 'none'}):"
            )
            for kind in INSTRUCTION_KINDS:
                print(f"  {kind:<12}{per[kind]:>12,}")
            print(
                f"  single commit / raw put {counts['single_over_raw']:.1f}x, "
                f"group / raw group {counts['group_over_raw']:.1f}x"
            )
        return
    if args.single is None:
        args.single = 150 if args.quick else 1500
    if args.groups is None:
        args.groups = 21 if args.quick else 200
    if args.rounds is None:
        args.rounds = 6 if args.quick else 30
    if args.parse is None:
        args.parse = 300 if args.quick else 2000
    if min(args.single, args.groups, args.batch, args.rounds, args.parse) < 1:
        parser.error("--single, --groups, --batch, --rounds and --parse must be positive")

    parent = args.dir or testbed.scratch_parent()
    os.makedirs(parent, exist_ok=True)
    where = tempfile.mkdtemp(prefix="morphz-bench-commit-", dir=parent)
    try:
        figures = run(args, where)
    finally:
        shutil.rmtree(where, ignore_errors=True)
    print(json.dumps(figures, indent=2) if args.json else report(figures))


if __name__ == "__main__":
    sys.exit(main())
