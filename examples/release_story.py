"""The seed's release story, end to end, through the embedded API.

A user asks for a release; a regression report arrives; the agent records
"tests passed; prepare to package" in one context transaction and retires the
processed log; the packaging tool returns; the reply is delivered and the
request may finally retire. Run: ``python examples/release_story.py [STORE_DIR]``.
"""

from __future__ import annotations

import sys
import tempfile

import morphz


def show(title: str, receipt: morphz.Receipt) -> None:
    print(
        f"-- {title}: {receipt.status} at version {receipt.version}"
        + (f", retired now {', '.join(receipt.retired_now)}" if receipt.retired_now else "")
    )
    for err in receipt.errors:
        print(f"   {err.code}: {err.message}")


def main(store_dir: str) -> int:
    with morphz.open_context(store_dir, "release-demo") as ctx:
        request = ctx.observe("user_message", "Ship v1 once the regression tests pass.")
        ctx.claim()
        show(
            "plan",
            ctx.commit(f"""(context-tx (base-version {ctx.version()})
              (reason "Start the release")
              (derive release (from {request.ref}) (goal ship-v1) (stage awaiting-tests)))"""),
        )

        report = ctx.observe(
            "tool_result", "regression suite: 412 passed, 0 failed\n" + "ok\n" * 500
        )
        batch = ctx.claim()
        print(f"-- claimed {', '.join(batch.claimed)} at tick {batch.tick}")

        # One response: a packaging action (run separately) and this transaction.
        receipt = ctx.commit(f"""(context-tx
  (base-version {ctx.version()})
  (reason "Incorporate the test result and prepare the release")
  (derive test-result (from {report.ref}) (tests passed))
  (revise release (goal ship-v1) (stage packaging))
  (relate test-result supports release)
  (retire {report.ref}))""")
        show("test result", receipt)
        print(f"   relief now: {receipt.relief_now.tokens} tokens")
        release = ctx.frame("release")
        print(f"   release r{release['revision']}: {release['body']}")

        early = ctx.commit(f"(context-tx (base-version {ctx.version()}) (retire {request.ref}))")
        show("retire the request before delivery", early)

        packaged = ctx.observe("tool_result", "package: dist/app-1.0.0.tgz (sha256 9f2c…)")
        ctx.claim()
        show(
            "packaged",
            ctx.commit(f"""(context-tx (base-version {ctx.version()})
              (derive package (from {packaged.ref}) (artifact "dist/app-1.0.0.tgz"))
              (revise release (goal ship-v1) (stage packaged))
              (relate package supports release)
              (retire {packaged.ref}))"""),
        )
        ctx.deliver(request.ref)
        show(
            "retire the request after delivery",
            ctx.commit(f"(context-tx (base-version {ctx.version()}) (retire {request.ref}))"),
        )

        print("-- history of release:")
        for write in ctx.history("release"):
            print(
                f"   v{write['version']} {write['op']} "
                f"r{write.get('revision')}: {write.get('body')}"
            )
        state = ctx.state()
        print(f"-- version {state['version']}, tick {state['tick']}")
        for f in state["frames"]:
            print(f"   {f['id']} r{f['revision']} {f['lifecycle']}")
        for s, label, o in state["relations"]:
            print(f"   {s} {label} {o}")
        print(
            f"-- the original report is still readable: "
            f"{ctx.read_event(report.ref, 0, 38)['text']!r}"
        )
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1:
        sys.exit(main(sys.argv[1]))
    with tempfile.TemporaryDirectory() as tmp:
        sys.exit(main(tmp))
