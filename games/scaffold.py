"""``arena new-game NAME``: write a package holding one new game, its test and its entry point.

The package (``NAME/``)::

    pyproject.toml            the ``arena.games`` entry point: GAME_ID = "PACKAGE.game"
    README.md
    src/PACKAGE/__init__.py
    src/PACKAGE/game.py       the game, its kit (compact view) and a perfect bot: edit it
    tests/test_game.py        runs the conformance kit on the game

The game it starts from is a complete one, Race to N: two seats take turns adding 1, 2 or
3 to a running total; whoever brings it to the target wins. ``pip install -e NAME`` makes it
show in ``arena games``, play in ``arena play`` and train with ``arena train --game``.
``docs/new-game.md`` walks through it.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from pathlib import Path

MAX_NAME_CHARS = 60
"""Longest package name accepted."""

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
_GAME_ID = re.compile(r"[A-Za-z][A-Za-z0-9]*-v\d+")


class ScaffoldError(ValueError):
    """The name, id or directory cannot be used; the message says why and what to do."""


@dataclass(frozen=True)
class Written:
    """What ``write_package`` wrote."""

    root: Path
    game_id: str
    package: str
    """The Python package (import name)."""
    game_file: Path
    files: tuple[Path, ...]


def names(name: str, game_id: str | None = None) -> tuple[str, str, str, str]:
    """``(distribution, package, class name, game id)`` for ``name``: ``my-game`` gives
    ``my-game``, ``my_game``, ``MyGame`` and ``MyGame-v0``.

    Raises ScaffoldError for a name or id that cannot be used.
    """
    if not _NAME.fullmatch(name) or len(name) > MAX_NAME_CHARS:
        raise ScaffoldError(
            f"bad game name {name!r}: use letters, digits, '-' and '_', starting with a letter "
            f"(at most {MAX_NAME_CHARS} characters), e.g. my-game"
        )
    words = [w for w in re.split(r"[-_]+", name) if w]
    package = "_".join(w.lower() for w in words)
    class_name = "".join(w[:1].upper() + w[1:] for w in words)
    chosen = game_id or f"{class_name}-v0"
    if not _GAME_ID.fullmatch(chosen):
        raise ScaffoldError(
            f"bad game id {chosen!r}: use a name and a version, like {class_name}-v0"
        )
    return name.lower().replace("_", "-"), package, class_name, chosen


def write_package(
    name: str, directory: str | Path = ".", *, game_id: str | None = None, force: bool = False
) -> Written:
    """Write the package ``name`` under ``directory``.

    Raises ScaffoldError for a bad name or id, an id already in the catalogue, or a
    directory that exists (unless ``force``).
    """
    from games.registry import game_kits

    dist, package, class_name, chosen = names(name, game_id)
    if chosen in game_kits():
        raise ScaffoldError(f"the game id {chosen} is taken; choose another with --game-id")
    root = Path(directory) / dist
    if root.exists() and not force:
        raise ScaffoldError(f"{root} exists; choose another --dir or name, or pass --force")
    values = {"dist": dist, "package": package, "class_name": class_name, "game_id": chosen}
    files = {
        root / "pyproject.toml": _PYPROJECT,
        root / "README.md": _README,
        root / "src" / package / "__init__.py": _INIT,
        root / "src" / package / "game.py": _GAME,
        root / "tests" / "test_game.py": _TEST,
    }
    for path, template in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(string.Template(template).substitute(values), encoding="utf-8")
    return Written(
        root=root,
        game_id=chosen,
        package=package,
        game_file=root / "src" / package / "game.py",
        files=tuple(files),
    )


_PYPROJECT = """\
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "$dist"
version = "0.1.0"
description = "$game_id, a text game for Arena"
requires-python = ">=3.11"
dependencies = ["arena-selfplay"]

# Arena finds the game through this entry point: importing the module registers it.
[project.entry-points."arena.games"]
"$game_id" = "$package.game"

[tool.setuptools.packages.find]
where = ["src"]

[tool.pytest.ini_options]
testpaths = ["tests"]
# The tests are synchronous: no asyncio plugin (and none of its warnings).
addopts = "-p no:asyncio"
"""

_README = """\
# $dist

`$game_id`, a text game for [Arena](https://github.com/), in one file: `src/$package/game.py`.

```bash
pip install -e .                 # Arena finds it through the arena.games entry point
pytest                           # the conformance kit on the game
arena games | grep $game_id
arena play --game $game_id --players random,perfect --games 20 --no-record
arena train --game $game_id --num-batches 50
```
"""

_INIT = '''\
"""$game_id, a game for Arena (registered by ``$package.game``)."""
'''

_GAME = '''\
"""$game_id: Race to N, a two-player game to turn into yours.

Rules: a running total starts at 0; the seats take turns adding 1, 2 or 3 (answer ``[2]``);
whoever brings the total to the target wins (+1, the other -1). The seed picks who starts.
A seat that exceeds the invalid-move allowance loses.

Everything Arena needs from a game lives in this file:

* ``${class_name}Game``: the rules, behind ``games.api.Game`` (text in, text out);
* ``legal_moves``: the moves the seat may make now (the random bot plays from them);
* ``public_board``: what spectators may see, as data for a browser board;
* ``compact_view``: one short line for small models (``7/15``: total and target);
* ``PerfectBot``: a strong bot (here it cannot lose when it can win);
* the ``register_game`` call at the end, which the ``arena.games`` entry point runs; its
  ``hidden_information=True`` keeps every move from live spectators until the match ends.

For a game whose seats move at once (bids, votes, rock-paper-scissors), subclass
``games.api.SimultaneousGame`` instead (see ``games/native/rock_paper_scissors.py``).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from games.api import (
    GAME,
    Bot,
    BotView,
    Game,
    GameKit,
    GameMessage,
    MessageKind,
    MoveResult,
    PublicBoard,
)
from games.registration import register_game

GAME_ID = "$game_id"
TARGET = 15
"""The total that wins."""
STEPS = (1, 2, 3)
"""What a seat may add."""

_MOVE = re.compile(r"\\[\\s*(\\d+)\\s*\\]")
_STATE = re.compile(r"Total: (\\d+) of (\\d+)")


class ${class_name}Game(Game):
    """Race to ``TARGET``; see the module docstring."""

    def __init__(self, target: int = TARGET) -> None:
        if target < 1:
            raise ValueError("target must be at least 1")
        self.target = target
        self._messages: list[GameMessage] = []
        self._allowance = 1

    def _say(self, text: str, kind: MessageKind, to: int | None = None, sender: int = GAME) -> None:
        self._messages.append(GameMessage(sender=sender, text=text, kind=kind, to=to))

    def _moves(self) -> list[int]:
        return [n for n in STEPS if self._total + n <= self.target]

    def _prompt_turn(self) -> None:
        moves = ", ".join(f"[{n}]" for n in self._moves())
        self._say(
            f"Total: {self._total} of {self.target}. Player {self._turn} to move.\\n"
            f"Available moves: {moves}",
            MessageKind.BOARD,
        )

    # -- the Game API ----------------------------------------------------------------------
    def reset(self, num_players: int, seed: int) -> None:
        if num_players != 2:
            raise ValueError(f"{GAME_ID} takes 2 players, not {num_players}")
        self._total = 0
        self._turn = random.Random(seed).randrange(2)
        self._errors = 0
        self._done = False
        self._rewards = {0: 0.0, 1: 0.0}
        self._out: set[int] = set()
        for seat in range(2):
            self._say(
                f"You are Player {seat} in Race to {self.target}. Players take turns adding "
                f"1, 2 or 3 to a running total that starts at 0; whoever brings it to "
                f"{self.target} wins. Answer with your number in brackets, e.g. '[2]'.",
                MessageKind.PROMPT,
                to=seat,
            )
        self._prompt_turn()

    def set_invalid_move_allowance(self, allowance: int) -> None:
        self._allowance = allowance

    def current_player(self) -> int:
        return self._turn

    def step(self, action: str) -> MoveResult:
        seat = self._turn
        self._say(action, MessageKind.ACTION, sender=seat)
        found = _MOVE.search(action)
        number = int(found.group(1)) if found and len(found.group(1)) <= 3 else None
        if number not in self._moves():
            reason = "no number in brackets" if number is None else f"cannot add {number} now"
            self._errors += 1
            if self._errors > self._allowance:
                self._end(winner=1 - seat, why=f"Player {seat} forfeits ({reason}).")
                self._out.add(seat)
            else:
                self._say(f"Invalid move: {reason}. Try again.", MessageKind.ADMIN, to=seat)
            return MoveResult(valid=False, reason=reason)
        self._errors = 0
        self._total += number
        self._say(f"Player {seat} adds {number}.", MessageKind.DESCRIPTION)
        if self._total == self.target:
            self._end(winner=seat, why=f"Player {seat} reaches {self.target} and wins.")
        else:
            self._turn = 1 - seat
            self._prompt_turn()
        return MoveResult(valid=True)

    def _end(self, winner: int, why: str) -> None:
        self._done = True
        self._rewards = {winner: 1.0, 1 - winner: -1.0}
        self._say(why, MessageKind.ADMIN)

    def is_done(self) -> bool:
        return self._done

    def rewards(self) -> dict[int, float]:
        return dict(self._rewards)

    def forfeited(self) -> set[int]:
        return set(self._out)

    def drain_messages(self) -> list[GameMessage]:
        out, self._messages = self._messages, []
        return out

    # -- what else Arena asks the game ---------------------------------------------------------
    def legal_moves(self, seat: int) -> list[str] | None:
        if self._done or seat != self._turn:
            return None
        return [f"[{n}]" for n in self._moves()]

    def public_state(self) -> str:
        return f"Total: {self._total} of {self.target}"

    def public_board(self) -> PublicBoard:
        return PublicBoard(
            kind="scores",
            to_move=None if self._done else self._turn,
            extra={"total": self._total, "target": self.target},
        )


def compact_view(messages: Sequence[GameMessage], seat: int) -> str | None:
    """``7/15``: the total and the target, from the last state the seat was shown."""
    for message in reversed(messages):
        found = _STATE.search(message.text) if message.sender == GAME else None
        if found:
            return f"{found.group(1)}/{found.group(2)}"
    return None


class PerfectBot(Bot):
    """Leaves the opponent a multiple of 4 short of the target when it can; else random."""

    name = "perfect"

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def act(self, view: BotView) -> str:
        state = compact_view(view.messages, view.seat)
        if state is None:
            return self._rng.choice(view.legal_moves or ["[1]"])
        total, target = (int(x) for x in state.split("/"))
        for n in STEPS:
            if total + n <= target and (target - total - n) % 4 == 0:
                return f"[{n}]"
        return self._rng.choice(view.legal_moves or ["[1]"])


register_game(
    GAME_ID,
    min_players=2,
    max_players=2,
    # True, the safe choice: spectators of a live match see "(hidden move)" for every move
    # until the match ends. Race to N has nothing to hide (every move is announced to every
    # seat), so False would show its moves live; keep True while any move, card or pick is
    # sent to one seat only. The conformance kit fails a game registered False whose moves
    # it sees sent privately.
    hidden_information=True,
    description=f"Race to {TARGET}: add 1, 2 or 3 in turn; reach the target to win.",
    kit=GameKit(compact_view=compact_view, bots={"perfect": PerfectBot}),
    reward_sum=0.0,
)(${class_name}Game)
'''

_TEST = '''\
"""$game_id against Arena's conformance kit, and its own rules."""

from __future__ import annotations

import games
from games.conformance import assert_conforms

import $package.game  # noqa: F401 - registers the game (the entry point does too)


def test_the_game_passes_the_conformance_kit() -> None:
    report = assert_conforms("$game_id", episodes=3)
    assert report.legal_moves  # the random bot can play it


def test_reaching_the_target_wins() -> None:
    session = games.make("$game_id", 2, seed=0)
    while not session.done:
        seat = session.current_player()
        session.step(seat, (session.legal_moves(seat) or ["[1]"])[-1])
    assert session.outcome is not None and sorted(session.outcome.rewards.values()) == [-1, 1]
'''
