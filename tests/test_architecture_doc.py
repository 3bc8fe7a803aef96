"""docs/architecture.md's "Where to add": every file it names exists and defines the names
given with it, so the list stays true as the code moves."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _section() -> str:
    text = (ROOT / "docs" / "architecture.md").read_text()
    return text.split("## Where to add", 1)[1]


def _defined(path: Path) -> set[str]:
    """Top-level functions, classes and assignments, and methods as ``Class.method``."""
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    names.add(f"{node.name}.{item.name}")
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign):
            targets = [node.target]
        names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def test_every_named_file_exists_and_defines_the_named_names() -> None:
    rows = [line for line in _section().splitlines() if line.startswith("| ") and "`" in line]
    assert len(rows) >= 7
    checked = 0
    for row in rows:
        where = row.split("|")[2]
        # `file.py` (`Name`, `Other`) pairs in the "where" cell
        for path_text, names_text in re.findall(r"`([\w/]+\.py)` \(([^)]*)\)", where):
            path = ROOT / path_text
            assert path.exists(), f"docs/architecture.md names {path_text}, which is gone"
            defined = _defined(path)
            for name in re.findall(r"`([\w.]+)`", names_text):
                assert name in defined, f"{path_text} no longer defines {name}"
                checked += 1
        for path_text in re.findall(r"`([\w/]+/)`", where):
            assert (ROOT / path_text).is_dir(), f"{path_text} is gone"
    assert checked >= 10
