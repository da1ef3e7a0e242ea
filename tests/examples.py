"""How many examples a property test draws: every one in the suite, a fifth in the fast loop.

``./dev check`` (the loop while working) sets ``MORPHZ_QUICK_EXAMPLES=1``; ``./dev test``
(what CI runs) leaves it unset, so CI draws the full number each test declares. A test
writes ``max_examples=examples(300)``; tests that set no number get Hypothesis's default
in the suite and the ``quick`` profile (20) in the fast loop (registered in
``tests/conftest.py``).
"""

from __future__ import annotations

import os

QUICK = os.environ.get("MORPHZ_QUICK_EXAMPLES") == "1"
"""True in the fast loop: draw fewer examples."""
QUICK_DEFAULT = 20
"""Examples per test in the fast loop for a test that declares no number."""


def examples(n: int) -> int:
    """The examples a test declaring *n* draws: *n*, or a fifth of it (at least 10) when quick."""
    return max(10, n // 5) if QUICK else n
