"""The layer rules of docs/ARCHITECTURE.md, read from the source: every module under headgate/ is
parsed (imports inside functions included) and its headgate imports checked.

Layers, lowest first: core → store (the port) → adapters → services → web → cli. A
layer imports only layers below it; core imports nothing of headgate but core; the web
layer reaches the store through the port, not an adapter. An import inside a function
is fine when it loads something optional or heavy late (an extra, the server stack for
one CLI command); it is not when moving it to the top would close an import circle,
which is what "deferred to dodge a circle" means here, and is checked as such.

That `import headgate` loads no Flask, gunicorn or APScheduler is checked in a fresh
interpreter by test_package_conventions.py (and on the wheel by test_distribution.py).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import headgate

ROOT = Path(headgate.__file__).resolve().parent
ORDER = ("core", "store", "adapters", "services", "web", "cli")
RANK = {layer: i for i, layer in enumerate(ORDER)}

# Modules by layer; a module belongs to the longest prefix listed.
LAYER_OF = {
    "headgate.core": "core",
    "headgate.store": "store",
    "headgate.adapters": "adapters",
    # The package facade: the core types, open_store, Client, HttpClient eagerly and
    # the worker and task names on first use; a service for everything that imports it.
    "headgate": "services",
    "headgate.services": "services",
    "headgate.worker": "services",
    "headgate.tasks": "services",
    "headgate.contrib": "services",
    "headgate.testing": "services",  # the store conformance suite, for adapters to run
    "headgate.api": "web",
    "headgate.web": "web",
    "headgate.dashboard": "web",
    "headgate.cli": "cli",
    "headgate.__main__": "cli",
}

# Crossings kept on purpose, each (importing module, imported module): why. None now:
# open_store finds an adapter in store/registry.py's table, which names the built-in
# adapters by module path and imports only the one a URL names (psycopg, an optional
# extra, loads only for PostgreSQL), so the store layer imports no adapter.
ALLOWED_CROSSINGS: dict[tuple[str, str], str] = {}

# Function-level imports that would close a circle if hoisted, not yet removed.
ALLOWED_DEFERRED_CIRCLES: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    line: int
    deferred: bool  # inside a function
    typing_only: bool  # under `if TYPE_CHECKING:`


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports_of(name: str, path: Path) -> Iterator[Import]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def targets(node: ast.Import | ast.ImportFrom) -> list[str]:
        if isinstance(node, ast.Import):
            return [a.name for a in node.names]
        if node.level:
            base = package.split(".")
            base = base[: len(base) - node.level + 1]
            module = ".".join([*base, node.module] if node.module else base)
        else:
            module = node.module or ""
        # `from pkg import mod` names the module pkg.mod; pkg itself only when a name
        # is one of its attributes. (Python runs a package's __init__ before any of its
        # modules; that order is checked at run time below, not counted as an edge.)
        subs = [f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in MODULES]
        return subs if len(subs) == len(node.names) else [module, *subs]

    def walk(node: ast.AST, deferred: bool, typing_only: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                for target in targets(child):
                    if target == "headgate" or target.startswith("headgate."):
                        yield Import(name, target, child.lineno, deferred, typing_only)
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    yield from walk(ast.Module(body=[stmt], type_ignores=[]), deferred, True)
                for stmt in child.orelse:
                    yield from walk(ast.Module(body=[stmt], type_ignores=[]), deferred,
                                    typing_only)
            else:
                inner = deferred or isinstance(
                    child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
                yield from walk(child, inner, typing_only)

    yield from walk(ast.parse(path.read_text(), str(path)), False, False)


IMPORTS = [imp for name, path in MODULES.items() for imp in _imports_of(name, path)]


def layer(module: str) -> str:
    best = max((p for p in LAYER_OF if module == p or module.startswith(p + ".")), key=len)
    return LAYER_OF[best]


def _where(imp: Import) -> str:
    return f"{MODULES[imp.source].relative_to(ROOT.parent)}:{imp.line} imports {imp.target}"


def test_every_module_has_a_layer() -> None:
    # A new top-level module must be placed in LAYER_OF before the rules can hold.
    unplaced = [m for m in MODULES
                if not any(m == p or m.startswith(p + ".") for p in LAYER_OF if p != "headgate")
                and m != "headgate"]
    assert unplaced == []


def test_no_layer_imports_one_above_it() -> None:
    """Type-only imports count too: an adapter that names a service's types in its
    signatures depends on that service."""
    upward = sorted(
        _where(imp) for imp in IMPORTS
        if RANK[layer(imp.target)] > RANK[layer(imp.source)]
        and (imp.source, imp.target) not in ALLOWED_CROSSINGS
    )
    assert upward == []


def test_core_imports_only_core() -> None:
    outside = sorted(_where(imp) for imp in IMPORTS
                     if layer(imp.source) == "core" and layer(imp.target) != "core")
    assert outside == []


def test_the_web_layer_reaches_the_store_through_the_port() -> None:
    adapters = sorted(_where(imp) for imp in IMPORTS
                      if layer(imp.source) == "web" and layer(imp.target) == "adapters")
    assert adapters == []


def test_shared_adapter_code_imports_no_engine() -> None:
    """adapters/shared/ is what both engines run; each engine's own policy lives in its
    folder, so shared code naming an engine package would hide which engine a rule is for."""
    engines = ("headgate.adapters.sqlite", "headgate.adapters.postgres")
    crossing = sorted(_where(imp) for imp in IMPORTS
                      if imp.source.startswith("headgate.adapters.shared")
                      and imp.target.startswith(engines))
    assert crossing == []


def test_one_engine_imports_nothing_of_the_other() -> None:
    pairs = (("headgate.adapters.sqlite", "headgate.adapters.postgres"),
             ("headgate.adapters.postgres", "headgate.adapters.sqlite"))
    crossing = sorted(_where(imp) for imp in IMPORTS for a, b in pairs
                      if imp.source.startswith(a) and imp.target.startswith(b))
    assert crossing == []


def test_no_shared_module_asks_which_engine_it_runs_on() -> None:
    """The engine differences are the dialect's methods and attributes, one object per
    engine; shared code never compares the dialect's name."""
    asked = [f"{path.relative_to(ROOT.parent)}:{node.lineno}"
             for name, path in MODULES.items() if name.startswith("headgate.adapters.shared")
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Attribute) and node.attr == "name"
             and isinstance(node.value, ast.Attribute) and node.value.attr == "dialect"]
    assert asked == []


def test_the_allow_lists_name_imports_that_exist() -> None:
    # An exception that no longer matches anything is removed, not left to excuse a
    # future crossing.
    pairs = {(imp.source, imp.target) for imp in IMPORTS}
    assert set(ALLOWED_CROSSINGS) <= pairs
    assert set(ALLOWED_DEFERRED_CIRCLES) <= pairs


def _package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in ORDER}
    for imp in IMPORTS:
        if imp.typing_only or (imp.source, imp.target) in ALLOWED_CROSSINGS:
            continue
        src, dst = layer(imp.source), layer(imp.target)
        if src != dst:
            graph[src].add(dst)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph, or None."""
    state: dict[str, int] = {}  # 1 on the path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_no_import_cycle_between_packages() -> None:
    """Every import but type-only ones and the listed exceptions, deferred ones too."""
    assert _cycle(_package_graph()) is None


def test_the_cycle_check_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def _top_level_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for imp in IMPORTS:
        if (not imp.deferred and not imp.typing_only and imp.target in MODULES
                and imp.target != imp.source):
            graph[imp.source].add(imp.target)
    return graph


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = {start}, [start]
    while todo:
        node = todo.pop()
        if node == goal:
            return True
        for nxt in graph[node] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return False


def test_no_import_is_deferred_to_dodge_a_circle() -> None:
    """A function-level import of a module that, through top-level imports, already
    imports the importing module: moved to the top it would close a circle."""
    graph = _top_level_graph()
    dodges = sorted(
        _where(imp) for imp in IMPORTS
        if imp.deferred and not imp.typing_only and imp.target in MODULES
        and imp.target != imp.source
        and (imp.source, imp.target) not in ALLOWED_DEFERRED_CIRCLES
        and _reaches(graph, imp.target, imp.source)
    )
    assert dodges == []


def test_the_web_layer_has_no_module_level_circle() -> None:
    """api, dashboard and web import each other only one way: web.app assembles, the
    API and the console reach the store through web.globals."""
    graph = _top_level_graph()
    web = {m for m in MODULES if layer(m) == "web"}
    sub = {m: graph[m] & web for m in web}
    assert _cycle(sub) is None


def test_the_worker_package_has_no_import_circle() -> None:
    """Type-only and function-level imports included: the settings (worker_config) and
    the handler specs (handlers) are leaves, the Engine is built from them rather than
    from the Worker, and the signal handlers (signals) need no Worker class."""
    worker = {m for m in MODULES if m.startswith("headgate.worker.")}
    graph: dict[str, set[str]] = {m: set() for m in worker}
    for imp in IMPORTS:
        if imp.source in worker and imp.target in worker and imp.target != imp.source:
            graph[imp.source].add(imp.target)
    assert _cycle(graph) is None


def _full_graph() -> dict[str, set[str]]:
    """Every import that runs: top-level and function-level, not type-only."""
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for imp in IMPORTS:
        if not imp.typing_only and imp.target in MODULES and imp.target != imp.source:
            graph[imp.source].add(imp.target)
    return graph


def test_no_type_checking_import_goes_up_or_closes_a_circle() -> None:
    """An `if TYPE_CHECKING:` import is where a circle hides: the module it names must
    not import the importing one back (at any depth, deferred imports included), nor
    sit in a layer above it. What a module needs of a caller it states as a Protocol."""
    graph = _full_graph()
    hidden = sorted(
        _where(imp) for imp in IMPORTS
        if imp.typing_only and imp.target in MODULES and imp.target != imp.source
        and ((imp.source, imp.target) not in ALLOWED_CROSSINGS
             and RANK[layer(imp.target)] > RANK[layer(imp.source)]
             or _reaches(graph, imp.target, imp.source))
    )
    assert hidden == []


def test_the_type_checking_check_sees_a_circle() -> None:
    graph = {"a": {"b"}, "b": set()}
    assert _reaches(graph, "a", "b") and not _reaches(graph, "b", "a")


def _thread_owners(path: Path) -> list[str]:
    """Where a module starts a thread of its own: `Thread(...)`/`Timer(...)` calls and
    classes built on them."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[ast.expr] = []
        if isinstance(node, ast.Call):
            names = [node.func]
        elif isinstance(node, ast.ClassDef):
            names = list(node.bases)
        for name in names:
            attr = name.attr if isinstance(name, ast.Attribute) else getattr(name, "id", "")
            if attr in ("Thread", "Timer"):
                found.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}")
    return found


def test_api_modules_own_no_engine_threads() -> None:
    """A route maps HTTP to the services; a thread that reads or drives the store (the
    change poller, the bulk operations runner) is a service the app starts."""
    api = [p for m, p in MODULES.items() if m == "headgate.api" or m.startswith("headgate.api.")]
    assert api
    assert [where for p in api for where in _thread_owners(p)] == []


def test_the_thread_check_finds_a_thread() -> None:
    probe = ROOT / "services" / "duties.py"
    assert _thread_owners(probe) != []


@pytest.mark.parametrize("first", [
    "headgate.api", "headgate.dashboard", "headgate.web.globals", "headgate.web.errors",
    "headgate.web.app", "headgate.web",
])
def test_the_web_layer_imports_in_any_order(first: str) -> None:
    # Whichever module a process imports first (gunicorn the app, a test the API), the
    # rest follows without a partly initialized module in the way.
    proc = subprocess.run(
        [sys.executable, "-c", f"import {first}; import headgate.web; "
                               "headgate.web.create_app(store=object()); print('ok')"],
        capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout.strip()) == (0, "ok"), proc.stderr
