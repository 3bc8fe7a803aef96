"""The kit of one game: :func:`check_game` plays its random episodes, tries copies of the
game at a few points of each, and runs every check in order (each concern's checks live in
their own module: ``moves``, ``hidden``, ``replays``, ``endings``)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from games.conformance.endings import EndingChecks
from games.conformance.episodes import (
    FALLBACK_MOVE,
    KIT_LIMITS,
    Actions,
    Episode,
    EpisodeRunner,
    Listed,
    OutOfTime,
    fork_points,
    random_chooser,
)
from games.conformance.hidden import HiddenChecks
from games.conformance.moves import NUMBERED, MoveChecks
from games.conformance.replays import ReplayChecks
from games.conformance.report import (
    CHECKS,
    DEFAULT_EPISODES,
    DEFAULT_TIME_BUDGET_S,
    UNCHECKED,
    CheckStatus,
    Report,
    skipped_after,
)
from games.limits import SessionLimits
from games.session import GameSession, Status


class Kit(MoveChecks, HiddenChecks, ReplayChecks, EndingChecks):
    """Runs the checks of one game in order, collecting their results."""

    def check_builds(self, seed: int) -> bool:
        """``builds``: the factory builds a game that starts, of the kind registered."""
        try:
            session = self.runner.session(seed)
            session.close()
            if session.simultaneous != self.spec.simultaneous:
                kind = "a SimultaneousGame" if session.simultaneous else "a game played in turns"
                raise ValueError(
                    f"the factory builds {kind}, but the game is registered with "
                    f"simultaneous={self.spec.simultaneous}: register the class itself, or "
                    f"pass simultaneous={session.simultaneous} to register_game"
                )
        except Exception as exc:
            self.result("builds", CheckStatus.FAIL, f"{type(exc).__name__}: {exc}")
            return False
        self.result("builds", CheckStatus.PASS, f"starts with {self.runner.num_players} players")
        return True

    def run_checks(self, seeds: Sequence[int], time_budget_s: float) -> None:
        """Play the random episodes of ``seeds``, then run every other check; a check the
        budget cut short fails."""
        from games.registry import game_kit

        # Cheap checks first, replays later, rewards last (it reads every ending seen).
        steps: list[tuple[str, Callable[[], None]]] = [
            ("legal_moves", self.check_legal_moves),
            ("invalid_moves", self.check_invalid_moves),
            ("ends", self.check_ends),
            ("seeded", self.check_seeded),
            ("interleaved", self.check_interleaved),
            ("hidden", self.check_hidden),
            ("views", self.check_views),
            ("pickles", lambda: self.check_pickles(game_kit(self.spec.game_id))),
            ("rewards", self.check_rewards),
        ]
        try:
            self.play_random(seeds)
        except OutOfTime:
            steps = []
        except Exception as exc:  # a bug in the game's hooks (legal_moves, resample_hidden, ...)
            self.result("seeded", CheckStatus.FAIL, f"playing raised {type(exc).__name__}: {exc}")
            steps = []
        for name, run in steps:
            if name in self.results:
                continue
            try:
                run()
            except OutOfTime:
                break
            except Exception as exc:
                self.result(name, CheckStatus.FAIL, f"the check raised {type(exc).__name__}: {exc}")
        for name in CHECKS:
            if name not in self.results:
                # Unchecked is not passed: a game too slow to check is not vouched for.
                self.result(
                    name,
                    CheckStatus.FAIL,
                    f"{UNCHECKED} {time_budget_s:.0f} s budget (CPU time)",
                )

    def random_bot_plays(self) -> bool:
        """Moves were listed on every turn of the random episodes, and accepted."""
        return (
            bool(self.episodes)
            and all(e.unlisted == 0 and e.listed > 0 for e in self.episodes)
            and self.results["legal_moves"].status is CheckStatus.PASS
        )

    # random episodes, with copies tried at a few points of each
    def play_random(self, seeds: Sequence[int]) -> None:
        """Play one random episode per seed, keeping it and how it ended."""
        for seed in seeds:
            episode = self.play_one_random(seed)
            self.episodes.append(episode)
            if episode.status not in (None, Status.ABORTED):
                assert episode.status is not None
                self.endings.append((f"random seed {seed}", episode.status, episode.rewards))

    def play_one_random(self, seed: int) -> Episode:
        """One random episode; copies are tried at the moves of ``fork_points(seed)``."""
        moves_so_far: list[Actions] = []
        chooser = random_chooser(self.spec.game_id, seed)
        points = fork_points(seed)
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
                    number = NUMBERED.match(move)
                    if number:
                        highest[0] = max(highest[0], int(number.group(1)))

        episode = self.runner.play(seed, recording, on_turn=on_turn)
        self.private_echoes += self.echo_problems(episode)
        return episode

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
        """At one point of an episode, for each seat asked: redraw its hidden information,
        compare two of its moves, try its listed moves, garbage and illegal moves."""
        where = f"seed {seed} move {turn}"
        rng = random.Random(f"{self.spec.game_id}/{where}")
        base = {seat: rng.choice(m) if m else FALLBACK_MOVE for seat, m in listed.items()}
        for seat, own in listed.items():
            self.resample(session, seat, listed, where, moves, seed)
            self.compare_moves(session, seat, own, base, where, moves, seed)
            self.try_listed(session, seat, own, base, where, moves, seed)
            self.try_invalid(session, seat, listed, base, where, moves, seed, seen, highest)

    def check_views(self) -> None:
        """``views``: no view of any session played ever failed."""
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
    from games.registry import get_spec

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
    runner = EpisodeRunner(
        spec, factory, players, limits or KIT_LIMITS, clock() + time_budget_s, clock
    )
    kit = Kit(spec, factory, runner)
    if not kit.check_builds(seed):
        report.results = skipped_after(kit.results["builds"], "the game does not build")
        report.seconds = time.monotonic() - started
        return report
    kit.run_checks([seed + i for i in range(episodes)], time_budget_s)
    report.results = [kit.results[name] for name in CHECKS]
    report.legal_moves = kit.random_bot_plays()
    report.bots = bots_for(replace(spec, legal_moves=report.legal_moves))
    report.seconds = time.monotonic() - started
    return report


def assert_conforms(game_id: str, **options: Any) -> Report:
    """Run :func:`check_game` and raise AssertionError with the report when a check fails
    (for a plugin's own tests: ``assert_conforms("MyGame-v0")``). Returns the report."""
    report = check_game(game_id, **options)
    if not report.passed:
        raise AssertionError(report.summary())
    return report
