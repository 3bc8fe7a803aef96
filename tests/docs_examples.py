"""The complete games that docs/new-game.md shows, as modules the tests can import: what an
author who follows the docs alone writes."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

NEW_GAME_DOC = Path(__file__).resolve().parent.parent / "docs" / "new-game.md"


def doc_block(starts_with: str) -> str:
    """The fenced Python block of docs/new-game.md whose code starts with ``starts_with``."""
    blocks = re.findall(r"```python\n(.*?)```", NEW_GAME_DOC.read_text(), flags=re.S)
    found = [b for b in blocks if b.startswith(starts_with)]
    if len(found) != 1:
        raise LookupError(f"{len(found)} blocks of docs/new-game.md start with {starts_with!r}")
    return found[0]


def load_doc_game(name: str, starts_with: str) -> types.ModuleType:
    """Import the docs' block as the module ``name`` (its ``register_game`` runs); the
    module stays importable by name, so its factory pickles."""
    module = types.ModuleType(name)
    module.__file__ = f"<docs/new-game.md: {name}>"
    sys.modules[name] = module
    exec(compile(doc_block(starts_with), module.__file__, "exec"), module.__dict__)
    return module
