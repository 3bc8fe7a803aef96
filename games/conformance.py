"""The conformance kit: the checks every game, built-in or plugin, is held to.

For text games, the checks that PettingZoo's ``api_test``/``seed_test`` and OpenSpiel's
random-simulation tests make. :func:`check_game` plays a few seeded episodes of one game
through its guarded ``GameSession`` with random and garbage-sending players (a game of
simultaneous moves, ``SimultaneousGame``, round by round: every seat asked moves) and
reports:

``builds``
    the factory builds a game that starts at the tested player count.
``seeded``
    the same seed and the same moves give the same transcript for every seat and the same
    outcome.
``interleaved``
    ... also when two games are played move by move in turns on one thread, with other
    code drawing from the global ``random`` in between.
``hidden``
    what spectators are shown matches what the game shows its seats. No public message,
    public state or public board shown while the game is live carries a sentence that was
    sent privately to some seats but not all; where moves are private, no public text
    carries a move's text (a canary is appended to every move). Two different legal moves
    of one seat are played on two copies of the game at a few points: where spectators see
    moves (the game is registered with public moves), the game must show the move to every
    seat too (the copies' public messages, state or board differ), and it must not echo a
    move to single seats only (both fail naming ``hidden_information=``); where the move is
    private (or its simultaneous round is not over), the public state and board must not
    tell the two apart unless a public message does. Where the game can redraw what a seat
    does not know (``Game.resample_hidden``, called on a copy), the copy it was called on is
    unchanged and the redrawn game shows the seat the same public state, public board and
    legal moves; a failure there names ``resample_hidden``.
``views``
    ``public_state``, ``public_board``, ``full_board`` and ``full_state`` never raise and
    return what they must (a ``PublicBoard`` that JSON can hold): the failure is reported
    with the line of the game that raised it.
``legal_moves``
    every listed legal move is accepted (the move played, and others tried on copies of
    the game at a few points).
``invalid_moves``
    garbage (empty text, prose, a made-up bracketed move, 2,000 brackets) and well-formed
    illegal moves (a move listed at an earlier turn, another seat's move, a number past
    every number the game listed) take the invalid-move path in a game that lists its
    moves: refused, and the mover forfeits (``forfeit`` policy) or may retry once and then
    forfeits (``retry``); in any game, none of them makes the game raise (the report names
    the game's line that raised).
``ends``
    random play finishes by the game's rules within the turn cap; garbage-sending players
    end it too (by forfeit, or at the cap for games that accept any text).
``rewards``
    on every ending seen (finished, forfeited, truncated at the cap) each reward is finite
    and within ``GameSpec.reward_range``, and they sum to ``GameSpec.reward_sum`` when the
    game declares a constant sum.
``pickles``
    the game's factory, spec and kit pickle, and the unpickled factory builds the same game.

A check that does not apply (a game that lists no legal moves has no ``legal_moves`` to
try) is ``skip``, with the reason. Limits: ``episodes`` random episodes (2), the turn cap
of ``SessionLimits`` (1,000), ``MAX_FORK_POINTS`` points per episode where copies are
tried, ``time_budget_s`` of CPU time per game (60 s of this process's CPU time, not wall
time, so a busy machine does not change a verdict; checks not reached in time fail: a game
too slow to check is not vouched for).

Use: ``arena check-game ID``; :func:`assert_conforms` in a plugin's own tests;
``python -m games.conformance --write`` (``make games-table``) runs the kit on every
built-in game, in parallel, and writes ``games/conformance_results.json`` (which the
registry reads: a game that fails is unavailable, with the reason) and ``docs/games.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import multiprocessing
import os
import pickle
import random
import re
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from games.api import Game, GameMessage, GameSpec, MessageKind
from games.session import (
    GameError,
    GameSession,
    InvalidMovePolicy,
    SessionLimits,
    Status,
    game_line,
)

CHECKS = (
    "builds",
    "seeded",
    "interleaved",
    "hidden",
    "views",
    "legal_moves",
    "invalid_moves",
    "ends",
    "rewards",
    "pickles",
)
"""Every check, in the order they are reported (cheap ones run first)."""

DEFAULT_EPISODES = 2
"""Random episodes per game (seeds ``seed``, ``seed + 1``, ...)."""
DEFAULT_TIME_BUDGET_S = 60.0
"""CPU time (this process's) one game's checks may take; checks not finished in time fail."""

UNCHECKED = "not checked within the"
"""How the reason of a check the time budget cut short begins."""

KIT_LIMITS = SessionLimits(step_timeout_s=10.0, reset_timeout_s=120.0)
"""The guard's limits while the kit plays a game: the per-call wall-time limits are looser
than a match's (5 s a step, 30 s a reset) so that a busy machine cannot make a slow reset
(Sudoku-v0-hard: up to 5 s of CPU) look like a hang; the kit's CPU budget still bounds the
whole check, and a game that loops is still stopped."""
MAX_FORK_POINTS = 4
"""Points per episode at which copies of the game try other moves and garbage."""
MAX_MOVES_PER_POINT = 4
"""Other listed moves tried on copies at each point."""
MIN_SECRET_CHARS = 12
"""Private sentences shorter than this are not searched for in public texts (too common)."""
CANARY = "zq-canary-"
"""Appended, with the move's number, to every move of the canary episode."""
GARBAGE = ("", "I think I will not play a move.", "[qzqzq]", "[" * 2_000)
"""What garbage-sending players send, in turn (the last is cut by the session's
``max_action_chars`` when that is smaller)."""
FALLBACK_MOVE = "[0]"
"""What the random player sends when the game lists no moves (the random bot's answer)."""
REWARD_TOLERANCE = 1e-9
RESULTS_PATH = Path(__file__).with_name("conformance_results.json")
TABLE_PATH = Path(__file__).resolve().parent.parent / "docs" / "games.md"


class CheckStatus(StrEnum):
    """The outcome of one check."""

    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"


@dataclass(frozen=True)
class CheckResult:
    """One check's outcome, and why."""

    name: str
    status: CheckStatus
    detail: str = ""


@dataclass
class Report:
    """Every check of one game."""

    game_id: str
    num_players: int
    episodes: int
    results: list[CheckResult] = field(default_factory=list)
    seconds: float = 0.0
    legal_moves: bool = False
    """The random bot can play it: moves were listed on every turn of the random
    episodes, and every listed move tried was accepted."""
    bots: list[str] = field(default_factory=list)
    """Bots that can play it (``random`` when ``legal_moves``, then the game's own)."""

    @property
    def passed(self) -> bool:
        """True when no check failed."""
        return all(r.status is not CheckStatus.FAIL for r in self.results)

    def failures(self) -> dict[str, str]:
        """Failed check -> why."""
        return {r.name: r.detail for r in self.results if r.status is CheckStatus.FAIL}

    def score(self) -> str:
        """``7/9`` (checks passed / checks run), with skips noted."""
        run = [r for r in self.results if r.status is not CheckStatus.SKIP]
        passed = sum(r.status is CheckStatus.PASS for r in run)
        skipped = len(self.results) - len(run)
        return f"{passed}/{len(run)}" + (f" ({skipped} n/a)" if skipped else "")

    def summary(self) -> str:
        """A readable report, one line per check."""
        head = (
            f"{self.game_id} ({self.num_players} players, {self.episodes} episodes, "
            f"{self.seconds:.1f} s): {'PASS' if self.passed else 'FAIL'} {self.score()}"
        )
        lines = [head]
        for r in self.results:
            lines.append(f"  {r.status.value:<4} {r.name:<13} {r.detail}".rstrip())
        return "\n".join(lines)

    def as_record(self) -> dict[str, Any]:
        """The stored form (``conformance_results.json``); no timings, so it is stable."""
        return {
            "players": self.num_players,
            "episodes": self.episodes,
            "checks": {r.name: r.status.value for r in self.results},
            "failed": self.failures(),
            "legal_moves": self.legal_moves,
            "bots": self.bots,
        }


class _Budget(Exception):
    """The game's time budget ran out."""


# -- episodes -------------------------------------------------------------------------------
Transcript = tuple[tuple[int, str, str, int | None], ...]
Chooser = Callable[[GameSession, int, "list[str] | None", int], str]
"""``(session, seat, listed moves, turn) -> move text``."""
Actions = dict[int, str]
"""One step of a game: the move of each seat asked (one seat in a game played in turns,
the seats of the round in a simultaneous one)."""
Listed = dict[int, "list[str] | None"]
"""The moves listed for each seat asked, at one step."""


def _transcript(messages: Iterable[GameMessage]) -> Transcript:
    return tuple((m.sender, m.kind.value, m.text, m.to) for m in messages)


@dataclass
class Episode:
    """One game played through: its moves and what every seat saw."""

    seed: int
    moves: list[Actions] = field(default_factory=list)
    """Every step: the moves of the seats asked, applied together."""
    transcripts: list[Transcript] = field(default_factory=list)
    status: Status | None = None
    rewards: dict[int, float] = field(default_factory=dict)
    forfeited: set[int] = field(default_factory=set)
    reason: str = ""
    listed: int = 0
    """Moves asked for where the game listed moves."""
    unlisted: int = 0
    """Moves asked for where it listed none (None, not an empty list)."""
    refused: list[str] = field(default_factory=list)
    """Listed moves that the game refused."""

    def outcome(self) -> tuple[Status | None, dict[int, float], set[int]]:
        """What replays must reproduce."""
        return self.status, self.rewards, self.forfeited

    @property
    def num_moves(self) -> int:
        """Moves made (every seat's move of a round counts)."""
        return sum(len(actions) for actions in self.moves)


class _Runner:
    """Plays the episodes of one game and keeps what the checks need."""

    def __init__(
        self,
        spec: GameSpec,
        factory: Callable[[], Game],
        num_players: int,
        limits: SessionLimits,
        deadline: float,
        clock: Callable[[], float] = time.process_time,
    ) -> None:
        self.spec = spec
        self.factory = factory
        self.num_players = num_players
        self.limits = limits
        self.deadline = deadline
        """When the budget runs out, on ``clock``."""
        self.clock = clock
        self.view_failures: dict[str, str] = {}
        """View -> its first failure, in any session this runner played."""
        self.views_read = 0
        """Views read in those sessions (each public state, board, ... once)."""

    def session(self, seed: int, limits: SessionLimits | None = None) -> GameSession:
        """A started session (raises ValueError or GameError when it cannot start)."""
        session = GameSession(
            self.factory(), self.spec.game_id, self.num_players, seed, limits or self.limits
        )
        session.log_view_failures = False  # the kit reports them (the views check)
        session.start()
        return session

    def tick(self) -> None:
        if self.clock() > self.deadline:
            raise _Budget()

    def note_views(self, session: GameSession) -> None:
        """Keep the first failure of each view of ``session``."""
        for view, why in session.view_failures.items():
            self.view_failures.setdefault(view, why)

    def finish(self, session: GameSession, episode: Episode) -> Episode:
        outcome = session.outcome
        if outcome is not None:
            episode.status = outcome.status
            episode.rewards = dict(outcome.rewards)
            episode.forfeited = set(outcome.forfeited)
            episode.reason = outcome.reason
        episode.transcripts = [
            _transcript(session.seat_messages(s)) for s in range(session.num_players)
        ]
        self.note_views(session)
        session.close()
        return episode

    def play(
        self,
        seed: int,
        chooser: Chooser,
        limits: SessionLimits | None = None,
        on_turn: Callable[[GameSession, Listed, int], None] | None = None,
    ) -> Episode:
        """Play one episode: ``chooser`` picks every move; ``on_turn`` sees the session and
        the listed moves of the seats asked before each step (for copies)."""
        session = self.session(seed, limits)
        episode = Episode(seed=seed)
        turn = 0
        try:
            while not session.done:
                self.tick()
                listed: Listed = {seat: session.legal_moves(seat) for seat in session.movers()}
                if on_turn is not None:
                    on_turn(session, listed, turn)
                actions = {
                    seat: chooser(session, seat, moves, turn) for seat, moves in listed.items()
                }
                for moves in listed.values():
                    if moves is None:
                        episode.unlisted += 1
                    else:
                        episode.listed += 1
                episode.moves.append(actions)  # first: a replay must reach a failing move
                for record in session.step_round(actions):
                    moves = listed[record.seat]
                    text = actions[record.seat]
                    if moves and text in moves and not record.valid:
                        episode.refused.append(f"{text!r} at move {turn} ({record.reason})")
                turn += 1
        except GameError:
            pass  # the session is aborted, with the reason
        return self.finish(session, episode)

    def replay(self, episode: Episode) -> Episode:
        """The same seed and moves again."""
        steps = iter(episode.moves)

        def again(session: GameSession, seat: int, listed: list[str] | None, turn: int) -> str:
            if turn >= len(replayed):
                replayed.append(next(steps, {}))  # past the end: the outcome will differ
            return replayed[turn].get(seat, FALLBACK_MOVE)

        replayed: list[Actions] = []
        return self.play(episode.seed, again)


def random_chooser(game_id: str, seed: int) -> Chooser:
    """Picks uniformly among the listed moves (``FALLBACK_MOVE`` when none)."""
    rng = random.Random(f"{game_id}/{seed}")

    def choose(session: GameSession, seat: int, listed: list[str] | None, turn: int) -> str:
        return rng.choice(listed) if listed else FALLBACK_MOVE

    return choose


def garbage_chooser(session: GameSession, seat: int, listed: list[str] | None, turn: int) -> str:
    """Sends ``GARBAGE`` in turn."""
    return GARBAGE[turn % len(GARBAGE)]


def _fork(
    runner: _Runner, session: GameSession, episode_moves: Sequence[Actions], seed: int
) -> GameSession:
    """A copy of ``session`` to try a move on: a deep copy, or a replay of the moves."""
    try:
        return copy.deepcopy(session)
    except Exception:
        twin = runner.session(seed)
        for actions in episode_moves:
            twin.step_round(actions)
        return twin


def _spectator_texts(session: GameSession, since: int) -> tuple[list[str], str, Any]:
    """What every seat and spectator is shown after a step: the public messages from
    ``since`` on, the public state and the public board."""
    messages = [m.text for m in session.public_messages()[since:]]
    return messages, session.public_state() or "", session.public_board()


def _first_difference(a: Any, b: Any, path: str = "") -> str:
    """Where two JSON values first differ: ``extra.bids.0: 4 vs 5``."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if a.get(key) != b.get(key):
                return _first_difference(a.get(key), b.get(key), f"{path}.{key}" if path else key)
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y:
                return _first_difference(x, y, f"{path}[{i}]")
    return f"{path or 'the value'}: {str(a)[:40]} vs {str(b)[:40]}"


_NUMBERED = re.compile(r"^\[\s*(-?\d{1,6})\s*\]$")


def _well_formed_illegal(
    seat: int, listed: Listed, seen: dict[int, set[str]], highest: int
) -> list[tuple[str, str]]:
    """Moves shaped like the game's own that it must refuse from ``seat`` now, each with
    what it is: a move listed at an earlier turn (a cell taken, a card spent), another
    seat's move, a number past every number the game ever listed."""
    own = set(listed.get(seat) or [])
    out: list[tuple[str, str]] = []
    earlier = sorted(seen.get(seat, set()) - own)
    if earlier:
        out.append((earlier[0], "a move listed at an earlier turn"))
    others = sorted(
        {m for s, moves in listed.items() if s != seat for m in moves or []}
        | {m for s, moves in seen.items() if s != seat for m in moves}
    )
    others = [m for m in others if m not in own and m not in earlier[:1]]
    if others:
        out.append((others[0], "another seat's move"))
    if own and all(_NUMBERED.match(m) for m in own):
        out.append((f"[{highest + 1}]", "a number out of range"))
    return out


# -- the checks -----------------------------------------------------------------------------
class _Kit:
    """Runs the checks of one game in order, collecting their results."""

    def __init__(self, spec: GameSpec, factory: Callable[[], Game], runner: _Runner) -> None:
        self.spec = spec
        self.factory = factory
        self.runner = runner
        self.results: dict[str, CheckResult] = {}
        self.episodes: list[Episode] = []
        self.endings: list[tuple[str, Status, dict[int, float]]] = []
        self.forks: dict[str, list[str]] = {
            "legal": [],
            "invalid": [],
            "raised": [],
            "hidden": [],
            "resample": [],
        }
        self.fork_checks = {"legal": 0, "invalid": 0, "illegal": 0, "hidden": 0, "compared": 0}
        self.spectators_see_moves = spec.public_moves or not spec.hidden_information
        """What the game is registered with: spectators of a live match see its moves (as
        soon as they are played, or once their simultaneous round is over)."""
        self.private_echoes: list[str] = []
        """Moves the game echoed to single seats only (where spectators would see them)."""

    def result(self, name: str, status: CheckStatus, detail: str = "") -> None:
        self.results[name] = CheckResult(name, status, detail)

    # random episodes, with copies tried at a few points of each
    def play_random(self, seeds: Sequence[int]) -> None:
        for seed in seeds:
            episode = self.play_one_random(seed)
            self.episodes.append(episode)
            if episode.status not in (None, Status.ABORTED):
                assert episode.status is not None
                self.endings.append((f"random seed {seed}", episode.status, episode.rewards))

    def play_one_random(self, seed: int) -> Episode:
        """One random episode; copies are tried at the moves of ``_fork_points(seed)``."""
        moves_so_far: list[Actions] = []
        chooser = random_chooser(self.spec.game_id, seed)
        points = _fork_points(seed)
        seen: dict[int, set[str]] = {}
        highest = [0]
        pending: Actions = {}

        def recording(session: GameSession, seat: int, listed: list[str] | None, turn: int) -> str:
            text = chooser(session, seat, listed, turn)
            pending[seat] = text
            if len(pending) == len(session.movers()):
                moves_so_far.append(dict(pending))
                pending.clear()
            return text

        def on_turn(session: GameSession, listed: Listed, turn: int) -> None:
            if turn in points:
                self.try_copies(session, listed, turn, moves_so_far, seed, seen, highest[0])
            for seat, moves in listed.items():
                for move in moves or []:
                    seen.setdefault(seat, set()).add(move)
                    number = _NUMBERED.match(move)
                    if number:
                        highest[0] = max(highest[0], int(number.group(1)))

        episode = self.runner.play(seed, recording, on_turn=on_turn)
        self.private_echoes += self.echo_problems(episode)
        return episode

    def echo_problems(self, episode: Episode) -> list[str]:
        """A game registered with public moves must not echo a move to single seats only:
        the server would show spectators what the other seats were not shown."""
        if not self.spectators_see_moves:
            return []
        session = self.runner.session(episode.seed)
        try:
            for actions in episode.moves:
                self.runner.tick()
                for record in session.step_round(actions):
                    if record.private:
                        return [
                            f"seat {record.seat}'s move {record.index} of seed {episode.seed} "
                            f"({(record.move or record.action)[:30]!r}) was sent to single seats "
                            f"only (a message with to=...), but {self.spec.game_id} is "
                            "registered with public moves, so spectators of a live match "
                            "would see it: register it with hidden_information=True, or "
                            "send the move to every seat (to=None)"
                        ]
                if session.done:
                    break
        except GameError:
            pass
        finally:
            self.runner.note_views(session)
            session.close()
        return []

    def try_copies(
        self,
        session: GameSession,
        listed: Listed,
        turn: int,
        moves: list[Actions],
        seed: int,
        seen: dict[int, set[str]],
        highest: int,
    ) -> None:
        where = f"seed {seed} move {turn}"
        rng = random.Random(f"{self.spec.game_id}/{where}")
        base = {seat: rng.choice(m) if m else FALLBACK_MOVE for seat, m in listed.items()}
        for seat, own in listed.items():
            self.resample(session, seat, listed, where, moves, seed)
            self.compare_moves(session, seat, own, base, where, moves, seed)
            for text in (own or [])[:MAX_MOVES_PER_POINT]:
                self.runner.tick()
                twin = _fork(self.runner, session, moves, seed)
                try:
                    records = twin.step_round({**base, seat: text})
                except GameError as exc:
                    self.forks["raised"].append(f"{text!r} at {where}: {exc}")
                    continue
                finally:
                    self.runner.note_views(twin)
                record = next(r for r in records if r.seat == seat)
                self.fork_checks["legal"] += 1
                if not record.valid:
                    self.forks["legal"].append(f"{text!r} at {where} ({record.reason})")
                self.note_ending(twin, f"legal move at {where}")
            garbage = [(text, "") for text in GARBAGE]
            if own is not None:
                garbage += _well_formed_illegal(seat, listed, seen, highest)
            for text, kind in garbage:
                if own is not None and text in own:
                    continue
                self.try_garbage(
                    session, seat, text, kind, {**base, seat: text}, where, moves, seed, own
                )

    def try_garbage(
        self,
        session: GameSession,
        seat: int,
        text: str,
        kind: str,
        actions: Actions,
        where: str,
        moves: list[Actions],
        seed: int,
        own: list[str] | None,
    ) -> None:
        """``text`` from ``seat`` on a copy: refused, and the seat forfeits (``forfeit``
        policy); never a failure of the game."""
        self.runner.tick()
        twin = _fork(self.runner, session, moves, seed)
        shown = f"{text[:30]!r}" + (f" ({kind})" if kind else "")
        try:
            records = twin.step_round(actions)
        except GameError as exc:
            fix = (
                ": refuse a well-formed illegal move with MoveResult(valid=False, reason=...)"
                if kind
                else ""
            )
            self.forks["raised"].append(f"{shown} at {where} made the game fail: {exc}{fix}")
            return
        finally:
            self.runner.note_views(twin)
        record = next(r for r in records if r.seat == seat)
        self.note_ending(twin, f"garbage at {where}")
        if own is None:
            return  # a free-text game may accept it; it only must not raise
        self.fork_checks["illegal" if kind else "invalid"] += 1
        outcome = twin.outcome
        if record.valid:
            why = (
                "the game did not list it: refuse it, or list it in legal_moves"
                if kind
                else "a game must refuse what is not a move"
            )
            self.forks["invalid"].append(f"{shown} was accepted as a valid move at {where} ({why})")
        elif outcome is None:
            # With more than two seats a game may go on without the forfeiting seat;
            # with two, losing by an invalid move ends it.
            if twin.num_players == 2:
                self.forks["invalid"].append(
                    f"{shown} at {where} was refused, but the game went on under "
                    "'forfeit' (no retry allowed)"
                )
            elif not twin.done and seat in twin.movers():
                self.forks["invalid"].append(
                    f"{shown} at {where}: the seat was asked again under 'forfeit'"
                )
        elif seat not in outcome.forfeited:
            self.forks["invalid"].append(
                f"{shown} at {where} ended the game without forfeiting the seat"
            )
        elif outcome.rewards[seat] != twin.limits.invalid_move_penalty:
            self.forks["invalid"].append(f"the forfeiting seat got {outcome.rewards[seat]}")

    def compare_moves(
        self,
        session: GameSession,
        seat: int,
        own: list[str] | None,
        base: Actions,
        where: str,
        moves: list[Actions],
        seed: int,
    ) -> None:
        """Two different legal moves of ``seat`` on two copies, the other seats' moves the
        same: where spectators see the move, the game must show it to every seat too (its
        public messages, state or board tell the two apart); where the move is private,
        what the public messages do not tell apart, the public state and board must not
        either."""
        choices = sorted(set(own or []))
        if len(choices) < 2:
            return
        pair = (choices[0], choices[-1])
        seen_public = len(session.public_messages())
        outputs = []
        for text in pair:
            self.runner.tick()
            twin = _fork(self.runner, session, moves, seed)
            try:
                records = twin.step_round({**base, seat: text})
            except GameError:
                return  # reported by the legal moves tried
            finally:
                self.runner.note_views(twin)
            if twin.done or not all(r.valid for r in records):
                return  # after the end everything is shown; invalid moves are tried apart
            record = next(r for r in records if r.seat == seat)
            visible = self.spectators_see_moves and not record.private
            if record.round is not None and not twin.round_over:
                visible = False  # the round waits for a retry: its moves are unseen
            outputs.append((visible, _spectator_texts(twin, seen_public)))
            self.runner.note_views(twin)
        self.fork_checks["compared"] += 1
        (visible, (messages_a, state_a, board_a)), (_, (messages_b, state_b, board_b)) = outputs
        a, b = pair
        if visible:
            if (messages_a, state_a, board_a) == (messages_b, state_b, board_b):
                self.forks["hidden"].append(
                    f"spectators of a live match see seat {seat}'s move at {where}, but the "
                    f"game shows it to no other seat ({a!r} and {b!r} leave the same public "
                    "messages, state and board): register the game with "
                    "hidden_information=True, or announce each move to every seat (a "
                    "message with to=None)"
                )
            return
        if messages_a != messages_b:
            return  # the game said something about the move in public: revealed
        for name, x, y in (("public state", state_a, state_b), ("public board", board_a, board_b)):
            if x != y:
                self.forks["hidden"].append(
                    f"the {name} shows seat {seat}'s private move at {where} before it is "
                    f"revealed ({a!r} vs {b!r}: {_first_difference(x, y)}): keep a move that "
                    f"is not revealed out of {name.replace(' ', '_')}() until a public "
                    "message reveals it"
                )
                return

    def resample(
        self,
        session: GameSession,
        seat: int,
        listed: Listed,
        where: str,
        moves: list[Actions],
        seed: int,
    ) -> None:
        """``Game.resample_hidden`` on a copy of the game (so it cannot change the game
        played): the copy it was called on must stay as it was, and the redrawn game must
        show ``seat`` the same public state, public board and legal moves."""
        twin = _fork(self.runner, session, moves, seed)
        game = twin.game
        seats = sorted(listed)
        try:
            before = _views(game, seats, seat)
            state = _pickled(game)
            redrawn = game.resample_hidden(seat, random.Random(where))
            if redrawn is None:
                return
            self.fork_checks["hidden"] += 1
            after_call = _views(game, seats, seat)
            after = _views(redrawn, [seat], seat)
            changed = redrawn is game or (state is not None and _pickled(game) != state)
        except Exception as exc:
            self.forks["resample"].append(
                f"resample_hidden({seat}, rng) at {where} raised {_game_error(exc)}"
            )
            return
        if changed or after_call != before:
            what = f" ({_first_difference(before, after_call)})" if after_call != before else ""
            self.forks["resample"].append(
                f"resample_hidden({seat}, rng) at {where} changed the game it was called on"
                f"{what}: it must return a new game (copy.deepcopy(self), then redraw) and "
                "leave this one as it was"
            )
            return
        names = ("public state", "public board", f"seat {seat}'s legal moves")
        for name, a, b in zip(names, before[:3], after[:3], strict=True):
            if a != b:
                self.forks["resample"].append(
                    f"resample_hidden({seat}, rng) at {where} changed the {name} "
                    f"({_first_difference(a, b)}): a redraw changes only what seat {seat} "
                    "does not know (the other seats' cards, picks, roles)"
                )
                return

    def note_ending(self, session: GameSession, what: str) -> None:
        outcome = session.outcome
        if outcome is not None and outcome.status is not Status.ABORTED:
            self.endings.append((what, outcome.status, dict(outcome.rewards)))

    # checks that read the episodes
    def check_seeded(self) -> None:
        problems = []
        for episode in self.episodes:
            again = self.runner.replay(episode)
            problems += _differences(episode, again, f"seed {episode.seed}")
        if problems:
            self.result("seeded", CheckStatus.FAIL, problems[0])
        else:
            turns = sum(e.num_moves for e in self.episodes)
            self.result("seeded", CheckStatus.PASS, f"{len(self.episodes)} replays, {turns} moves")

    def check_interleaved(self) -> None:
        first = self.episodes[0]
        second = self.episodes[1] if len(self.episodes) > 1 else self.episodes[0]
        pair = [first, second]
        sessions = [self.runner.session(e.seed) for e in pair]
        replays = [Episode(seed=e.seed) for e in pair]
        queues = [list(e.moves) for e in pair]
        noise = random.Random(7)
        while any(queues):
            self.runner.tick()
            for i, session in enumerate(sessions):
                if not queues[i]:
                    continue
                if session.done:
                    queues[i].clear()
                    continue
                actions = queues[i].pop(0)
                random.seed(noise.random())  # other code reseeding between moves
                replays[i].moves.append(actions)
                with contextlib.suppress(GameError):  # the session is aborted, with why
                    session.step_round(actions)
        for i, session in enumerate(sessions):
            self.runner.finish(session, replays[i])
        problems = []
        for episode, again in zip(pair, replays, strict=True):
            problems += _differences(episode, again, f"seed {episode.seed} interleaved")
        if problems:
            self.result("interleaved", CheckStatus.FAIL, problems[0])
        else:
            self.result("interleaved", CheckStatus.PASS, "two games, move by move")

    def check_hidden(self) -> None:
        problems: list[str] = []
        secrets = 0
        for episode in self.episodes:
            found, count = self.secret_leaks(episode)
            problems += found
            secrets += count
        private_moves = any(
            m[1] == MessageKind.ACTION.value and m[3] is not None
            for e in self.episodes
            for t in e.transcripts
            for m in t
        )
        canary = "moves are public"
        if private_moves:
            self.runner.tick()
            seed = self.episodes[0].seed
            episode, leaks = self.canary_episode(seed)
            problems += leaks
            canary = f"canary in {episode.num_moves} private moves never public"
        problems += self.private_echoes + self.forks["hidden"] + self.forks["resample"]
        compared = self.fork_checks["compared"]
        resampled = self.fork_checks["hidden"]
        detail = (
            f"{secrets} private sentences never public while live; {canary}; "
            f"{compared} pairs of moves compared; "
            + (f"redrawn at {resampled} points" if resampled else "no redraw (not offered)")
        )
        if problems:
            self.result("hidden", CheckStatus.FAIL, problems[0])
        else:
            self.result("hidden", CheckStatus.PASS, detail)

    def secret_leaks(self, episode: Episode) -> tuple[list[str], int]:
        """Replay ``episode``; a sentence sent privately to some seats but not all, and not
        public before, must not turn up in a public text while the game is live."""
        session = self.runner.session(episode.seed)
        public_seen: set[str] = set()
        public_text = ""
        holders: dict[str, set[int]] = {}
        since: dict[str, int] = {}
        problems: list[str] = []
        seen = [0] * session.num_players
        public_count = 0
        everyone = set(range(session.num_players))

        def collect(step: int, live: bool) -> None:
            nonlocal public_count, public_text
            public = session.public_messages()
            new_public = [m.text for m in public[public_count:]]
            public_count = len(public)
            if live:
                state = session.public_state() or ""
                board = session.public_board()
                self.runner.views_read += 2
                texts = [*new_public, state, json.dumps(board) if board else ""]
                secrets = [f for f, seats in holders.items() if seats != everyone]
                for text in texts:
                    for fragment in secrets:
                        if since[fragment] < step and fragment in text:
                            problems.append(
                                f"a text sent privately at move {since[fragment]} of seed "
                                f"{episode.seed} is public at move {step}: {fragment[:60]!r}"
                            )
                            return
            for text in new_public:
                public_seen.update(_fragments(text))
            public_text += "\n".join(new_public) + "\n"
            for seat in range(session.num_players):
                messages = session.seat_messages(seat)
                for m in messages[seen[seat] :]:
                    if m.to is None or m.kind is MessageKind.ACTION:
                        continue
                    for fragment in _fragments(m.text):
                        if fragment in public_seen or fragment in public_text:
                            continue
                        holders.setdefault(fragment, set()).add(seat)
                        since.setdefault(fragment, step)
                seen[seat] = len(messages)

        try:
            collect(0, True)
            for i, actions in enumerate(episode.moves):
                self.runner.tick()
                session.step_round(actions)
                collect(i + 1, not session.done)
                if problems:
                    break
            if session.done:  # the views spectators get after the end
                session.full_board()
                session.full_state()
                self.runner.views_read += 2
        except GameError:
            pass
        self.runner.note_views(session)
        session.close()
        secret = sum(1 for seats in holders.values() if seats != everyone)
        return problems[:1], secret

    def canary_episode(self, seed: int) -> tuple[Episode, list[str]]:
        """Random moves, each with its own canary appended; the canary of a move that was
        not shown to every seat must not appear in public while the game is live."""
        problems: list[str] = []
        secret: set[str] = set()
        last: dict[int, str] = {}
        public_count = 0
        pattern = re.compile(re.escape(CANARY) + r"\d{4}")
        count = [0]
        tokens: dict[tuple[int, int], str] = {}

        def token(turn: int, seat: int) -> str:
            key = (turn, seat)
            if key not in tokens:
                tokens[key] = f"{CANARY}{count[0]:04d}"
                count[0] += 1
            return tokens[key]

        def on_turn(session: GameSession, listed: Listed, turn: int) -> None:
            nonlocal public_count
            # The previous step's moves are private unless the game showed them to every
            # seat.
            for seat, previous in last.items():
                echoed = None
                for m in reversed(session.seat_messages(seat)):
                    if m.kind is MessageKind.ACTION and previous in m.text:
                        echoed = m
                        break
                if echoed is None or echoed.to is not None:
                    secret.add(previous)
            last.clear()
            last.update({seat: token(turn, seat) for seat in listed})
            public = session.public_messages()
            texts = [m.text for m in public[public_count:]]
            public_count = len(public)
            texts += [session.public_state() or "", json.dumps(session.public_board() or {})]
            for text in texts:
                for canary in pattern.findall(text):
                    if canary in secret and not problems:
                        problems.append(
                            f"the text of private move {int(canary[len(CANARY) :])} of seed "
                            f"{seed} is public before move {turn}"
                        )

        rng = random.Random(f"{self.spec.game_id}/{seed}/canary")

        def choose(session: GameSession, seat: int, listed: list[str] | None, turn: int) -> str:
            move = rng.choice(listed) if listed else FALLBACK_MOVE
            return f"{move} {token(turn, seat)}"

        episode = self.runner.play(seed, choose, on_turn=on_turn)
        if episode.status not in (None, Status.ABORTED):
            assert episode.status is not None
            self.endings.append((f"canary seed {seed}", episode.status, episode.rewards))
        return episode, problems

    def check_views(self) -> None:
        failures = self.runner.view_failures
        if failures:
            view, why = next(iter(sorted(failures.items())))
            more = f" (+{len(failures) - 1} more views)" if len(failures) > 1 else ""
            self.result(
                "views",
                CheckStatus.FAIL,
                f"{view}() failed: {why}{more}: a view must never fail (spectators get a "
                "plain text view instead)",
            )
        else:
            self.result(
                "views",
                CheckStatus.PASS,
                f"public state and board, all-seeing board and state read "
                f"{self.runner.views_read} times, never failed",
            )

    def check_legal_moves(self) -> None:
        refused = [r for e in self.episodes for r in e.refused] + self.forks["legal"]
        listed = sum(e.listed for e in self.episodes)
        if refused:
            self.result("legal_moves", CheckStatus.FAIL, f"listed but refused: {refused[0]}")
        elif not listed:
            self.result("legal_moves", CheckStatus.SKIP, "the game lists no legal moves")
        else:
            tried = listed + self.fork_checks["legal"]
            unlisted = sum(e.unlisted for e in self.episodes)
            note = f"; no list on {unlisted} turns" if unlisted else ""
            self.result("legal_moves", CheckStatus.PASS, f"{tried} listed moves accepted{note}")

    def check_invalid_moves(self) -> None:
        problems = self.forks["invalid"] + self.forks["raised"]
        lists = sum(e.listed for e in self.episodes) > 0
        if lists:
            problems += self.retry_path()
        if problems:
            self.result("invalid_moves", CheckStatus.FAIL, problems[0])
        elif lists:
            tried = self.fork_checks["invalid"]
            illegal = self.fork_checks["illegal"]
            self.result(
                "invalid_moves",
                CheckStatus.PASS,
                f"{tried} garbage and {illegal} well-formed illegal moves refused and "
                "forfeited; retry allowance honoured",
            )
        else:
            self.result("invalid_moves", CheckStatus.PASS, "garbage never raises (free-text game)")

    def retry_path(self) -> list[str]:
        """Under ``retry`` (one retry): garbage, the same seat moves again; garbage, it
        forfeits (the other seats of a simultaneous round move validly)."""
        limits = _with_policy(self.runner.limits, InvalidMovePolicy.RETRY)
        session = self.runner.session(self.episodes[0].seed, limits)
        rng = random.Random(f"{self.spec.game_id}/retry")

        def others(seat: int) -> Actions:
            return {
                s: rng.choice(session.legal_moves(s) or [FALLBACK_MOVE])
                for s in session.movers()
                if s != seat
            }

        try:
            seat = session.current_player()
            first = session.step_round({**others(seat), seat: GARBAGE[2]})
            if next(r for r in first if r.seat == seat).valid:
                return [f"{GARBAGE[2]!r} was accepted as a first move"]
            if session.done or seat not in session.movers():
                return ["after one invalid move under 'retry', the seat could not retry"]
            second = session.step_round({**others(seat), seat: GARBAGE[1]})
            outcome = session.outcome
            if next(r for r in second if r.seat == seat).valid:
                return [f"{GARBAGE[1]!r} was accepted as a valid move"]
            if outcome is None:
                # More than two seats: the game may go on without the seat.
                if session.num_players == 2 or seat in session.movers():
                    return ["a second invalid move in a row under 'retry' did not forfeit"]
                return []
            if seat not in outcome.forfeited:
                return ["a second invalid move in a row under 'retry' did not forfeit"]
            self.endings.append(("retry forfeit", outcome.status, dict(outcome.rewards)))
            return []
        except GameError as exc:
            return [f"garbage under 'retry' made the game fail: {exc}"]
        finally:
            self.runner.note_views(session)
            session.close()

    def check_ends(self) -> None:
        problems = []
        for e in self.episodes:
            if e.status is Status.ABORTED:
                problems.append(f"random play on seed {e.seed} aborted: {e.reason}")
            elif e.status is not Status.FINISHED:
                problems.append(
                    f"random play on seed {e.seed} did not finish within "
                    f"{self.runner.limits.max_turns} moves"
                )
        for policy in (InvalidMovePolicy.FORFEIT, InvalidMovePolicy.RETRY):
            self.runner.tick()
            limits = _with_policy(self.runner.limits, policy)
            episode = self.runner.play(self.episodes[0].seed, garbage_chooser, limits)
            if episode.status is Status.ABORTED or episode.status is None:
                problems.append(f"garbage players ({policy.value}) aborted it: {episode.reason}")
            else:
                self.endings.append((f"garbage ({policy.value})", episode.status, episode.rewards))
        if problems:
            self.result("ends", CheckStatus.FAIL, problems[0])
        else:
            turns = max(e.num_moves for e in self.episodes)
            self.result("ends", CheckStatus.PASS, f"random play finished (<= {turns} moves)")

    def check_rewards(self) -> None:
        # A truncated ending too: a cap of one move, unless the game ends at once.
        self.runner.tick()
        short = _with_cap(self.runner.limits, 1)
        episode = self.runner.play(
            self.episodes[0].seed, random_chooser(self.spec.game_id, 0), short
        )
        if episode.status not in (None, Status.ABORTED):
            assert episode.status is not None
            self.endings.append(("truncated", episode.status, episode.rewards))
        low, high = self.spec.reward_range
        problems = []
        for what, _status, rewards in self.endings:
            values = list(rewards.values())
            if any(not math.isfinite(v) or not low <= v <= high for v in values):
                problems.append(f"{what}: rewards {rewards} outside [{low}, {high}]")
            total = sum(values)
            if self.spec.reward_sum is not None and abs(total - self.spec.reward_sum) > (
                REWARD_TOLERANCE
            ):
                problems.append(
                    f"{what}: rewards {rewards} sum to {total}, not {self.spec.reward_sum}"
                )
        kinds = sorted({status.value for _, status, _ in self.endings})
        if problems:
            self.result("rewards", CheckStatus.FAIL, problems[0])
        else:
            declared = "" if self.spec.reward_sum is None else f", sum {self.spec.reward_sum}"
            self.result(
                "rewards",
                CheckStatus.PASS,
                f"{len(self.endings)} endings ({', '.join(kinds)}) in [{low}, {high}]{declared}",
            )

    def check_pickles(self, kit: object) -> None:
        try:
            factory = pickle.loads(pickle.dumps(self.factory))
            pickle.loads(pickle.dumps(self.spec))
            pickle.loads(pickle.dumps(kit))
        except Exception as exc:
            self.result("pickles", CheckStatus.FAIL, f"{type(exc).__name__}: {exc}")
            return
        runner = _Runner(
            self.spec, factory, self.runner.num_players, self.runner.limits, self.runner.deadline
        )
        try:
            again = runner.replay(self.episodes[0])
        except (GameError, ValueError) as exc:
            self.result("pickles", CheckStatus.FAIL, f"the unpickled factory fails: {exc}")
            return
        problems = _differences(self.episodes[0], again, "unpickled factory")
        if problems:
            self.result("pickles", CheckStatus.FAIL, problems[0])
        else:
            self.result("pickles", CheckStatus.PASS, "factory, spec and kit; same game after")


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


def _fragments(text: str) -> set[str]:
    """The sentences and lines of ``text`` long enough to be searched for."""
    return {
        part.strip() for part in _SENTENCE_END.split(text) if len(part.strip()) >= MIN_SECRET_CHARS
    }


def _board(game: Game) -> Any:
    board = game.public_board()
    return board.as_dict() if board is not None else None


def _views(game: Game, seats: Sequence[int], seat: int) -> tuple[Any, ...]:
    """What ``seat`` is shown of ``game`` (public state, public board, its legal moves),
    then the legal moves of ``seats`` and the all-seeing state."""
    return (
        game.public_state(),
        _board(game),
        game.legal_moves(seat),
        tuple(game.legal_moves(s) for s in seats),
        game.full_state(),
    )


def _pickled(game: Game) -> bytes | None:
    """The game's whole state as bytes (to tell whether a call changed it), or None when
    it does not pickle."""
    try:
        return pickle.dumps(game)
    except Exception:
        return None


def _game_error(exc: BaseException) -> str:
    """``KeyError: 7 (game.py:88)``."""
    where = game_line(exc)
    return f"{type(exc).__name__}: {exc}" + (f" ({where})" if where else "")


def _fork_points(seed: int) -> set[int]:
    """The moves of an episode at which copies are tried: the first, then spread out."""
    rng = random.Random(seed)
    return {0, *(rng.randrange(1, 40) for _ in range(MAX_FORK_POINTS - 1))}


def _with_policy(limits: SessionLimits, policy: InvalidMovePolicy) -> SessionLimits:
    fields = {**limits.__dict__, "invalid_move_policy": policy, "retry_allowance": 1}
    return SessionLimits(**fields)


def _with_cap(limits: SessionLimits, max_turns: int) -> SessionLimits:
    return SessionLimits(**{**limits.__dict__, "max_turns": max_turns})


def _differences(a: Episode, b: Episode, what: str) -> list[str]:
    """How replay ``b`` differs from episode ``a`` (first difference per kind)."""
    if a.outcome() != b.outcome():
        return [f"{what}: outcome {a.outcome()} the first time, {b.outcome()} the second"]
    for seat, (x, y) in enumerate(zip(a.transcripts, b.transcripts, strict=True)):
        if x != y:
            pairs = enumerate(zip(x, y, strict=False))  # replays may differ in length
            at = next((i for i, (m, n) in pairs if m != n), min(len(x), len(y)))
            shown = x[at][2][:60] if at < len(x) else "(nothing)"
            again = y[at][2][:60] if at < len(y) else "(nothing)"
            return [f"{what}: seat {seat}'s message {at} was {shown!r}, then {again!r}"]
    return []


def check_game(
    game_id: str,
    *,
    num_players: int | None = None,
    episodes: int = DEFAULT_EPISODES,
    seed: int = 0,
    limits: SessionLimits | None = None,
    time_budget_s: float = DEFAULT_TIME_BUDGET_S,
    clock: Callable[[], float] = time.process_time,
) -> Report:
    """Run every check on ``game_id`` (even one marked unavailable for a failed check).

    ``time_budget_s`` is counted on ``clock``: this process's CPU time by default, so
    other work on the machine does not eat into it (tests give a clock they drive).

    Raises UnknownGame, and ValueError for a player count the game does not take or
    ``episodes`` < 1. A game that fails to start fails ``builds``; nothing it does raises
    out of here.
    """
    from games.bots import bots_for
    from games.registry import factory as game_factory
    from games.registry import game_kit, get_spec

    if episodes < 1:
        raise ValueError("episodes must be at least 1")
    spec = get_spec(game_id)
    if num_players is not None and not spec.supports(num_players):
        raise ValueError(f"{game_id} takes {spec.players_text} players, not {num_players}")
    default = spec.player_counts[0] if spec.player_counts else spec.min_players
    players = num_players if num_players is not None else default
    started = time.monotonic()
    report = Report(game_id=game_id, num_players=players, episodes=episodes)
    factory = game_factory(game_id)
    runner = _Runner(spec, factory, players, limits or KIT_LIMITS, clock() + time_budget_s, clock)
    kit = _Kit(spec, factory, runner)
    try:
        session = runner.session(seed)
        session.close()
        if session.simultaneous != spec.simultaneous:
            kind = "a SimultaneousGame" if session.simultaneous else "a game played in turns"
            raise ValueError(
                f"the factory builds {kind}, but the game is registered with "
                f"simultaneous={spec.simultaneous}: register the class itself, or pass "
                f"simultaneous={session.simultaneous} to register_game"
            )
    except Exception as exc:
        kit.result("builds", CheckStatus.FAIL, f"{type(exc).__name__}: {exc}")
        report.results = [kit.results["builds"]] + [
            CheckResult(name, CheckStatus.SKIP, "the game does not build") for name in CHECKS[1:]
        ]
        report.seconds = time.monotonic() - started
        return report
    kit.result("builds", CheckStatus.PASS, f"starts with {players} players")
    # Cheap checks first, replays later, rewards last (it reads every ending seen).
    steps: list[tuple[str, Callable[[], None]]] = [
        ("legal_moves", kit.check_legal_moves),
        ("invalid_moves", kit.check_invalid_moves),
        ("ends", kit.check_ends),
        ("seeded", kit.check_seeded),
        ("interleaved", kit.check_interleaved),
        ("hidden", kit.check_hidden),
        ("views", kit.check_views),
        ("pickles", lambda: kit.check_pickles(game_kit(game_id))),
        ("rewards", kit.check_rewards),
    ]
    try:
        kit.play_random([seed + i for i in range(episodes)])
    except _Budget:
        steps = []
    except Exception as exc:  # a bug in the game's hooks (legal_moves, resample_hidden, ...)
        kit.result("seeded", CheckStatus.FAIL, f"playing raised {type(exc).__name__}: {exc}")
        steps = []
    for name, run in steps:
        if name in kit.results:
            continue
        try:
            run()
        except _Budget:
            break
        except Exception as exc:
            kit.result(name, CheckStatus.FAIL, f"the check raised {type(exc).__name__}: {exc}")
    for name in CHECKS:
        if name not in kit.results:
            # Unchecked is not passed: a game too slow to check is not vouched for.
            kit.result(
                name,
                CheckStatus.FAIL,
                f"{UNCHECKED} {time_budget_s:.0f} s budget (CPU time)",
            )
    report.results = [kit.results[name] for name in CHECKS]
    episodes_played = kit.episodes
    report.legal_moves = (
        bool(episodes_played)
        and all(e.unlisted == 0 and e.listed > 0 for e in episodes_played)
        and kit.results["legal_moves"].status is CheckStatus.PASS
    )
    report.bots = bots_for(_spec_with(spec, report.legal_moves))
    report.seconds = time.monotonic() - started
    return report


def _spec_with(spec: GameSpec, legal_moves: bool) -> GameSpec:
    from dataclasses import replace

    return replace(spec, legal_moves=legal_moves)


def assert_conforms(game_id: str, **options: Any) -> Report:
    """Run :func:`check_game` and raise AssertionError with the report when a check fails
    (for a plugin's own tests: ``assert_conforms("MyGame-v0")``). Returns the report."""
    report = check_game(game_id, **options)
    if not report.passed:
        raise AssertionError(report.summary())
    return report


# -- every game, in parallel ------------------------------------------------------------------
def candidates() -> list[str]:
    """Built-in game ids the kit runs on: every game available here, and those marked
    unavailable only for a failed conformance check."""
    from games.registry import BUILTIN_PACKAGE, CONFORMANCE_REASON, catalogue

    return [
        s.game_id
        for s in catalogue()
        if s.package in (BUILTIN_PACKAGE, "textarena")
        and (s.available or (s.reason or "").startswith(CONFORMANCE_REASON))
    ]


def _check_quietly(args: tuple[str, int, float]) -> Report:
    game_id, episodes, budget = args
    with open(os.devnull, "w") as sink, contextlib.redirect_stderr(sink):
        return check_game(game_id, episodes=episodes, time_budget_s=budget)


def _crashed(game_id: str, episodes: int, error: BaseException) -> Report:
    """The report of a game whose check killed its worker process."""
    report = Report(game_id=game_id, num_players=0, episodes=episodes)
    why = f"the check crashed its worker: {type(error).__name__}: {error}"
    report.results = [CheckResult(CHECKS[0], CheckStatus.FAIL, why)] + [
        CheckResult(name, CheckStatus.SKIP, "not run") for name in CHECKS[1:]
    ]
    return report


def check_all(
    game_ids: Sequence[str],
    *,
    jobs: int = 2,
    episodes: int = DEFAULT_EPISODES,
    time_budget_s: float = DEFAULT_TIME_BUDGET_S,
    progress: Callable[[Report], None] | None = None,
) -> list[Report]:
    """Check many games on ``jobs`` worker processes (spawned); reports in id order. A game
    whose check kills its worker fails ``builds`` with the error; the others go on."""
    reports: list[Report] = []

    def done(report: Report) -> None:
        reports.append(report)
        if progress:
            progress(report)

    if jobs <= 1:
        for game_id in game_ids:
            done(_check_quietly((game_id, episodes, time_budget_s)))
        return sorted(reports, key=lambda r: r.game_id.lower())
    remaining = list(game_ids)
    while remaining:
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
            futures = {
                pool.submit(_check_quietly, (game_id, episodes, time_budget_s)): game_id
                for game_id in remaining
            }
            remaining = []
            for future in as_completed(futures):
                game_id = futures[future]
                try:
                    done(future.result())
                except BrokenProcessPool:
                    remaining.append(game_id)  # a neighbour killed the pool: run it again
                except Exception as exc:
                    done(_crashed(game_id, episodes, exc))
        if remaining and len(remaining) == len(futures):
            # Every game was lost with the pool: run them one by one to find the culprit.
            for game_id in remaining:
                try:
                    with ProcessPoolExecutor(1, mp_context=context) as single:
                        done(
                            single.submit(
                                _check_quietly, (game_id, episodes, time_budget_s)
                            ).result()
                        )
                except Exception as exc:
                    done(_crashed(game_id, episodes, exc))
            remaining = []
    return sorted(reports, key=lambda r: r.game_id.lower())


def render_results(reports: Sequence[Report]) -> str:
    """``conformance_results.json``: one game per line, so diffs stay readable."""
    lines = ['{"games": {']
    body = [
        f"{json.dumps(r.game_id)}: {json.dumps(r.as_record(), sort_keys=True)}" for r in reports
    ]
    lines.append(",\n".join(body))
    lines.append("}}")
    return "\n".join(lines) + "\n"


def render_table(records: dict[str, dict[str, Any]]) -> str:
    """``docs/games.md`` from stored records: game, seats, checks passed, bots."""
    from games.registry import catalogue

    specs = {s.game_id: s for s in catalogue()}
    passing = sum(1 for r in records.values() if not r["failed"])
    out = [
        "# Games and their conformance",
        "",
        "Generated by `make games-table` (`python -m games.conformance --write`); do not edit.",
        "Every game available here is run through the conformance kit (`games.conformance`:",
        "seeded replays, interleaving, hidden information, views, legal and invalid moves,",
        "endings, rewards, pickling), a few episodes each. A game that fails a check is",
        "unavailable (`arena games` says which check and why; `--allow-failing` plays it",
        "anyway). `arena check-game ID` runs it on one game.",
        "",
        f"{len(records)} games checked, {passing} pass every check.",
        "",
        "| game | seats | checks passed | bots | note |",
        "|---|---|---|---|---|",
    ]
    for game_id in sorted(records, key=str.lower):
        record = records[game_id]
        checks = record["checks"]
        run = [c for c in checks.values() if c != CheckStatus.SKIP]
        passed = sum(c == CheckStatus.PASS for c in run)
        skipped = len(checks) - len(run)
        score = f"{passed}/{len(run)}" + (f" ({skipped} n/a)" if skipped else "")
        spec = specs.get(game_id)
        seats = spec.players_text if spec else str(record["players"])
        bots = ", ".join(record["bots"]) or "none"
        failed = record["failed"]
        note = ""
        if failed:
            name, why = next(iter(sorted(failed.items())))
            note = f"unavailable: {name}: {why}".replace("|", "\\|")
        out.append(f"| {game_id} | {seats} | {score} | {bots} | {note[:160]} |")
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m games.conformance``: run the kit on every built-in game."""
    parser = argparse.ArgumentParser(
        prog="python -m games.conformance",
        description="Run the conformance kit on every game available here.",
    )
    parser.add_argument("--write", action="store_true", help="write the results and the table")
    parser.add_argument("--only", nargs="+", metavar="ID", help="check only these games")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--episodes", type=int, default=DEFAULT_EPISODES, help="per game")
    parser.add_argument("--table", type=Path, default=TABLE_PATH, help=argparse.SUPPRESS)
    parser.add_argument("--results", type=Path, default=RESULTS_PATH, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    ids = candidates()
    if args.only:
        unknown = sorted(set(args.only) - set(ids))
        if unknown:
            parser.error(f"not built-in games available here: {', '.join(unknown)}")
        ids = list(args.only)
    started = time.monotonic()

    def progress(report: Report) -> None:
        mark = "ok  " if report.passed else "FAIL"
        why = (
            ""
            if report.passed
            else " " + "; ".join(f"{k}: {v}" for k, v in report.failures().items())[:150]
        )
        print(f"{mark} {report.game_id} {report.score()} {report.seconds:.1f}s{why}", flush=True)

    reports = check_all(ids, jobs=args.jobs, episodes=args.episodes, progress=progress)
    elapsed = time.monotonic() - started
    failed = [r for r in reports if not r.passed]
    print(f"{len(reports)} games in {elapsed:.0f} s: {len(reports) - len(failed)} pass")
    if args.write:
        records = {}
        if args.only and args.results.exists():
            records = json.loads(args.results.read_text(encoding="utf-8")).get("games", {})
        records.update({r.game_id: r.as_record() for r in reports})
        merged = [_record_report(game_id, record) for game_id, record in records.items()]
        args.results.write_text(render_results(merged), encoding="utf-8")
        from games.registry import reload

        reload()
        args.table.parent.mkdir(parents=True, exist_ok=True)
        args.table.write_text(render_table(records), encoding="utf-8")
        print(f"wrote {args.results} and {args.table}")
    return 0


def _record_report(game_id: str, record: dict[str, Any]) -> Report:
    """A stored record back as a report (for rewriting the file)."""
    report = Report(game_id, int(record["players"]), int(record["episodes"]))
    failed = record.get("failed", {})
    report.results = [
        CheckResult(name, CheckStatus(status), failed.get(name, ""))
        for name, status in record["checks"].items()
    ]
    report.legal_moves = bool(record.get("legal_moves"))
    report.bots = list(record.get("bots", []))
    return report


if __name__ == "__main__":
    sys.exit(main())
