"""Per-seat envs and the group builder for matches.

``MatchGroupBuilder`` is plain, picklable configuration. Its ``make_envs()`` builds
``num_games`` games, a ``GameCoordinator`` for each, bots for the seats the learner does
not play, and one single-use ``PlayerEnv`` per learner seat. The outcome of each game is
reported by ``compute_group_rewards`` (step rewards are 0.0): a seat can lose before it
ever moves.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from arena.coordinator import BotAgent, GameCoordinator, MatchAbortedError, SeatAgent, SeatTurn
from arena.events import EventBus, default_bus
from arena.renderers import (
    ObservationFormat,
    Renderer,
    RendererConfig,
    SeatChat,
    bracket_bare_move,
    compact_observation,
    seat_chat,
)
from arena.types import (
    Action,
    Env,
    EnvGroupBuilder,
    Metrics,
    Observation,
    StepResult,
    StopCondition,
    Trajectory,
)
from games import make as make_game
from games.api import GameMessage
from games.bots import check_bot, make_bot
from games.registry import check_players, get_spec
from games.session import SessionLimits, Status


class PlayerEnv(Env):
    """One learner seat of one game. Single use: one episode, then discard it."""

    def __init__(
        self,
        coordinator: GameCoordinator,
        seat: int,
        renderer: Renderer,
        observation_format: ObservationFormat = "full",
    ) -> None:
        self.coordinator = coordinator
        self.seat = seat
        self.renderer = renderer
        self.observation_format: ObservationFormat = observation_format
        self._turn: SeatTurn | None = None
        self._started = False
        self._done = False
        self._done_at_start = False
        self._chat = SeatChat(seat)

    # -- observations --------------------------------------------------------------------
    def _observation(self, turn: SeatTurn | None) -> Observation:
        messages: Sequence[GameMessage]
        if turn is None:
            messages = self.coordinator.session.seat_messages(self.seat)
            new_from = len(messages)
        else:
            messages, new_from = turn.messages, turn.new_from
        if self.observation_format == "full":  # the transcript only grows: extend the chat
            self._chat.extend(messages[self._chat.consumed :])
            chat = self._chat.messages()
        elif self.observation_format == "compact":
            game_id = self.coordinator.session.game_id
            legal = turn.legal_moves if turn is not None else None
            text = compact_observation(game_id, messages, self.seat, legal)
            chat = [{"role": "user", "content": text}]
        else:
            chat = seat_chat(messages, self.seat, new_from, self.observation_format)
        return self.renderer.build_generation_prompt(chat)

    @property
    def stop_condition(self) -> StopCondition:
        """The renderer's stop sequences."""
        return self.renderer.get_stop_sequences()

    @property
    def legal_moves(self) -> list[str] | None:
        """The moves the game lists for the current turn, when it lists them."""
        return self._turn.legal_moves if self._turn is not None else None

    # -- Env -----------------------------------------------------------------------------
    async def initial_observation(self) -> tuple[Observation, StopCondition]:
        if self._started:
            raise RuntimeError("initial_observation() was already called: envs are single-use")
        self._started = True
        try:
            self._turn = await self.coordinator.wait_turn(self.seat)
        except BaseException as exc:
            self.coordinator.abort(f"seat {self.seat} failed: {type(exc).__name__}")
            raise
        if self._turn is None:
            self._done = self._done_at_start = True
        return self._observation(self._turn), self.stop_condition

    def episode_done_at_start(self) -> bool:
        return self._done_at_start

    async def step(self, action: Action, logprobs: Sequence[float] | None = None) -> StepResult:
        """Decode ``action``, play it, and wait for this seat's next turn or the end.

        ``logprobs`` (an arena extension) are recorded with the move when given. Raises
        RuntimeError when the episode is already done or ``initial_observation()`` was not
        called.
        """
        if not self._started:
            raise RuntimeError("call initial_observation() before step()")
        if self._done:
            raise RuntimeError("this env's episode is over: envs are single-use")
        message, _ended = self.renderer.parse_response(action)
        text = message["content"]
        if self.observation_format == "compact":
            text = bracket_bare_move(text)
        metrics: Metrics = {}
        try:
            record = await self.coordinator.submit(self.seat, text, action, logprobs)
            metrics["invalid_move"] = 0 if record.valid else 1
            metrics["action_truncated"] = int(record.truncated)
            self._turn = await self.coordinator.wait_turn(self.seat)
        except MatchAbortedError:
            self._turn = None
        except BaseException as exc:
            self.coordinator.abort(f"seat {self.seat} failed: {type(exc).__name__}: {exc}")
            raise
        if self._turn is None:
            self._done = True
            outcome = self.coordinator.outcome
            if outcome is not None and outcome.status is Status.ABORTED:
                metrics["aborted"] = 1
        return StepResult(
            reward=0.0,
            episode_done=self._done,
            next_observation=self._observation(self._turn),
            next_stop_condition=self.stop_condition,
            metrics=metrics,
            logs={"action": message["content"][:200]},
        )

    def abort(self, reason: str) -> None:
        """Void this seat's match (used when the policy driving it fails)."""
        self.coordinator.abort(reason)


def outcome_metrics(env: PlayerEnv) -> tuple[float, Metrics]:
    """This seat's final reward and win/draw/loss/invalid metrics."""
    coordinator = env.coordinator
    outcome = coordinator.outcome
    session = coordinator.session
    invalid = session.invalid_moves[env.seat]
    if outcome is None or outcome.status is Status.ABORTED:
        return 0.0, {"aborted": 1, "invalid_moves": invalid, "seat": env.seat}
    reward = float(outcome.rewards.get(env.seat, 0.0))
    metrics: Metrics = {
        "aborted": 0,
        "win": int(reward > 0),
        "draw": int(reward == 0),
        "loss": int(reward < 0),
        "invalid_moves": invalid,
        "forfeit": int(env.seat in outcome.forfeited),
        "truncated": int(outcome.status is Status.TRUNCATED),
        "turns": len(session.turns),
        "seat": env.seat,
    }
    return reward, metrics


@dataclass(frozen=True)
class MatchGroupBuilder(EnvGroupBuilder):
    """Configuration of a group of matches; ``make_envs()`` builds them.

    Self-play by default: the learner plays every seat. Seats not in ``learner_seats`` are
    played by ``opponents``, given in seat order (a bot name each: ``random``,
    ``optimal``).
    """

    game_id: str
    num_players: int = 2
    learner_seats: tuple[int, ...] | None = None
    """Seats the learner plays; None means all of them (self-play)."""
    opponents: tuple[str, ...] = ()
    """Agents for the other seats, in seat order."""
    num_games: int = 1
    """Games in the group; game i uses seed ``seed + i``."""
    seed: int = 0
    limits: SessionLimits = field(default_factory=SessionLimits)
    move_timeout_s: float | None = 120.0
    """How long any seat may take to answer before the match is aborted."""
    renderer: RendererConfig = field(default_factory=RendererConfig)
    observation_format: ObservationFormat = "full"
    group_id: str | None = None
    run_id: str | None = None
    learner_name: str = "learner"
    """The policy name recorded for learner seats."""

    def __post_init__(self) -> None:
        spec = get_spec(self.game_id)
        check_players(spec, self.num_players)
        seats = self.seats()
        if len(set(seats)) != len(seats) or any(not 0 <= s < self.num_players for s in seats):
            raise ValueError(
                f"learner_seats {self.learner_seats} must be distinct seats "
                f"in 0..{self.num_players - 1}"
            )
        others = self.num_players - len(seats)
        if len(self.opponents) != others:
            raise ValueError(
                f"{others} seat(s) are not the learner's, so give {others} opponent(s); "
                f"got {len(self.opponents)}: {list(self.opponents)}"
            )
        for name in self.opponents:
            check_bot(name, spec)
        if self.num_games < 1:
            raise ValueError("num_games must be at least 1")

    def seats(self) -> tuple[int, ...]:
        """The learner's seats."""
        if self.learner_seats is None:
            return tuple(range(self.num_players))
        return tuple(self.learner_seats)

    def _agents(self, game_seed: int) -> dict[int, SeatAgent]:
        learner = set(self.seats())
        others = [s for s in range(self.num_players) if s not in learner]
        return {
            seat: BotAgent(make_bot(name, seed=game_seed * 101 + seat), self.game_id)
            for seat, name in zip(others, self.opponents, strict=True)
        }

    def make_coordinators(self, bus: EventBus | None = None) -> list[GameCoordinator]:
        """The group's games, each with its coordinator (not started)."""
        bus = default_bus() if bus is None else bus
        coordinators = []
        for i in range(self.num_games):
            game_seed = self.seed + i
            session = make_game(self.game_id, self.num_players, game_seed, self.limits)
            agents = self._agents(game_seed)
            players = [
                agents[s].name if s in agents else self.learner_name
                for s in range(self.num_players)
            ]
            coordinators.append(
                GameCoordinator(
                    session,
                    agents,
                    bus=bus,
                    move_timeout_s=self.move_timeout_s,
                    players=players,
                    group_id=self.group_id,
                    run_id=self.run_id,
                )
            )
        return coordinators

    async def make_envs(self) -> Sequence[Env]:
        renderer = self.renderer.build()
        envs: list[Env] = []
        for coordinator in self.make_coordinators():
            for seat in self.seats():
                envs.append(PlayerEnv(coordinator, seat, renderer, self.observation_format))
        return envs

    async def compute_group_rewards(
        self, trajectory_group: list[Trajectory], env_group: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        out = []
        for env in env_group:
            if not isinstance(env, PlayerEnv):
                raise TypeError("MatchGroupBuilder rewards need the PlayerEnvs it built")
            if not env.coordinator.done:
                # Every seat's episode is over, so the game is too; let the driver finish.
                await asyncio.wait_for(env.coordinator.wait_done(), timeout=5.0)
            out.append(outcome_metrics(env))
        return out

    def logging_tags(self) -> list[str]:
        return [self.game_id]
