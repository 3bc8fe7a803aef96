"""Line-ups, and the one place a match between agents is built from one.

A ``Lineup`` says who sits where (a player spec per seat: a bot, a checkpoint, any
``arena.coordinator.AgentSpec``) and the seed; ``build_match`` makes the game and its
coordinator, seeding each seat's randomness from the match seed. ``arena play``,
tournaments and the browser's matches go through it; the trainer's groups do the same per
seat through ``MatchGroupBuilder`` (``AgentSpec.build``).

``player_spec`` reads a player from its text form: a bot name, or ``run:NAME@STEP`` for a
stored checkpoint (looked up in the run's ``checkpoints.jsonl``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from arena.coordinator import AgentSpec, BotSpec, GameCoordinator, SeatAgent, agent_spec
from arena.events import EventBus
from arena.gamethread import GameThread
from arena.identity import PolicyKind, PolicyRef
from games import make as make_game
from games.registry import GameUnavailable, check_players, get_spec
from games.session import GameSession, SessionLimits


@dataclass(frozen=True)
class Lineup:
    """Who sits where in one match, and its seed."""

    game_id: str
    players: tuple[AgentSpec, ...]
    seed: int = 0

    def check(self) -> None:
        """Raise UnknownGame, GameUnavailable, ValueError or UnknownBot for a bad line-up."""
        spec = get_spec(self.game_id)
        if not spec.available:
            raise GameUnavailable(f"{self.game_id} is not available here: {spec.reason}")
        check_players(spec, len(self.players))
        for player in self.players:
            player.check(self.game_id)


def seat_seed(match_seed: int, seat: int) -> int:
    """The seed of one seat's randomness (bots, samplers) in a match."""
    return match_seed * 101 + seat


def build_match(
    lineup: Lineup,
    *,
    bus: EventBus | None = None,
    limits: SessionLimits | None = None,
    move_timeout_s: float | None = 60.0,
    group_id: str | None = None,
    run_id: str | None = None,
    session: GameSession | None = None,
    seated: Mapping[int, SeatAgent] | None = None,
    match_id: str | None = None,
    game_thread: GameThread | None = None,
    rated: bool = True,
) -> GameCoordinator:
    """The match ``lineup`` describes, ready to ``wait_done()``. Raises GameError when the
    game fails to start.

    ``session``: the game, already made (``start_session``; a server makes it on its game
    thread). ``seated``: live agents for some seats (a remote agent, a person in a
    browser), which the line-up names with ``LiveSeat``s. ``game_thread``: run every call
    into the game there (``GameCoordinator``). ``rated``: False for a casual match
    (stored, never rated).
    """
    if session is None:
        session = start_session(lineup, limits)
    live = dict(seated or {})
    agents = {
        seat: live[seat]
        if seat in live
        else player.build(seat, lineup.game_id, seat_seed(lineup.seed, seat))
        for seat, player in enumerate(lineup.players)
    }
    return GameCoordinator(
        session,
        agents,
        bus=bus,
        match_id=match_id,
        move_timeout_s=move_timeout_s,
        players=[lineup.players[seat].name for seat in range(len(lineup.players))],
        group_id=group_id,
        run_id=run_id,
        game_thread=game_thread,
        rated=rated,
    )


def start_session(lineup: Lineup, limits: SessionLimits | None = None) -> GameSession:
    """The started game of ``lineup`` (blocking: up to the reset limit; a server runs it on
    its game thread). Raises GameError when the game fails to start."""
    return make_game(lineup.game_id, len(lineup.players), lineup.seed, limits)


@dataclass(frozen=True)
class LiveSeat:
    """A seat of a line-up played by a live agent handed to ``build_match`` (``seated``):
    a remote agent, a person. Only its name is configuration."""

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


def player_spec(
    text: str | AgentSpec,
    *,
    runs_dir: str | Path = "runs",
    log_dirs: list[str] | None = None,
    temperature: float = 1.0,
) -> AgentSpec:
    """A player from its text form: a bot name (``random``) or a stored checkpoint
    (``run:NAME@STEP``). Raises BadPolicyRef or UnknownCheckpoint with what exists."""
    if not isinstance(text, str):
        return text
    policy = PolicyRef.parse(text)
    if policy.kind is PolicyKind.BOT:
        return BotSpec(policy.name)
    if policy.kind is PolicyKind.CHECKPOINT:
        # Imported here: a checkpoint seat needs the model stack (tinker, torch), a server
        # of bots and remote agents does not load it.
        from matchmaking.agents import resolve_checkpoint

        info = resolve_checkpoint(policy, runs_dir=runs_dir, log_dirs=log_dirs)
        return info.seat(temperature=temperature)
    raise ValueError(f"{policy.key} cannot be seated here: give a bot or run:NAME@STEP")


def player_specs(texts: Sequence[str | AgentSpec], **kwargs: object) -> tuple[AgentSpec, ...]:
    """``player_spec`` for each player (see there)."""
    return tuple(agent_spec(player_spec(t, **kwargs)) for t in texts)  # type: ignore[arg-type]
