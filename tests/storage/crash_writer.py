"""A writer that commits forever until it is killed; driven by ``test_durability.py``.

Usage: ``python crash_writer.py STORE_DIR [CONTEXT]``.

It opens the context durably (``sync=True``, the default), continues the
numbering from the items already in the store, and for each item *i*:

1. observes a tool result ``"result {i}"``;
2. commits, with client id ``w-{i}``, a transaction that derives frame
   ``item/{i}`` from that observation and the previous item (the frame ``root``
   for item 0, derived in the same transaction), relates
   ``item/{i} follows <previous>`` and retires the observation;
3. once the commit returned ``committed``, prints ``ACK {i} {version}`` and
   flushes stdout.

``READY {next index} {version}`` is printed once the context is open.
"""

from __future__ import annotations

import sys

from service.store import Store

ITEM = "item/"


def item_tx(i: int, base: int, ref: str) -> str:
    """The transaction text of item *i*, citing observation *ref*."""
    if i == 0:
        return (
            f'(context-tx (base-version {base}) (reason "item {i}")'
            f" (derive root (kind chain-root))"
            f" (derive {ITEM}0 (from {ref} root) (n 0))"
            f" (relate {ITEM}0 follows root)"
            f" (retire {ref}))"
        )
    prev = f"{ITEM}{i - 1}"
    return (
        f'(context-tx (base-version {base}) (reason "item {i}")'
        f" (derive {ITEM}{i} (from {ref} {prev}) (n {i}))"
        f" (relate {ITEM}{i} follows {prev})"
        f" (retire {ref}))"
    )


def main() -> int:
    store = sys.argv[1]
    name = sys.argv[2] if len(sys.argv) > 2 else "ctx"
    ctx = Store(store).open(name)
    items = [f["id"] for f in ctx.state()["frames"] if f["id"].startswith(ITEM)]
    start = len(items)
    if sorted(items) != sorted(f"{ITEM}{k}" for k in range(start)):
        print(f"BROKEN items are not 0..{start - 1}: {sorted(items)}", flush=True)
        return 3
    print(f"READY {start} {ctx.version()}", flush=True)
    i = start
    while True:
        e = ctx.observe("tool_result", f"result {i}", session="crash-writer")
        receipt = ctx.commit(item_tx(i, ctx.version(), e.ref), client_id=f"w-{i}")
        if not receipt.committed:
            print(f"REJECTED {i} {receipt.to_dict()}", flush=True)
            return 4
        print(f"ACK {i} {receipt.version}", flush=True)
        i += 1


if __name__ == "__main__":
    sys.exit(main())
