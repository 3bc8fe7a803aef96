"""The packages' arrows point one way: no package imports one above it (lazy imports inside
functions included), so each can be used, tested and reasoned about without the ones above.

    games < arena < storage < matchmaking < trainer, web (peers) < arena_cli (the command)
"""

from __future__ import annotations

import ast
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
