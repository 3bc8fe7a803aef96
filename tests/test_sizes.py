"""No class over 400 lines and no function over 80 lines in the packages, or a one-line
reason in the code: a ``# size: <why>`` comment on the line above the ``class``/``def``
(above its first decorator, where it has one).

A long room usually does several jobs; splitting it by job makes each part easier to read
and test. Where one piece reads best whole (a driver loop in the order it runs), the
comment says so, and the reader knows it was a choice.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("arena", "arena_cli", "games", "matchmaking", "storage", "trainer", "web")
MAX_CLASS_LINES = 400
MAX_FUNCTION_LINES = 80
REASON = "# size:"


def oversized(path: Path, root: Path = ROOT) -> list[str]:
    """Each class over ``MAX_CLASS_LINES`` and function over ``MAX_FUNCTION_LINES`` lines in
    ``path`` (nested ones included) without a ``# size:`` comment above it, named relative
    to ``root``."""
    source = path.read_text()
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.ClassDef):
            limit, kind = MAX_CLASS_LINES, "class"
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            limit, kind = MAX_FUNCTION_LINES, "function"
        else:
            continue
        size = (node.end_lineno or node.lineno) - node.lineno + 1
        if size <= limit:
            continue
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        if not any(_has_reason(lines, line - 1) for line in {first, node.lineno}):
            name = f"{path.relative_to(root)}:{node.lineno} {kind} {node.name}"
            found.append(f"{name}: {size} lines (limit {limit})")
    return found


def _has_reason(lines: list[str], line: int) -> bool:
    """True when 1-based ``line`` (the one above a definition) is ``# size: <why>``."""
    text = lines[line - 1].strip() if line >= 1 else ""
    return text.startswith(REASON) and bool(text[len(REASON) :].strip())


def package_files() -> list[Path]:
    return [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))]


def test_no_class_or_function_is_oversized_without_a_reason() -> None:
    offenders = [entry for path in package_files() for entry in oversized(path)]
    assert not offenders, "split these by job, or add '# size: <why>' above them:\n" + "\n".join(
        offenders
    )


def test_the_checker_reads_reasons_above_decorators(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    module = tmp_path / "m.py"
    module.write_text(
        f"def long():\n{body}\n"
        f"# size: reads best whole\ndef excused():\n{body}\n"
        f"# size: reads best whole\n@staticmethod\ndef decorated():\n{body}\n"
        f"@staticmethod\n# size: reads best whole\ndef under_decorator():\n{body}\n"
        f"# size:\ndef empty_reason():\n{body}\n"
        f"def short():\n    pass\n"
    )
    empty = module.read_text().splitlines().index("def empty_reason():") + 1
    assert oversized(module, root=tmp_path) == [
        f"m.py:1 function long: {MAX_FUNCTION_LINES + 1} lines (limit {MAX_FUNCTION_LINES})",
        f"m.py:{empty} function empty_reason: "
        f"{MAX_FUNCTION_LINES + 1} lines (limit {MAX_FUNCTION_LINES})",
    ]
