"""Two agent threads explore alternatives in two forks; one fork is merged back.

The shared memory ``main`` holds a plan to speed up the test suite. Two agent
threads each fork it and work in their own branch at the same time (one tries a
cache, the other sharding); meanwhile ``main`` itself moves on. The cache
branch wins: ``main`` diffs it, the merge is refused for the one frame both
sides changed (the plan's status), the conflict is resolved per frame, and the
plan's history shows the merge. The sharding branch is diffed and left alone.
Run: ``python examples/branch_story.py [STORE_DIR]``.
"""

from __future__ import annotations

import sys
import tempfile
import threading

from service.store import Store


def explore(store: Store, branch: str, finding: str, idea: str, status: str) -> None:
    """One agent thread: work in its own fork, citing what it observed."""
    with store.open(branch) as ctx:
        seen = ctx.observe("tool_result", finding)
        ctx.claim()
        receipt = ctx.commit(f"""(context-tx (base-version {ctx.version()})
          (reason "record what the experiment showed")
          (derive {idea} (from {seen.ref} plan) (result "{finding}"))
          (set plan (from {seen.ref}) (status {status}))
          (relate {idea} supports plan))""")
        print(f"-- {branch}: {receipt.status} at version {receipt.version}")


def main(store_dir: str) -> int:
    store = Store(store_dir)
    with store.open("main") as ctx:
        ask = ctx.observe("user_message", "Make the test suite faster.")
        ctx.claim()
        ctx.commit(f"""(context-tx (base-version 0)
          (derive plan (from {ask.ref}) (status exploring) (owner ana) (budget 2)))""")
        for branch in ("try-cache", "try-shard"):
            print(f"-- forked {ctx.branch(branch)['context']}")

    threads = [
        threading.Thread(
            target=explore,
            args=(store, "try-cache", "cached build: 412 tests in 41s", "cache", "adopt-cache"),
        ),
        threading.Thread(
            target=explore,
            args=(store, "try-shard", "4 shards: 412 tests in 70s", "shard", "adopt-shard"),
        ),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    with store.open("main") as ctx:
        ctx.commit(
            "(context-tx (base-version 1) (set plan (status reviewing)) (set plan (budget 3)))"
        )
        for branch in ("try-shard", "try-cache"):
            d = ctx.diff(branch)
            print(
                f"-- diff {branch}: " + ", ".join(f"{f['id']} {f['status']}" for f in d["frames"])
            )
        refused = ctx.merge("try-cache")
        print(f"-- merge try-cache: {refused['status']} ({', '.join(refused['unresolved'])})")
        conflict = next(f for f in refused["frames"] if f["status"] == "conflict")
        for part in conflict["fields"]:
            sides = f"base {part['base']}, ours {part['ours']}, theirs {part['theirs']}"
            print(f"   {part['field']}: {sides}")
        merged = ctx.merge("try-cache", resolutions={"plan": "theirs"})
        done = f"{merged['status']} at {merged['versions']}, copied {merged['copied']}"
        print(f"-- merge try-cache: {done}")
        print(f"-- plan: {ctx.frame('plan')['body']}")
        for rev in {r.version: r for r in ctx.frame_history("plan")}.values():
            how = ctx.txlog(rev.version).get("merge")
            via = f" (merged from {how['source']}, by {how['by']})" if how else ""
            print(f"   v{rev.version} {rev.op}{via}")
        print(
            f"-- tagged {ctx.tag('cache-adopted').name}; again: {ctx.merge('try-cache')['status']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="branches-")))
