"""Line-ups, and the one place a match is built from one.

A ``Lineup`` says who sits where (a player spec per seat: a bot (``BotSpec``), a checkpoint
(``matchmaking.agents.ModelSeat``), any ``arena.coordinator.AgentSpec``; a ``LearnerSeat``
for a seat the learner's env plays; a ``LiveSeat`` for a live agent handed over when the
match is built: a remote agent, a person in a browser) and the match seed. ``build_match``
makes the game and its coordinator.

One seeding rule: the game is reset with the match seed (or with ``Lineup.game_seed`` where
one is given: a training group's shared deal; the match then records that seed, the one
that replays its deal), and the agent of seat ``s`` is seeded with
``seat_seed(match_seed, s)``. ``arena play``, the trainer's groups
(``MatchGroupBuilder``), evaluation, tournaments, browser matches and the seek queue's
matches are all built here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from arena.coordinator import GameCoordinator
from arena.eventbus import EventBus
from arena.gamethread import GameThread
from arena.renderers import OBSERVATION_FORMATS, ObservationFormat, RendererConfig
from arena.seats import AgentSpec, SeatAgent
from games import make as make_game
from games.limits import SessionLimits
from games.registry import GameUnavailable, check_players, get_spec
from games.session import GameSession


@dataclass(frozen=True)
class MatchSettings:
    """How the games of a run, an evaluation or a command are played: one frozen value,
    built once (``TrainConfig.match_settings``, the commands' options) and carried whole by
    the dataset, the group builder, evaluation, the cookbook adapter and ``arena play``.
    Who sits where and the seeds are a ``Lineup``'s, per match.

    Raises UnknownGame or ValueError for a game, player count or format that cannot be
    played (at construction, so a bad value never travels)."""

    game_id: str
    num_players: int = 2
    limits: SessionLimits = field(default_factory=SessionLimits)
    """Every limit and clock of a match (``games.limits.SessionLimits``)."""
    renderer: RendererConfig = field(default_factory=RendererConfig)
    """How a learner seat's prompts are rendered into tokens."""
    observation_format: ObservationFormat = "full"
    """What a learner seat is shown each turn (``arena.renderers.OBSERVATION_FORMATS``)."""

    @classmethod
    def of(cls, value: MatchSettings | str) -> MatchSettings:
        """``value`` itself, or for a game id that game with the default settings."""
        return cls(value) if isinstance(value, str) else value

    def __post_init__(self) -> None:
        check_players(get_spec(self.game_id), self.num_players)
        if self.observation_format not in OBSERVATION_FORMATS:
            raise ValueError(
                f"unknown observation format {self.observation_format!r}; "
                f"choose from {OBSERVATION_FORMATS}"
            )


def seat_seed(match_seed: int, seat: int) -> int:
    """The seed of one seat's randomness (a bot's, a sampler's) in a match."""
    return match_seed * 101 + seat


@dataclass(frozen=True)
class LearnerSeat:
    """A seat the learner plays through its ``PlayerEnv`` (the coordinator's learner
    seats): it has no agent."""

    player: str = "learner"
    """What matches record for the seat (the learner's policy name)."""

    @property
    def name(self) -> str:
        """The recorded player."""
        return self.player

    def check(self, game_id: str) -> None:
        """The learner may play any seat: nothing to check."""

    def build(self, seat: int, game_id: str, seed: int) -> SeatAgent:
        """Never built: its env drives the seat."""
        raise ValueError(f"seat {seat} is the learner's: its env plays it")


@dataclass(frozen=True)
class LiveSeat:
    """A seat played by a live agent handed to ``build_match`` (``seated``): a remote
    agent, a person. Only its name is configuration."""

    player: str
    """What matches record for the seat (``agent:NAME``, ``human``)."""

    @property
    def name(self) -> str:
        """The recorded player."""
        return self.player

    def check(self, game_id: str) -> None:
        """Anyone may sit in any game: nothing to check."""

    def build(self, seat: int, game_id: str, seed: int) -> SeatAgent:
        """Not built from configuration: ``build_match`` takes the live agent."""
        raise ValueError(f"seat {seat} ({self.player}) is played live: pass it as seated")


@dataclass(frozen=True)
class Lineup:
    """Who sits where in one match, and its seed."""

    game_id: str
    players: tuple[AgentSpec, ...]
    seed: int = 0
    game_seed: int | None = None
    """The seed the game is reset with (its deal: cards, prize order, values); None:
    ``seed``. The seats' randomness always comes from ``seed`` (``seat_seed``), so games
    dealt alike can still be played differently."""

    @property
    def deal(self) -> int:
        """The seed the game is reset with."""
        return self.seed if self.game_seed is None else self.game_seed

    def check(self) -> None:
        """Raise UnknownGame, GameUnavailable, ValueError or UnknownBot for a bad line-up."""
        spec = get_spec(self.game_id)
        if not spec.available:
            raise GameUnavailable(f"{self.game_id} is not available here: {spec.reason}")
        check_players(spec, len(self.players))
        for player in self.players:
            player.check(self.game_id)


def start_session(lineup: Lineup, limits: SessionLimits | None = None) -> GameSession:
    """The started game of ``lineup`` (blocking: up to the reset limit; a server runs it on
    its game thread). Raises GameError when the game fails to start."""
    return make_game(lineup.game_id, len(lineup.players), lineup.deal, limits)


def build_match(
    lineup: Lineup,
    *,
    bus: EventBus | None = None,
    limits: SessionLimits | None = None,
    group_id: str | None = None,
    run_id: str | None = None,
    session: GameSession | None = None,
    seated: Mapping[int, SeatAgent] | None = None,
    match_id: str | None = None,
    game_thread: GameThread | None = None,
    rated: bool = True,
    wrap: Callable[[int, SeatAgent], SeatAgent] | None = None,
) -> GameCoordinator:
    """The match ``lineup`` describes, ready to ``wait_done()`` (or, with learner seats,
    for their envs). Raises GameError when the game fails to start.

    ``limits``: the match's limits and clocks (None: the defaults); with ``session``, the
    session's own. ``session``: the game, already made (``start_session``; a server makes
    it on its game thread). ``seated``: live agents for the ``LiveSeat``s. ``game_thread``:
    run every call into the game there (``GameCoordinator``). ``rated``: False for a casual
    match (stored, never rated). ``wrap``: applied to each built agent (``arena play
    --watch`` paces its bots).
    """
    if session is None:
        session = start_session(lineup, limits)
    live = dict(seated or {})
    agents: dict[int, SeatAgent] = {}
    for seat, player in enumerate(lineup.players):
        if isinstance(player, LearnerSeat):
            continue
        if seat in live:
            agents[seat] = live[seat]
            continue
        agent = player.build(seat, lineup.game_id, seat_seed(lineup.seed, seat))
        agents[seat] = wrap(seat, agent) if wrap is not None else agent
    return GameCoordinator(
        session,
        agents,
        bus=bus,
        match_id=match_id,
        players=[player.name for player in lineup.players],
        group_id=group_id,
        run_id=run_id,
        game_thread=game_thread,
        rated=rated,
    )
