"""Per-seat envs and the group builder for matches.

``MatchGroupBuilder`` is plain, picklable configuration. Its ``make_envs()`` builds
``group_size`` games, a ``GameCoordinator`` for each, bots for the seats the learner does
not play, and one single-use ``PlayerEnv`` per learner seat. The outcome of each game is
reported by ``compute_group_rewards`` (step rewards are 0.0): a seat can lose before it
ever moves.

Any driver works, the cookbook's included, because the envs and the coordinator enforce
the rules themselves:

- a seat whose game is over before its first move gets ``GameOverBeforeFirstMove`` from
  ``initial_observation()`` (the cookbook's no-sampling sentinel);
- if the task driving a seat fails or is cancelled (its policy raised or timed out, the
  driver gave up) while the seat still has moves to make, the match is aborted at once and
  every other seat wakes; a seat that simply stops being played is ended by the move clock;
- a seat that is never driven at all is aborted by the coordinator's join timeout;
- ``cleanup()`` (which the cookbook calls in a ``finally``) ends every game of the group
  that no live rollout is driving any more, and waits for its driver task.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from arena.branching import DECISION_LOG, BranchConfig, branch_group
from arena.coordinator import GameCoordinator, MatchAbortedError
from arena.eventbus import EventBus, default_bus
from arena.match import LearnerSeat, Lineup, MatchSettings, build_match
from arena.renderers import ObservationFormat, Renderer
from arena.rollouts import TokenPolicy
from arena.seats import AgentSpec, SeatTurn, agent_spec
from arena.seatview import SeatView
from arena.types import (
    STOP_METRIC_PREFIX,
    Action,
    ActionExtra,
    Env,
    EnvGroupBuilder,
    GameOverBeforeFirstMove,
    Metrics,
    Observation,
    StepResult,
    StopCondition,
    Trajectory,
)
from games.outcome import Result, as_list, result_of, score_of
from games.session import Status


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
        self._driver: asyncio.Task[object] | None = None
        self.view = SeatView(seat, coordinator.session.game_id, renderer, observation_format)
        """Renders this seat's prompts and reads its moves."""
        self.game_index = 0
        """Which game of its group this seat plays (set by ``make_envs``)."""
        self.lineup: Lineup | None = None
        """The line-up its game was built from (set by ``make_envs``): what a branch of
        the game (``arena.branching``) rebuilds it from."""

    # -- observations --------------------------------------------------------------------
    def _observation(self, turn: SeatTurn | None) -> Observation:
        if turn is None:
            messages = self.coordinator.session.seat_messages(self.seat)
            return self.view.prompt(messages, len(messages), None)
        return self.view.prompt(turn.messages, turn.new_from, turn.legal_moves)

    def observation(self) -> Observation:
        """What this seat sees now (at the end: its final view), as a prompt."""
        return self._observation(self._turn)

    @property
    def stop_condition(self) -> StopCondition:
        """The renderer's stop sequences."""
        return self.view.stop_condition

    @property
    def legal_moves(self) -> list[str] | None:
        """The moves the game lists for the current turn, when it lists them."""
        return self._turn.legal_moves if self._turn is not None else None

    @property
    def done(self) -> bool:
        """True once this seat's episode is over."""
        return self._done

    @property
    def done_before_first_move(self) -> bool:
        """True when the game ended (or was aborted) before this seat's first move."""
        return self._done_at_start

    @property
    def driven(self) -> bool:
        """True while a live task is playing this seat (started, not done)."""
        driver = self._driver
        return self._started and not self._done and driver is not None and not driver.done()

    # -- who drives this seat -------------------------------------------------------------
    def _watch_driver(self) -> None:
        """Remember the task that drives this seat: if it fails while the seat still has to
        move, no one will ever answer for it, so the match is aborted at once."""
        task = asyncio.current_task()
        if task is None or task is self._driver:
            return
        if self._driver is not None:
            self._driver.remove_done_callback(self._driver_ended)
        self._driver = task
        task.add_done_callback(self._driver_ended)

    def _driver_ended(self, task: asyncio.Task[object]) -> None:
        # Only a failure or a cancellation means the seat was abandoned: a driver may run
        # each call in its own short task and return normally in between (then the move
        # clock is what ends a seat that is never played again).
        if self._done or task is not self._driver:
            return
        if task.cancelled():
            why = "was cancelled"
        else:
            exc = task.exception()
            if exc is None:
                return
            why = f"failed: {type(exc).__name__}: {exc}"
        self.coordinator.abort(f"the rollout of seat {self.seat} {why} before its game did")

    def _finish(self) -> None:
        self._done = True
        if self._driver is not None:
            self._driver.remove_done_callback(self._driver_ended)

    def _stop_metric(self) -> str:
        outcome = self.coordinator.outcome
        if outcome is None or outcome.status is Status.ABORTED:
            return f"{STOP_METRIC_PREFIX}aborted"
        if outcome.status is Status.TRUNCATED:
            return f"{STOP_METRIC_PREFIX}max_turns"
        return f"{STOP_METRIC_PREFIX}completed"

    # -- Env -----------------------------------------------------------------------------
    async def initial_observation(
        self,
    ) -> tuple[Observation, StopCondition] | GameOverBeforeFirstMove:
        """Wait until this seat must move; its prompt and stop condition. When the game is
        over before the seat's first move, ``GameOverBeforeFirstMove`` instead (drivers then
        end the rollout without sampling). Raises RuntimeError on a second call."""
        if self._started:
            raise RuntimeError("initial_observation() was already called: envs are single-use")
        self._started = True
        self._watch_driver()
        try:
            self._turn = await self.coordinator.wait_turn(self.seat)
        except BaseException as exc:
            self.coordinator.abort(f"seat {self.seat} failed: {type(exc).__name__}")
            raise
        if self._turn is None:
            self._done_at_start = True
            self._finish()
            metrics: Metrics = {self._stop_metric(): 1.0}
            return GameOverBeforeFirstMove(reward=0.0, metrics=metrics)
        return self._observation(self._turn), self.stop_condition

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        """Decode ``action``, play it, and wait for this seat's next turn or the end.

        ``extra`` may carry the cookbook's ``stop_reason`` and arena's ``logprobs`` (see
        ``ArenaActionExtra``), which are recorded with the move. Raises RuntimeError when
        the episode is already done or ``initial_observation()`` was not called.
        """
        if not self._started:
            raise RuntimeError("call initial_observation() before step()")
        if self._done:
            raise RuntimeError("this env's episode is over: envs are single-use")
        self._watch_driver()
        logprobs = _logprobs(extra)
        text = self.view.move(action)
        metrics: Metrics = {}
        logs: dict[str, str | int | float] = {}
        if self._turn is not None:
            turn = self._turn
            # The moves applied when this seat was asked: where a branch would start.
            shift = turn.movers.index(self.seat) if self.seat in turn.movers else 0
            logs[DECISION_LOG] = turn.turn_index - shift
        try:
            record, self._turn = await self.coordinator.submit_and_wait(
                self.seat, text, action, logprobs
            )
            metrics["invalid_move"] = 0 if record.valid else 1
            metrics["action_truncated"] = int(record.truncated)
        except MatchAbortedError:
            self._turn = None
        except BaseException as exc:
            self.coordinator.abort(f"seat {self.seat} failed: {type(exc).__name__}: {exc}")
            raise
        if self._turn is None:
            self._finish()
            stop = self._stop_metric()
            metrics[stop] = 1.0
            if stop == f"{STOP_METRIC_PREFIX}aborted":
                metrics["aborted"] = 1
        return StepResult(
            reward=0.0,
            episode_done=self._done,
            next_observation=self._observation(self._turn),
            next_stop_condition=self.stop_condition,
            metrics=metrics,
            logs={"action": text[:200], **logs},
        )

    def abort(self, reason: str) -> None:
        """Void this seat's match (used when the policy driving it fails)."""
        self.coordinator.abort(reason)


def _logprobs(extra: ActionExtra | None) -> list[float] | None:
    value = extra.get("logprobs") if extra else None
    return list(value) if isinstance(value, list) else None


def outcome_metrics(env: PlayerEnv) -> tuple[float, Metrics]:
    """This seat's final reward and win/draw/loss/invalid metrics."""
    coordinator = env.coordinator
    outcome = coordinator.outcome
    session = coordinator.session
    invalid = session.invalid_moves[env.seat]
    if outcome is None or outcome.status is Status.ABORTED:
        return 0.0, {"aborted": 1, "invalid_moves": invalid, "seat": env.seat}
    rewards = as_list(outcome.rewards, session.num_players)
    reward = rewards[env.seat]
    result = result_of(env.seat, rewards)
    metrics: Metrics = {
        "aborted": 0,
        "win": int(result is Result.WIN),
        "draw": int(result is Result.DRAW),
        "loss": int(result is Result.LOSS),
        "score": score_of(env.seat, rewards),
        "invalid_moves": invalid,
        "forfeit": int(env.seat in outcome.forfeited),
        "opponent_forfeit": int(any(seat != env.seat for seat in outcome.forfeited)),
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

    settings: MatchSettings | str
    """How the games are played (``arena.match.MatchSettings``: the game, its players, the
    limits and clocks, the renderer, the observation format); a game id alone is that game
    with the default settings."""
    learner_seats: tuple[int, ...] | None = None
    """Seats the learner plays; None means all of them (self-play)."""
    opponents: tuple[str | AgentSpec, ...] = ()
    """Players of the other seats, in seat order: bot names (``random``, ``optimal``) or
    agent specs (a past checkpoint: ``matchmaking.agents.ModelSeat``)."""
    group_size: int = 1
    """Games in the group (the cookbook's name); game i uses seed ``seed + i``."""
    seed: int = 0
    deal_seed: int | None = None
    """None: game i is also dealt from ``seed + i``; given: every game of the group is
    dealt from it (the same cards, prize order or values), while each game's seats keep
    their own randomness (from ``seed + i``). Rewards centred within such a group compare
    the moves alone, not the luck of the deal."""
    group_id: str | None = None
    run_id: str | None = None
    learner_name: str = "learner"
    """The policy name recorded for learner seats."""
    branching: BranchConfig | None = None
    """Branch every played game for per-move values (``arena.branching``); None: no
    branches (every move of a seat shares its game's advantage)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "settings", MatchSettings.of(self.settings))
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
        for player in self.opponents:
            agent_spec(player).check(self.game_id)
        if self.group_size < 1:
            raise ValueError("group_size must be at least 1")

    @property
    def match(self) -> MatchSettings:
        """The group's match settings."""
        assert isinstance(self.settings, MatchSettings)  # made one in __post_init__
        return self.settings

    @property
    def game_id(self) -> str:
        return self.match.game_id

    @property
    def num_players(self) -> int:
        return self.match.num_players

    def seats(self) -> tuple[int, ...]:
        """The learner's seats."""
        if self.learner_seats is None:
            return tuple(range(self.num_players))
        return tuple(self.learner_seats)

    def lineup(self, index: int) -> Lineup:
        """Game ``index``'s line-up: the learner's seats, the opponents in the others, seed
        ``seed + index`` (dealt from ``deal_seed`` when it is given)."""
        opponents = iter(self.opponents)
        learner = set(self.seats())
        players = tuple(
            LearnerSeat(self.learner_name) if seat in learner else agent_spec(next(opponents))
            for seat in range(self.num_players)
        )
        return Lineup(self.game_id, players, self.seed + index, game_seed=self.deal_seed)

    def make_coordinators(self, bus: EventBus | None = None) -> list[GameCoordinator]:
        """The group's games, each with its coordinator (not started)."""
        bus = default_bus() if bus is None else bus
        return [
            build_match(
                self.lineup(i),
                bus=bus,
                limits=self.match.limits,
                group_id=self.group_id,
                run_id=self.run_id,
            )
            for i in range(self.group_size)
        ]

    async def make_envs(self) -> Sequence[Env]:
        """One ``PlayerEnv`` per learner seat of each game, game by game (seat order within
        a game). The games are remembered, not pickled, so ``cleanup()`` can end them."""
        renderer = self.match.renderer.build()
        envs: list[PlayerEnv] = []
        for index, coordinator in enumerate(self.make_coordinators()):
            game_envs = [
                PlayerEnv(coordinator, seat, renderer, self.match.observation_format)
                for seat in self.seats()
            ]
            for env in game_envs:
                env.game_index = index
                env.lineup = self.lineup(index)
            self._live_games().append(game_envs)
            envs.extend(game_envs)
        return envs

    def replay_game(self, index: int) -> MatchGroupBuilder:
        """A builder of game ``index`` of this group alone (same seeds, same seats): what a
        retry plays when one of the game's seats failed."""
        if not 0 <= index < self.group_size:
            raise IndexError(f"game {index} out of range 0..{self.group_size - 1}")
        return dataclasses.replace(self, group_size=1, seed=self.seed + index)

    def _live_games(self) -> list[list[PlayerEnv]]:
        games = self.__dict__.get("_games")
        if games is None:
            games = []
            object.__setattr__(self, "_games", games)
        return games

    def __getstate__(self) -> dict[str, object]:
        return {k: v for k, v in self.__dict__.items() if k != "_games"}

    async def cleanup(self) -> None:
        """End every game built by ``make_envs()`` that no live rollout drives any more
        (for example the unused seats of a retry), and wait for their driver tasks.
        Idempotent; never raises."""
        games = self.__dict__.get("_games") or []
        keep: list[list[PlayerEnv]] = []
        closing = []
        for game_envs in games:
            coordinator = game_envs[0].coordinator
            if coordinator.stopped:
                continue  # over, and its driver has ended: nothing to wait for
            if coordinator.done:
                closing.append(coordinator.close())
            elif any(env.driven for env in game_envs):
                keep.append(game_envs)
            else:
                closing.append(coordinator.close("the rollout ended without playing this game"))
        games[:] = keep
        if closing:
            await asyncio.gather(*closing, return_exceptions=True)

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

    async def branch_played(
        self,
        envs: Sequence[Env],
        trajectories: Sequence[Trajectory],
        policy: TokenPolicy,
        sample_timeout_s: float | None = None,
    ) -> None:
        """With ``branching``: continue the played games from some of their decision
        points and write each move's values into its transition (``arena.branching``)."""
        if self.branching is None:
            return
        seats = [env for env in envs if isinstance(env, PlayerEnv)]
        if len(seats) != len(envs):
            raise TypeError("MatchGroupBuilder branches need the PlayerEnvs it built")
        await branch_group(
            seats,
            trajectories,
            policy,
            self.branching,
            sample_timeout_s=sample_timeout_s,
        )

    def logging_tags(self) -> list[str]:
        return [self.game_id]
