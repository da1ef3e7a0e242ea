"""Sensitive-content rules on hostile text: each rule's time grows linearly, beside ordinary text.

Every rule of :data:`protocol.governance.SENSITIVE_RULES` is run (``finditer``,
as :func:`~protocol.governance.locate_sensitive` does) on adversarial strings
and, in the same run, on ordinary text of the same size (this checkout's
``docs/*.md`` repeated). An adversarial string is a *piece* repeated to the
size, with an optional last character that spoils a match; the pieces are a
fixed list of known troublemakers (``eyJ-``, ``sk-``, ``a@``, ``+1 ``, …) and
pieces derived from each rule's own pattern (its leading literal text joined
to the separators and characters its classes accept), so a rule added later is
tried too. For each rule the worst piece is reported at two sizes, *n* and
*4n*: a linear rule takes about 4× as long at 4n, a quadratic one 16×. Then the
whole scan (:func:`~protocol.governance.sensitive.locate_in`, every rule, the
masked excerpts) of a 400 kB hostile observation beside 400 kB of ordinary text.

Times are CPU seconds of this process (best of a few calls), so a busy machine
moves them less than wall time would. Timings are printed; a rule whose growth
ratio exceeds ``--max-ratio`` (default 8) is marked SUPERLINEAR; ``--strict`` then exits 1.

    .venv/bin/python benchmarks/bench_sensitive.py [--quick] [--json] [--strict]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable, Iterator
from re import _parser  # type: ignore[attr-defined]
from typing import Any

import testbed  # first: puts this checkout on sys.path

from protocol.governance.sensitive import SENSITIVE_RULES, SensitiveRule, locate_in

KNOWN_PIECES = (
    "eyJ-", "eyJa.", "eyJaaaaaaaaa.eyJ", "sk-", "sk-a", "sk-aaaaaaaaaaaaaaa-", "a@", "a.",
    "a@a.", "+1 ", "+1", "1 ", "1-", "1", "-----BEGIN ", "-----BEGIN PRIVATE KEY-----",
    "-----END ", "A ", "password ", "password=", "a_", "a.token", "bearer ", "bearer a", " ",
    "a://", "a://u:", "a:", "ghp_", "github_pat_", "xoxb-", "AKIA", "AIza",
    "https://hooks.slack.com/services/", "a-", "(", "(123) ", "123-", "a%", "_", "token:",
    "authorization: basic ", "\n", "=", "a=",
)  # fmt: skip
SPOILERS = ("", "!", "\x00")
FILLERS = ("a", "A", "1", "-", "_", ".", " ", "@", ":", "/", "=")


def leading_literal(pattern: re.Pattern[str]) -> str:
    """The literal characters a pattern starts with (after look-arounds and anchors)."""
    out: list[str] = []

    def walk(items: Any) -> bool:
        for op, arg in items:
            name = str(op)
            if name == "LITERAL":
                out.append(chr(arg))
            elif name in ("AT", "ASSERT", "ASSERT_NOT"):
                continue
            elif name == "SUBPATTERN":
                if not walk(arg[-1]):
                    return False
            elif name == "BRANCH":
                return walk(arg[1][0]) and False
            else:
                return False
        return True

    walk(_parser.parse(pattern.pattern, pattern.flags))
    return "".join(out)


def pieces_for(rule: SensitiveRule) -> list[str]:
    """The known pieces and the ones derived from *rule*'s pattern."""
    head = leading_literal(rule.pattern)
    derived = [head + f for f in FILLERS] + [f + head for f in FILLERS]
    derived += [head + f * 9 + "." for f in FILLERS if f != "."]
    return list(dict.fromkeys([*KNOWN_PIECES, *(p for p in derived if p)]))


def hostile(piece: str, size: int, spoil: str) -> str:
    return (piece * (size // len(piece) + 1))[: size - len(spoil)] + spoil


def ordinary(size: int) -> str:
    """This checkout's docs, repeated to *size* characters (prose, code, URLs, examples)."""
    docs = sorted((testbed.ROOT / "docs").glob("*.md"))
    if not docs:
        raise SystemExit(f"no docs/*.md under {testbed.ROOT}: the ordinary baseline needs them")
    text = "\n".join(p.read_text() for p in docs)
    return (text * (size // len(text) + 1))[:size]


def best_of(fn: Callable[[], object], rounds: int) -> float:
    """The least CPU time of *rounds* calls (CPU, not wall: the neighbours' load moves less)."""
    best = float("inf")
    for _ in range(rounds):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def count(pattern: re.Pattern[str], text: str) -> Callable[[], int]:
    return lambda: sum(1 for _ in pattern.finditer(text))


def rule_rows(size: int, rounds: int) -> Iterator[dict[str, Any]]:
    base_small, base_big = ordinary(size), ordinary(4 * size)
    for rule in SENSITIVE_RULES:
        worst: tuple[float, str, str] = (-1.0, "", "")
        for piece in pieces_for(rule):
            for spoil in SPOILERS:
                t = best_of(count(rule.pattern, hostile(piece, size, spoil)), 1)
                worst = max(worst, (t, piece, spoil))
        _, piece, spoil = worst
        small = best_of(count(rule.pattern, hostile(piece, size, spoil)), rounds)
        big = best_of(count(rule.pattern, hostile(piece, 4 * size, spoil)), rounds)
        plain_small = best_of(count(rule.pattern, base_small), rounds)
        plain_big = best_of(count(rule.pattern, base_big), rounds)
        yield {
            "rule": rule.code,
            "piece": piece + spoil,
            "hostile_ms": [small * 1e3, big * 1e3],
            "ordinary_ms": [plain_small * 1e3, plain_big * 1e3],
            "ratio": big / max(small, 1e-9),
            "ordinary_ratio": plain_big / max(plain_small, 1e-9),
        }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes, fewer rounds")
    ap.add_argument("--json", action="store_true", help="one JSON document of figures")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a rule is superlinear")
    ap.add_argument("--max-ratio", type=float, default=8.0, help="growth for 4x the size (8)")
    args = ap.parse_args()
    size, rounds = (20_000, 2) if args.quick else (50_000, 3)
    rows = list(rule_rows(size, rounds))
    flagged = [r["rule"] for r in rows if r["ratio"] > args.max_ratio]

    total = 400_000
    doc = ordinary(total)
    whole_plain = best_of(lambda: locate_in("observation", "e", "@e1", "text", doc), rounds)
    whole: list[tuple[float, str]] = []
    for piece in KNOWN_PIECES:
        text = hostile(piece, total, "!")
        scan = best_of(lambda t=text: locate_in("observation", "e", "@e1", "text", t), 1)
        whole.append((scan, piece))
    whole.sort(reverse=True)
    figures = {
        "machine": testbed.machine(str(testbed.ROOT)),
        "size": [size, 4 * size],
        "rules": rows,
        "superlinear": flagged,
        "scan_400k": {
            "ordinary_ms": whole_plain * 1e3,
            "hostile_worst_ms": whole[0][0] * 1e3,
            "hostile_worst_piece": whole[0][1],
            "hostile_median_ms": whole[len(whole) // 2][0] * 1e3,
        },
    }
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print(testbed.describe(figures["machine"]))
        print(f"per rule, worst hostile piece vs ordinary text, {size:,} and {4 * size:,} chars")
        print(f"{'rule':<16} {'piece':<24} {'hostile ms':>18} {'ordinary ms':>18} {'growth':>7}")
        for r in rows:
            h, o = r["hostile_ms"], r["ordinary_ms"]
            mark = "  SUPERLINEAR" if r["rule"] in flagged else ""
            print(
                f"{r['rule']:<16} {r['piece']!r:<24} {h[0]:>8.2f} {h[1]:>9.2f} "
                f"{o[0]:>8.2f} {o[1]:>9.2f} {r['ratio']:>6.1f}x{mark}"
            )
        s = figures["scan_400k"]
        print(
            f"whole scan of 400 kB: ordinary {s['ordinary_ms']:.0f} ms; hostile worst "
            f"{s['hostile_worst_ms']:.0f} ms ({s['hostile_worst_piece']!r}), "
            f"median {s['hostile_median_ms']:.0f} ms"
        )
        print("superlinear rules: " + (", ".join(flagged) if flagged else "none"))
    return 1 if args.strict and flagged else 0


if __name__ == "__main__":
    sys.exit(main())
