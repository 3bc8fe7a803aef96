"""A player's name is read and written in one place: ``arena.identity`` (``PolicyRef`` for
who plays, ``WeightsRef`` for where a sampler's weights are). Everywhere else asks it, so a
new prefix or a changed form is one edit, and no module reads ``run:...`` its own way.

The check walks every module of the packages (and ``tools``) for code that reads or builds
a player-name prefix: a string that is a prefix (``"openai:"``), a method call given one
(``text.startswith("run:")``), or an f-string that starts with one (``f"agent:{name}"``).
Help texts and messages that show a form to a user (``"give run:NAME@STEP"``) are fine.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from arena.identity import BadPolicyRef, PolicyKind, PolicyRef, WeightsKind, WeightsRef

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("arena", "arena_cli", "games", "matchmaking", "storage", "trainer", "web", "tools")
PREFIXES = (
    "run:",
    "checkpoint:",
    "model:",
    "openai:",
    "tinker://",
    "base-model:",
    "learner:",
    "human:",
    "agent:",
    "bot:",
)
HOMES = {"arena/identity.py"}
"""The modules that read and write the forms."""


def prefix_uses(path: Path, root: Path = ROOT) -> list[str]:
    """Where ``path`` reads or builds a player-name prefix, as ``file:line text``."""
    tree = ast.parse(path.read_text(), str(path))
    found: dict[int, str] = {}  # by line: an f-string's parts are constants too

    def starts(value: object) -> bool:
        return isinstance(value, str) and value.startswith(PREFIXES)

    for node in ast.walk(tree):
        hit: ast.AST | None = None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value in PREFIXES:
                hit = node
        elif isinstance(node, ast.JoinedStr) and node.values:
            first = node.values[0]
            if isinstance(first, ast.Constant) and starts(first.value):
                hit = node
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            for arg in node.args:
                parts = arg.elts if isinstance(arg, ast.Tuple) else [arg]
                if any(isinstance(e, ast.Constant) and starts(e.value) for e in parts):
                    hit = node
        if hit is not None:
            line = getattr(hit, "lineno", 0)
            text = f"{path.relative_to(root)}:{line} {ast.unparse(hit)[:80]}"
            if line not in found or len(text) > len(found[line]):
                found[line] = text
    return [found[line] for line in sorted(found)]


def test_player_name_prefixes_are_read_and_written_in_arena_identity_alone() -> None:
    offenders = [
        use
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if str(path.relative_to(ROOT)) not in HOMES
        for use in prefix_uses(path)
    ]
    assert not offenders, "ask arena.identity (PolicyRef, WeightsRef) instead:\n" + "\n".join(
        offenders
    )


def test_the_walker_finds_reads_and_builds_of_a_prefix(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        'PREFIX = "openai:"\n'
        "def f(text, name):\n"
        '    if text.startswith("run:"):\n'
        '        return f"agent:{name}"\n'
        '    if text.startswith(("tinker://", "x")):\n'
        "        return 1\n"
        '    raise ValueError("give run:NAME@STEP or tinker://PATH")\n'
    )
    assert [use.split(" ")[0] for use in prefix_uses(module, tmp_path)] == [
        "m.py:1",
        "m.py:3",
        "m.py:4",
        "m.py:5",
    ]


def test_a_served_models_text_is_read_once_into_its_reference() -> None:
    text = "openai:http://127.0.0.1:8000/v1/#smollm2?timeout_s=5&temperature=0.5"
    ref = PolicyRef.parse(text)
    assert (ref.kind, ref.name, ref.endpoint) == (
        PolicyKind.OPENAI,
        "smollm2",
        "http://127.0.0.1:8000/v1",
    )
    assert ref.options == (("timeout_s", "5"), ("temperature", "0.5"))
    assert PolicyRef.parse(ref.player_text) == ref and ref.player_text == text.replace("/#", "#")
    recorded = PolicyRef.parse("openai:smollm2@127.0.0.1:8000")  # a recorded name: no endpoint
    assert (recorded.name, recorded.version, recorded.endpoint) == ("smollm2", "127.0.0.1:8000", "")
    with pytest.raises(BadPolicyRef, match="no model name"):
        PolicyRef.parse("openai:http://h/v1#")
    with pytest.raises(BadPolicyRef, match="OPTION=VALUE"):
        PolicyRef.parse("openai:http://h/v1#m?timeout_s")


def test_a_checkpoints_player_text_seats_it_again() -> None:
    ref = PolicyRef.checkpoint("tictactoe-1", 120)
    assert ref.player_text == "run:tictactoe-1@120" and PolicyRef.parse(ref.player_text) == ref


@pytest.mark.parametrize(
    ("path", "kind", "location"),
    [
        (
            "tinker://abc/sampler_weights/000120",
            WeightsKind.TINKER,
            "tinker://abc/sampler_weights/000120",
        ),
        ("model:smollm2", WeightsKind.MODEL, "smollm2"),
        ("model:/models/x.gguf", WeightsKind.MODEL, "/models/x.gguf"),
        ("runs/x/checkpoints/000120", WeightsKind.DIRECTORY, "runs/x/checkpoints/000120"),
    ],
)
def test_a_sampler_path_is_read_into_where_its_weights_are(
    path: str, kind: WeightsKind, location: str
) -> None:
    weights = WeightsRef.parse(path)
    assert (weights.kind, weights.location) == (kind, location)
    assert weights.path == path
