"""Opening a large context in a fresh process: time and peak resident memory.

The store holds 100,000 frames and 1,000,000 events (``--quick``: 10,000 and
100,000). It is built once through :meth:`storage.LmdbStore.transact` with
:class:`protocol.view.Changeset` batches (``sync=False``) and cached under
``--dir``; a marker file says the build finished, so reruns skip it.

Each measurement runs in a fresh ``python -c`` child, so imports and caches
never count twice. Children, interleaved and repeated (medians reported):

* ``python``  — the interpreter alone;
* ``lmdb``    — baseline: ``import lmdb``, ``lmdb.open`` of the context's
  environment, ``open_db`` of the frames table and one ``get``;
* ``imports`` — baseline: ``from service.store import Store`` and nothing else;
* ``open``    — the imports, then ``Store(dir).open(name)``, ``ctx.version()``,
  ``ctx.frame(id)`` and ``ctx.read_event(ref)`` (one chunk).

Each child reports its import time, its operation time and its peak RSS; the
parent adds the child's whole wall time. Peak RSS is ``VmHWM`` from
``/proc/self/status``: Linux carries ``ru_maxrss`` across ``execve``, so a
child's ``getrusage`` figure is at least the parent's RSS at spawn time (the
builder's); it is kept in the JSON as ``ru_maxrss_mb`` and used only where
``/proc`` is missing. The ``lmdb`` and
``open`` children also run "cold": the store file's pages are first dropped
from the page cache with ``posix_fadvise(DONTNEED)`` (that file only).
Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from typing import Any

import testbed  # first: puts this checkout on sys.path

from protocol.forms import Symbol, to_plain
from protocol.receipts import Receipt
from protocol.state import Event, Frame, Meta, estimate_tokens, preview_of
from protocol.view import Changeset
from storage import LmdbStore
from storage.lmdb import STORE_FORMAT

NAME = "bench"
BUILD_FORMAT = 2
"""Bump when the generated content changes, so cached stores are rebuilt."""
EVENTS_PER_WRITE = 10_000
AIM_SECONDS = 2.0
AIM_RSS_MB = 300.0
FILLER = (
    "collected 412 items; tests/storage passed, tests/protocol passed; "
    "coverage 87%; wheel built; artefacts uploaded to the release bucket"
)

CHILD = r"""
import sys, time
t0 = time.perf_counter()
mode, root, store, name, frame_id, event_ref = sys.argv[1:7]
sys.path.insert(0, root)
check = "-"
if mode == "python":
    t1 = t2 = time.perf_counter()
elif mode == "lmdb":
    import lmdb
    t1 = time.perf_counter()
    env = lmdb.open(store + "/" + name, subdir=True, sync=True, metasync=True, max_dbs=32)
    db = env.open_db(b"frames", create=False)
    with env.begin(db=db) as txn:
        value = txn.get(frame_id.encode())
    t2 = time.perf_counter()
    check = str(len(value))
elif mode in ("imports", "open"):
    from service.store import Store
    t1 = t2 = time.perf_counter()
    if mode == "open":
        ctx = Store(store).open(name)
        version = ctx.version()
        frame = ctx.frame(frame_id)
        chunk = ctx.read_event(event_ref)
        t2 = time.perf_counter()
        check = f"{version}|{frame['id']}|{len(chunk['text'])}"
        ctx.close()
else:
    raise SystemExit("unknown mode " + mode)
import resource
maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
hwm = -1
with open("/proc/self/status") as status:
    for line in status:
        if line.startswith("VmHWM:"):
            hwm = int(line.split()[1])
print(t1 - t0, t2 - t1, maxrss, hwm, check)
"""

MODES = (
    ("python", False, "python -c (no imports)"),
    ("lmdb", False, "baseline: lmdb.open + one get"),
    ("imports", False, "baseline: import service.store"),
    ("open", False, "Store.open + version/frame/event"),
    ("lmdb", True, "baseline: lmdb.open + get, cold"),
    ("open", True, "Store.open + reads, cold"),
)


# -- building ------------------------------------------------------------------


def frame_id(k: int) -> str:
    """The id of the *k*-th generated frame."""
    return f"note/{k}"


def event_text(seq: int, kind: str) -> str:
    """About 100 characters of observation text."""
    return f"[{kind} {seq}] {FILLER}"[:100]


class Builder:
    """Writes a context of *frames* frames and *events* events, in batches."""

    def __init__(self, frames: int, events: int) -> None:
        self.frames = frames
        self.events = events
        self.rng = random.Random(20240601)
        self.start = time.time() - events
        self.receipt = Receipt(status="committed", version=1, base_version=0).to_dict()

    def batch(self, lo: int, hi: int) -> list[Changeset]:
        """Changesets for events ``lo..hi-1`` (1-based seqs) and their share of frames."""
        events = Changeset()
        ids = []
        for seq in range(lo, hi):
            kind = "user_message" if seq % 10 == 1 else "tool_result"
            text = event_text(seq, kind)
            eid = f"ev:{self.rng.getrandbits(80):020x}"
            ids.append(eid)
            retired = seq % 3 == 0
            version = max(1, seq * self.frames // self.events)
            events.events.append(
                Event(
                    seq=seq,
                    id=eid,
                    kind=kind,
                    session="main",
                    time=self.start + seq,
                    size=len(text),
                    tokens=estimate_tokens(text),
                    preview=preview_of(text),
                    lifecycle="retired" if retired else "active",
                    delivered=True if kind == "user_message" else None,
                    claimed_tick=seq // 10 + 1,
                    retired_version=version if retired else None,
                )
            )
            events.contents.append((seq, text))
            if retired:
                events.lastmod[f"e:@e{seq}"] = version
        out = [events]
        first = (lo - 1) * self.frames // self.events
        last = (hi - 1) * self.frames // self.events
        for k in range(first, last):
            out.append(self.frame(k, lo, ids))
        return out

    def frame(self, k: int, lo: int, ids: list[str]) -> Changeset:
        """The changeset of the transaction that derived frame *k* at version ``k + 1``.

        It cites two of the events ``lo, lo+1, …`` (stable ids *ids*) and up to two
        earlier frames, and relates it to them.
        """
        fid, version = frame_id(k), k + 1
        summary = f"note {k}: build and tests green"
        body = (
            (Symbol("status"), Symbol("ok")),
            (Symbol("score"), k % 97),
            (Symbol("summary"), summary),
        )
        picked = self.rng.sample(range(len(ids)), min(2, len(ids)))
        edges = []
        if k:
            edges.append((fid, "follows", frame_id(k - 1)))
            if k // 2 != k - 1:
                edges.append((fid, "refines", frame_id(k // 2)))
        parents = [o for _, _, o in edges]
        f = Frame(
            id=fid,
            revision=1,
            body=body,
            sources=tuple([ids[i] for i in picked] + parents),
            protected=k % 20 == 0,
            created_version=version,
            updated_version=version,
        )
        refs = " ".join([f"@e{lo + i}" for i in picked] + parents)
        relates = "".join(f" (relate {s} {label} {o})" for s, label, o in edges)
        record = {
            "version": version,
            "kind": "model",
            "base_version": k,
            "client_id": None,
            "reason": None,
            "text": f"(context-tx (base-version {k}) (derive {fid} (from {refs}) (status ok) "
            f'(score {k % 97}) (summary "{summary}")){relates})',
            "time": self.start + version,
            "tick": lo // 10 + 1,
            "changes": [fid] + [" ".join(e) for e in edges],
            "writes": [
                {
                    "frame": fid,
                    "op": "derive",
                    "revision": 1,
                    "body": [to_plain(x) for x in body],
                }
            ],
            "receipt": {**self.receipt, "version": version, "base_version": k},
        }
        lastmod = {"f:" + fid: version}
        lastmod.update({"r:" + "\x00".join(e): version for e in edges})
        return Changeset(
            frames=[f],
            rel_add=edges,
            lastmod=lastmod,
            txlog=record,
            history=[(fid, version)],
        )

    def meta(self) -> Meta:
        return Meta(
            version=self.frames,
            tick=self.events // 10 + 1,
            next_seq=self.events + 1,
            created=self.start,
        )


def build(root: str, frames: int, events: int, log: Any) -> float:
    """Build the store under *root* (the store directory); seconds taken."""
    start = time.perf_counter()
    builder = Builder(frames, events)
    store = LmdbStore.open(os.path.join(root, NAME), sync=False, map_size=1 << 30)
    try:
        for lo in range(1, events + 1, EVENTS_PER_WRITE):
            hi = min(events + 1, lo + EVENTS_PER_WRITE)
            changesets = builder.batch(lo, hi)
            if hi == events + 1:
                changesets.append(Changeset(meta=builder.meta()))

            def write(view: Any, changesets: list[Changeset] = changesets) -> None:
                for cs in changesets:
                    view.apply(cs)

            store.transact(write)
            if (hi - 1) % 100_000 == 0 or hi == events + 1:
                print(f"  built {hi - 1:,} events ({time.perf_counter() - start:.0f} s)", file=log)
    finally:
        store.close()
    data = os.path.join(root, NAME, "data.mdb")
    fd = os.open(data, os.O_RDONLY)
    try:
        os.fsync(fd)  # written pages must be clean before a cold run can drop them
    finally:
        os.close(fd)
    return time.perf_counter() - start


def ensure_store(base: str, frames: int, events: int, log: Any) -> dict[str, Any]:
    """The built store's directory and facts, building it unless a finished build is cached."""
    root = os.path.join(base, f"f{frames}-e{events}")
    marker = os.path.join(root, "BUILT.json")
    wanted = {
        "frames": frames,
        "events": events,
        "store_format": STORE_FORMAT,
        "build_format": BUILD_FORMAT,
    }
    try:
        with open(marker, encoding="utf-8") as f:
            info = json.load(f)
        if {k: info.get(k) for k in wanted} == wanted:
            return {**info, "root": root, "cached": True}
    except (OSError, ValueError):
        pass
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    print(f"building {frames:,} frames and {events:,} events in {root}", file=log)
    seconds = build(root, frames, events, log)
    info = {**wanted, "build_seconds": round(seconds, 1)}
    with open(marker, "w", encoding="utf-8") as f:
        json.dump(info, f)
    return {**info, "root": root, "cached": False}


# -- measuring -----------------------------------------------------------------


def drop_cache(path: str) -> None:
    """Ask the kernel to drop *path*'s clean pages from the page cache."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def child(mode: str, cold: bool, root: str, frame: str, event: str) -> dict[str, Any]:
    """Run one measuring child; its figures in ms and MB."""
    if cold:
        drop_cache(os.path.join(root, NAME, "data.mdb"))
    argv = [sys.executable, "-c", CHILD, mode, str(testbed.ROOT), root, NAME, frame, event]
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"child {mode} failed:\n{done.stderr}")
    imports, op, maxrss_kib, hwm_kib, check = done.stdout.split()
    maxrss = int(maxrss_kib) / 1024
    return {
        "wall_ms": wall * 1e3,
        "import_ms": float(imports) * 1e3,
        "op_ms": float(op) * 1e3,
        "rss_mb": int(hwm_kib) / 1024 if int(hwm_kib) >= 0 else maxrss,
        "ru_maxrss_mb": maxrss,
        "check": check,
    }


def measure(root: str, frames: int, events: int, repeat: int) -> dict[str, dict[str, Any]]:
    """Median figures of each child mode, the modes interleaved *repeat* times."""
    frame = frame_id(frames // 2)
    event = f"@e{events // 2 + 1}"
    runs: dict[str, list[dict[str, Any]]] = {}
    for _ in range(repeat):
        for mode, cold, label in MODES:
            runs.setdefault(label, []).append(child(mode, cold, root, frame, event))
    out = {}
    for mode, cold, label in MODES:
        rows = runs[label]
        out[label] = {
            "mode": mode,
            "cold": cold,
            **{
                key: round(statistics.median(r[key] for r in rows), 2)
                for key in ("wall_ms", "import_ms", "op_ms", "rss_mb", "ru_maxrss_mb")
            },
            "op_ms_all": [round(r["op_ms"], 2) for r in rows],
            "check": rows[0]["check"],
        }
    return out


def run(args: argparse.Namespace, log: Any) -> dict[str, Any]:
    base = args.dir or os.path.join(testbed.scratch_parent(), "morphz-bench-open")
    os.makedirs(base, exist_ok=True)
    frames, events = (10_000, 100_000) if args.quick else (args.frames, args.events)
    info = ensure_store(base, frames, events, log)
    root = info["root"]
    rows = measure(root, frames, events, args.repeat)
    opened = rows["Store.open + version/frame/event"]
    cold = rows["Store.open + reads, cold"]
    bare = rows["baseline: lmdb.open + one get"]
    imports = rows["baseline: import service.store"]
    size = os.path.getsize(os.path.join(root, NAME, "data.mdb"))
    return {
        "benchmark": "bench_open",
        "machine": testbed.machine(root),
        "frames": frames,
        "events": events,
        "store_bytes": size,
        "build_seconds": info.get("build_seconds"),
        "cached": info["cached"],
        "repeat": args.repeat,
        "children": rows,
        "summary": {
            "open_ms": opened["op_ms"],
            "open_cold_ms": cold["op_ms"],
            "bare_lmdb_ms": bare["op_ms"],
            "open_vs_bare_lmdb": testbed.ratio(opened["op_ms"], bare["op_ms"]),
            "process_wall_ms": opened["wall_ms"],
            "imports_wall_ms": imports["wall_ms"],
            "rss_mb": opened["rss_mb"],
            "rss_over_imports_mb": round(opened["rss_mb"] - imports["rss_mb"], 2),
            "aim_seconds": AIM_SECONDS,
            "aim_rss_mb": AIM_RSS_MB,
            "within_aim": opened["wall_ms"] / 1e3 < AIM_SECONDS
            and cold["wall_ms"] / 1e3 < AIM_SECONDS
            and max(opened["rss_mb"], cold["rss_mb"]) < AIM_RSS_MB,
        },
    }


def report(f: dict[str, Any]) -> str:
    """The figures as the text this benchmark prints."""
    s = f["summary"]
    built = "cached build" if f["cached"] else f"built in {f['build_seconds']:.0f} s"
    lines = [
        f"bench_open: open a context of {f['frames']:,} frames and {f['events']:,} events "
        f"in a fresh process (median of {f['repeat']})",
        "  " + testbed.describe(f["machine"]),
        f"  store: data.mdb {f['store_bytes'] / 2**20:,.0f} MiB ({built})",
        "",
        f"  {'child':<36}{'process':>10}{'imports':>10}{'open+reads':>12}{'peak RSS':>11}",
    ]
    for label, row in f["children"].items():
        op = f"{row['op_ms']:,.1f} ms" if row["mode"] in ("lmdb", "open") else "-"
        imp = f"{row['import_ms']:,.0f} ms" if row["mode"] != "python" else "-"
        lines.append(
            f"  {label:<36}{row['wall_ms']:>7,.0f} ms{imp:>10}{op:>12}{row['rss_mb']:>8,.1f} MB"
        )
    lines += [
        "",
        f"  open + reads {s['open_ms']:,.1f} ms warm, {s['open_cold_ms']:,.1f} ms cold; bare LMDB "
        f"open + get {s['bare_lmdb_ms']:,.1f} ms; ratio {s['open_vs_bare_lmdb']:.1f}",
        f"  whole process {s['process_wall_ms']:,.0f} ms (imports alone "
        f"{s['imports_wall_ms']:,.0f} ms); peak RSS {s['rss_mb']:,.1f} MB, "
        f"{s['rss_over_imports_mb']:+,.1f} MB over the imports",
        f"  aim: under {s['aim_seconds']:.0f} s and {s['aim_rss_mb']:.0f} MB for the whole "
        f"process, warm and cold: {'met' if s['within_aim'] else 'NOT met'}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Open a large Morphz context in fresh processes: time and peak RSS "
        "beside the interpreter, the imports and a bare LMDB open (never asserted).",
    )
    parser.add_argument(
        "--quick", action="store_true", help="10,000 frames and 100,000 events, 3 repeats"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document of figures")
    parser.add_argument(
        "--dir",
        help="where built stores are cached (default: morphz-bench-open in a temp dir on the "
        "project's filesystem); delete it to free the space",
    )
    parser.add_argument("--frames", type=int, default=100_000, help="frames (default 100,000)")
    parser.add_argument("--events", type=int, default=1_000_000, help="events (default 1,000,000)")
    parser.add_argument("--repeat", type=int, help="children per mode (default 5; 3 with --quick)")
    args = parser.parse_args(argv)
    if args.repeat is None:
        args.repeat = 3 if args.quick else 5
    if args.repeat < 1 or args.frames < 2 or args.events < args.frames:
        parser.error("need --repeat >= 1, --frames >= 2 and --events >= --frames")
    figures = run(args, sys.stderr)
    print(json.dumps(figures, indent=2) if args.json else report(figures))


if __name__ == "__main__":
    sys.exit(main())
