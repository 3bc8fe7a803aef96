"""The packages' arrows point one way: no package imports one above it (lazy imports inside
functions included), so each can be used, tested and reasoned about without the ones above.

    games < arena < storage < matchmaking < trainer, web (peers) < arena_cli (the command)

Inside a package too, modules do not import each other in a circle (``KNOWN_CIRCLES`` would
name one that is left, and why; none is).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LEVELS = {"games": 0, "arena": 1, "storage": 2, "matchmaking": 3, "trainer": 4, "web": 4}
"""Each package's floor; a package may import only packages on lower floors (and itself)."""


def imports(path: Path) -> list[tuple[int, str]]:
    """Every absolute import in ``path``: (line, module), at any depth of the code."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def upward_imports(package: str) -> list[str]:
    floor = LEVELS[package]
    wrong = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for line, module in imports(path):
            top = module.split(".")[0]
            if top == "arena_cli" or (top in LEVELS and top != package and LEVELS[top] >= floor):
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    return wrong


@pytest.mark.parametrize("package", sorted(LEVELS))
def test_no_package_imports_one_above_it(package: str) -> None:
    assert upward_imports(package) == []


def test_the_walker_sees_lazy_imports(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from web.hub import serve\n    import trainer.local\n")
    assert imports(module) == [(2, "web.hub"), (3, "trainer.local")]


PACKAGES = (*sorted(LEVELS), "arena_cli")

KNOWN_CIRCLES: dict[frozenset[str], str] = {}
"""Import circles that are left, each with why; every other one fails the test."""


def module_name(path: Path, root: Path = ROOT) -> str:
    """``games/native/kuhn.py`` -> ``games.native.kuhn``; a package is its ``__init__``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    """Every module of the packages, by name."""
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def imported_modules(path: Path, modules: Mapping[str, Path], root: Path = ROOT) -> set[str]:
    """The project modules ``path`` imports, at any depth of the code (inside functions and
    under ``if TYPE_CHECKING:`` too): ``from a import b`` counts as importing ``a.b`` when
    that is a module, else ``a``."""
    name = module_name(path, root)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, up level - 1 folders
                up = package[: len(package) - node.level + 1]
                base = ".".join([*up, *([base] if base else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in modules else base)
    return {m for m in found if m in modules and m != name}


def circles(graph: Mapping[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of ``graph`` with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = set()
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.add(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def package_graphs() -> Iterator[tuple[str, dict[str, set[str]]]]:
    """Each package's import graph, between its own modules."""
    modules = project_modules()
    for package in PACKAGES:
        inside = {m: p for m, p in modules.items() if m.split(".")[0] == package}
        yield package, {m: imported_modules(p, inside) for m, p in inside.items()}


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_circle_inside_a_package(package: str) -> None:
    graph = dict(package_graphs())[package]
    found = [sorted(c) for c in circles(graph) if c not in KNOWN_CIRCLES]
    assert found == [], "modules that import each other (break the circle, see STYLE.md)"


def test_the_known_circles_are_still_there() -> None:
    found = {c for _package, graph in package_graphs() for c in circles(graph)}
    assert [sorted(c) for c in KNOWN_CIRCLES if c not in found] == []  # gone: drop it


def test_the_circle_finder_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from pkg import b\n")
    (package / "b.py").write_text("from . import c\n")
    (package / "c.py").write_text("import pkg.a\n")
    (package / "d.py").write_text("from pkg.a import f\n")
    modules = {module_name(p, tmp_path): p for p in sorted(package.glob("*.py"))}
    graph = {m: imported_modules(p, modules, tmp_path) for m, p in modules.items()}
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == {"pkg.c"}
    assert circles(graph) == [frozenset({"pkg.a", "pkg.b", "pkg.c"})]  # d only points in
