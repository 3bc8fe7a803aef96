"""README.md and docs/ stay exact: every `arena` command and option they name exists, every
`make` target and `python -m` module they name exists, and the README stays a front page."""

from __future__ import annotations

import argparse
import importlib.util
import re
from pathlib import Path

import pytest

from arena_cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MAX_README_BYTES = 12_000


def commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def options(parser: argparse.ArgumentParser) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings}


def code_of(text: str) -> list[str]:
    """The code in a Markdown text: fenced blocks (with backslash continuations joined) and
    inline spans."""
    blocks = re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S)
    rest = re.sub(r"```.*?```", "", text, flags=re.S)
    lines = [line for block in blocks for line in block.replace("\\\n", " ").splitlines()]
    return lines + re.findall(r"`([^`\n]+)`", rest)


def invocations(doc: Path) -> list[tuple[str, list[str]]]:
    """Each ``arena COMMAND ...`` in ``doc``'s code: (command, the options it names)."""
    found = []
    for code in code_of(doc.read_text()):
        code = code.split("#", 1)[0]
        for match in re.finditer(r"(?:^|[\s(;|&])arena ([a-z][a-z-]*)((?:\s+[^\s|;&)]+)*)", code):
            if match.group(1) == "import":  # Python's `from arena import ...`
                continue
            args = match.group(2).split()
            found.append((match.group(1), [a.split("=", 1)[0] for a in args if a.startswith("--")]))
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_arena_command_and_option_named_exists(doc: Path) -> None:
    known = commands()
    wrong = []
    for command, flags in invocations(doc):
        if command not in known:
            wrong.append(f"arena {command}: no such command")
            continue
        missing = [f for f in flags if f not in options(known[command])]
        wrong += [f"arena {command} {f}: no such option" for f in missing]
    assert wrong == []


def test_the_readme_names_most_commands_and_the_walker_sees_them() -> None:
    named = {command for command, _ in invocations(ROOT / "README.md")}
    assert named >= {"games", "play", "train", "serve", "leaderboard"}
    assert set(commands()) <= named | {"agents"}  # every command is in the table


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_make_target_and_module_named_exists(doc: Path) -> None:
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][a-z-]*):", makefile, flags=re.M))
    wrong = []
    for code in code_of(doc.read_text()):
        wrong += [
            f"make {t}" for t in re.findall(r"\bmake ([a-z][a-z-]*)", code) if t not in targets
        ]
        for module in re.findall(r"python -m ([a-z_][\w.]*)", code):
            if module.endswith("."):  # a pattern: `python -m bench.<name>`
                continue
            if module not in ("pytest", "pip", "venv") and importlib.util.find_spec(module) is None:
                wrong.append(f"python -m {module}")
    assert wrong == []


def test_the_readme_is_a_front_page() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.encode()) < MAX_README_BYTES
    top = "\n".join(text.splitlines()[:12])
    assert "make demo" in top and "make test" in top
    for link in re.findall(r"\]\((docs/[^)]+)\)", text):
        assert (ROOT / link).is_file(), link
