"""The benchmarks' test bed: the checkout on ``sys.path``, scratch directories, machine facts.

Import it before any project module: it puts the checkout that holds this
file first on ``sys.path``, so a benchmark measures this tree whatever is
installed in the environment.
"""

from __future__ import annotations

import os
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def scratch_parent() -> str:
    """A directory for scratch stores on the project's filesystem (never a RAM disk).

    The system temp directory if it shares the project's device, else
    ``<checkout>/.bench-tmp``.
    """
    tmp = tempfile.gettempdir()
    if os.stat(tmp).st_dev == os.stat(ROOT).st_dev:
        return tmp
    path = ROOT / ".bench-tmp"
    path.mkdir(exist_ok=True)
    return str(path)


def filesystem(path: str) -> str:
    """``<type> on <device>`` of the mount holding *path*, or ``unknown``."""
    real = os.path.realpath(path)
    best = ("", "unknown")
    try:
        with open("/proc/mounts", encoding="utf-8") as f:
            for line in f:
                device, mount, kind = line.split()[:3]
                inside = real == mount or real.startswith(mount.rstrip("/") + "/")
                if inside and len(mount) >= len(best[0]):
                    best = (mount, f"{kind} on {device}")
    except OSError:
        pass
    return best[1]


def machine(path: str) -> dict[str, Any]:
    """Facts that explain the figures: CPUs, load, versions, the filesystem under *path*."""
    import lmdb

    return {
        "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "lmdb": ".".join(str(x) for x in lmdb.version()),
        "py_lmdb": lmdb.__version__,
        "dir": path,
        "filesystem": filesystem(path),
    }


def describe(facts: dict[str, Any]) -> str:
    """One line of :func:`machine` facts for a report header."""
    return (
        f"{facts['cpus']} CPUs, load {facts['load_avg_1m']}, Python {facts['python']}, "
        f"LMDB {facts['lmdb']} (py-lmdb {facts['py_lmdb']}), {facts['filesystem']}, "
        f"dir {facts['dir']}"
    )


def ratio(measured: float, baseline: float) -> float:
    """*measured* / *baseline*, rounded; 0 if the baseline is 0."""
    return round(measured / baseline, 3) if baseline else 0.0
