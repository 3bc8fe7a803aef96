"""Playing one game's episodes for the kit: seeded sessions, move choosers, replays and
copies of a game in progress, under a CPU-time budget."""

from __future__ import annotations

import copy
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from games.api import Game, GameMessage, GameSpec
from games.limits import InvalidMovePolicy, SessionLimits
from games.session import GameSession, Status
from games.sessionerrors import GameError

KIT_LIMITS = SessionLimits(step_timeout_s=10.0, reset_timeout_s=120.0)
"""The guard's limits while the kit plays a game: the per-call wall-time limits are looser
than a match's (5 s a step, 30 s a reset) so that a busy machine cannot make a slow reset
(Sudoku-v0-hard: up to 5 s of CPU) look like a hang; the kit's CPU budget still bounds the
whole check, and a game that loops is still stopped."""
MAX_FORK_POINTS = 4
"""Points per episode at which copies of the game try other moves and garbage."""
MAX_MOVES_PER_POINT = 4
"""Other listed moves tried on copies at each point."""
GARBAGE = ("", "I think I will not play a move.", "[qzqzq]", "[" * 2_000)
"""What garbage-sending players send, in turn (the last is cut by the session's
``max_action_chars`` when that is smaller)."""
FALLBACK_MOVE = "[0]"
"""What the random player sends when the game lists no moves (the random bot's answer)."""

Transcript = tuple[tuple[int, str, str, int | None], ...]
Chooser = Callable[[GameSession, int, "list[str] | None", int], str]
"""``(session, seat, listed moves, turn) -> move text``."""
Actions = dict[int, str]
"""One step of a game: the move of each seat asked (one seat in a game played in turns,
the seats of the round in a simultaneous one)."""
Listed = dict[int, "list[str] | None"]
"""The moves listed for each seat asked, at one step."""


class OutOfTime(Exception):
    """The game's time budget ran out."""


def transcript(messages: Iterable[GameMessage]) -> Transcript:
    """Messages as plain tuples, to compare two plays of a game."""
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


class EpisodeRunner:
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
        """Raise OutOfTime once the budget is spent."""
        if self.clock() > self.deadline:
            raise OutOfTime()

    def note_views(self, session: GameSession) -> None:
        """Keep the first failure of each view of ``session``."""
        for view, why in session.view_failures.items():
            self.view_failures.setdefault(view, why)

    def finish(self, session: GameSession, episode: Episode) -> Episode:
        """Copy the outcome and transcripts of ``session`` into ``episode``; close it."""
        outcome = session.outcome
        if outcome is not None:
            episode.status = outcome.status
            episode.rewards = dict(outcome.rewards)
            episode.forfeited = set(outcome.forfeited)
            episode.reason = outcome.reason
        episode.transcripts = [
            transcript(session.seat_messages(s)) for s in range(session.num_players)
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


def fork(
    runner: EpisodeRunner, session: GameSession, episode_moves: Sequence[Actions], seed: int
) -> GameSession:
    """A copy of ``session`` to try a move on: a deep copy, or a replay of the moves."""
    try:
        return copy.deepcopy(session)
    except Exception:
        twin = runner.session(seed)
        for actions in episode_moves:
            twin.step_round(actions)
        return twin


def fork_points(seed: int) -> set[int]:
    """The moves of an episode at which copies are tried: the first, then spread out."""
    rng = random.Random(seed)
    return {0, *(rng.randrange(1, 40) for _ in range(MAX_FORK_POINTS - 1))}


def with_policy(limits: SessionLimits, policy: InvalidMovePolicy) -> SessionLimits:
    """``limits`` under the invalid-move ``policy``, with one retry."""
    fields = {**limits.__dict__, "invalid_move_policy": policy, "retry_allowance": 1}
    return SessionLimits(**fields)


def with_cap(limits: SessionLimits, max_turns: int) -> SessionLimits:
    """``limits`` with a turn cap of ``max_turns``."""
    return SessionLimits(**{**limits.__dict__, "max_turns": max_turns})


def differences(a: Episode, b: Episode, what: str) -> list[str]:
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
