"""Shared fixtures: a context over each backend (real LMDB files and the in-memory store),
and one two-node local Ray cluster for the whole session (see ``tests/actors/cluster.py``).

The cluster runs on this machine: a head node and a second node offering the custom
resource ``node2``, so multi-node placement is tested without a second machine. It starts
on the first test that asks for it and stops at the end of the session."""

from __future__ import annotations

import inspect
import os
import types
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from actors import ContextHandle, connect
from service.context import Context
from storage import LmdbStore
from storage.memory import MemoryBackend
from tests.actors.cluster import NODE2, RayCluster
from tests.embedding_server import embedding_server  # noqa: F401  (the fixture, for every test)
from tests.examples import QUICK, QUICK_DEFAULT


def _compiled() -> tuple[list[str], list[str]]:
    """The modules ``./dev compile`` built (Python loads them instead of their sources) and
    the sources changed since (what the tests would not be testing)."""
    root = Path(__file__).resolve().parent.parent
    groups = sorted(root.glob("*__mypyc.cpython-*.so"))
    built = sorted(
        str(p.relative_to(root)).split(".", 1)[0].replace("/", ".")
        for d in ("protocol", "storage")
        for p in (root / d).rglob("*.cpython-*.so")
    )
    if not groups:
        return built, []
    since = groups[0].stat().st_mtime
    stale = [
        str(p.relative_to(root))
        for d in ("protocol", "storage")
        for p in (root / d).rglob("*.py")
        if p.stat().st_mtime > since
    ]
    return built, stale


COMPILED, _STALE = _compiled()
if _STALE:
    raise pytest.UsageError(
        f"{', '.join(_STALE[:5])} changed after ./dev compile built the compiled modules: "
        "run ./dev compile again (or ./dev pure to run from source)"
    )


def pytest_report_header() -> str:
    """Whether this run tests the compiled build or the sources alone."""
    if COMPILED:
        return "morphz: compiled modules (./dev compile): " + ", ".join(COMPILED)
    return "morphz: pure Python (no compiled modules)"


if QUICK:  # the fast loop (``./dev check``): fewer examples; CI draws them all
    settings.register_profile("quick", max_examples=QUICK_DEFAULT)
    settings.load_profile("quick")


@pytest.fixture(params=["lmdb", "memory"])
def make_ctx(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[object]:
    """A factory of fresh contexts: ``make_ctx(window=8)``; closed after the test."""
    opened: list[Context] = []
    counter = iter(range(1_000_000))

    def make(window: int | None = None) -> Context:
        if request.param == "lmdb":
            backend: object = LmdbStore.open(tmp_path / f"ctx{next(counter)}", sync=False)
        else:
            backend = MemoryBackend()
        ctx = Context(backend, window=window)  # type: ignore[arg-type]
        opened.append(ctx)
        return ctx

    yield make
    for ctx in opened:
        ctx.close()


@pytest.fixture
def ctx(make_ctx: object) -> Context:
    """A fresh context with the default window of 8 ticks."""
    return make_ctx()  # type: ignore[operator,no-any-return]


# Ray's own warnings, under ``-W error``: targeted, never a blanket ignore.
RAY_WARNINGS: tuple[str, ...] = ()


# What a test reaches (its body, its fixtures and the tests' helpers they call) decides its
# markers, so a new test is marked without anyone remembering to: see `_effects`.
_CHILD_MODULES = frozenset({"subprocess", "multiprocessing"})
_CHILD_STARTERS = ("mcp.client.stdio",)  # library modules whose calls start a child process


def _starts_children(module: str) -> bool:
    """Whether code of *module* can start a child process."""
    return module.split(".")[0] in _CHILD_MODULES or module.startswith(_CHILD_STARTERS)


def _functions_of(obj: object) -> list[types.FunctionType]:
    """The plain functions *obj* stands for: itself, or the methods and properties of a class."""
    obj = inspect.unwrap(getattr(obj, "__func__", obj))  # type: ignore[arg-type]
    if isinstance(obj, types.FunctionType):
        return [obj]
    if not isinstance(obj, type):
        return []
    found: list[types.FunctionType] = []
    for member in vars(obj).values():
        if isinstance(member, property):
            found += [f for f in (member.fget, member.fset) if isinstance(f, types.FunctionType)]
        else:
            found += _functions_of(member) if not isinstance(member, type) else []
    return found


def _effects(obj: object, seen: set[int]) -> set[str]:
    """``subprocess`` if *obj* can start a child process, ``kill`` if it can SIGKILL one.

    Follows the global names its code uses into other functions and classes of the test
    tree (never into the library or third-party code): a helper that runs the CLI marks
    every test that calls it."""
    effects: set[str] = set()
    for func in _functions_of(obj):
        if id(func) in seen:
            continue
        seen.add(id(func))
        codes = [func.__code__]
        while codes:
            code = codes.pop()
            codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
            for name in code.co_names:
                if name in _CHILD_MODULES:  # also `import subprocess` inside a function
                    effects.add("subprocess")
                if name == "SIGKILL":
                    effects.add("kill")
                value = func.__globals__.get(name)
                module = getattr(value, "__module__", None) or ""
                if isinstance(value, types.ModuleType):
                    if _starts_children(value.__name__):
                        effects.add("subprocess")
                elif _starts_children(module):
                    effects.add("subprocess")
                elif module == "tests" or module.startswith("tests."):
                    effects |= _effects(value, seen)
    return effects


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark tests by what they use: ``ray`` for the session cluster (directly or through
    another fixture), ``subprocess`` for a child process, ``kills`` for a test that sends
    SIGKILL. ``slow`` (long-running) is written by hand on the tests it fits.

    The fast loop (``./dev check``) deselects all four."""
    for item in items:
        if not isinstance(item, pytest.Function):
            continue
        if "ray_cluster" in item.fixturenames and item.get_closest_marker("ray") is None:
            item.add_marker(pytest.mark.ray)
        effects = _effects(item.obj, set())
        for defs in item._fixtureinfo.name2fixturedefs.values():
            for fixturedef in defs:
                effects |= _effects(fixturedef.func, set())
        if "subprocess" in effects and item.get_closest_marker("subprocess") is None:
            item.add_marker(pytest.mark.subprocess)
        if "kill" in effects and item.get_closest_marker("kills") is None:
            item.add_marker(pytest.mark.kills)
        if item.get_closest_marker("ray") is not None:
            for spec in RAY_WARNINGS:
                item.add_marker(pytest.mark.filterwarnings(spec))


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[RayCluster]:
    """Start the session's two-node cluster and connect this process to it."""
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "include_dashboard": False},
    )
    cluster.add_node(num_cpus=1, resources={NODE2: 1})
    ray.init(address=cluster.address, log_to_driver=False, namespace="morphz-tests")
    from actors.client.nodes import current_node_id, node_with_resource

    try:
        yield RayCluster(cluster, current_node_id(), node_with_resource(NODE2))
    finally:
        ray.shutdown()
        cluster.shutdown()  # type: ignore[no-untyped-call]


@pytest.fixture
def context_name() -> str:
    """A context name no other test of the session uses."""
    return "ctx-" + uuid.uuid4().hex[:12]


@pytest.fixture
def namespace() -> str:
    """A Ray namespace of this test alone."""
    return "morphz-" + uuid.uuid4().hex[:8]


@pytest.fixture
def handle(
    ray_cluster: RayCluster, tmp_path: Path, context_name: str, namespace: str
) -> Iterator[ContextHandle]:
    """A handle on a fresh context actor of the session cluster (its store under
    ``tmp_path / "handle"``), shut down after the test."""
    h = connect(context_name, store_dir=tmp_path / "handle", namespace=namespace)
    yield h
    h.shutdown()
