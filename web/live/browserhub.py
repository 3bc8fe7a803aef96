"""The asyncio side of browser matches, under ``web.live.browserseats``' sans-I/O seats.

``BrowserMatches`` belongs to a ``WebHub`` (seen through ``web.agents.agenthub.MatchHost``,
so that this module does not import the hub): it lists the games a person can play (each
with its bots, the stored checkpoints of its runs and the server's model fill-ins), checks a
person's choice of game and opponent, and starts a match against that opponent: the game
built on the hub's game thread, never on its event loop (``arena.gamethread``), a
``HumanSeat`` for the person.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import secrets
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from arena.identity import PolicyKind, PolicyRef
from arena.match import Lineup, LiveSeat, build_match, start_session
from arena.play import validate_players
from arena.seats import AgentSpec, BotSpec, SeatTurn
from games.bots import UnknownBot, bots_for
from games.limits import SessionLimits
from games.registry import GameUnavailable, UnknownGame, catalogue, get_spec
from games.sessionerrors import GameError
from matchmaking.agents import move_clock
from matchmaking.players import player_spec
from storage.rundir import find_run
from web.core import StartedMatch
from web.live.human import HUMAN_PLAYER, HumanSeat
from web.pages.checkpoints import StoredCheckpoints
from web.protocol import ProtocolError

if TYPE_CHECKING:
    from web.agents.agenthub import MatchHost

HUMAN_GRACE_S = 10.0
"""How much longer than a browser seat's own deadline its coordinator waits before it
aborts the match (the seat forfeits first; this only catches a bug)."""


class BrowserMatches:
    """Browser matches against a bot or a stored checkpoint, for ``hub`` (see the module's
    docstring); checkpoints are found under ``runs_dir``."""

    def __init__(
        self,
        hub: MatchHost,
        runs_dir: str = "runs",
        models: Mapping[str, AgentSpec] | None = None,
    ) -> None:
        self.hub = hub
        self.runs_dir = runs_dir
        self.models = dict(models or {})
        """The language models a person may play (the server's model fill-ins), by their
        text (``model:smollm2``)."""
        self.checkpoints = StoredCheckpoints(runs_dir)
        """The stored checkpoints a person may play (``/api/games``, ``start``)."""
        self._games_cache: list[dict[str, Any]] | None = None

    def games(self) -> list[dict[str, Any]]:
        """The games a person can play here, each with its bots and the stored
        checkpoints of its runs (read afresh: runs save new ones as they train)."""
        if self._games_cache is None:
            games = []
            for spec in catalogue(available_only=True):
                if not spec.supports(2) or not spec.legal_moves:
                    continue
                bots = bots_for(spec)  # the game's own bots, and random where it can play
                if bots:
                    games.append(
                        {
                            "id": spec.game_id,
                            "bots": bots,
                            "hidden_information": spec.hidden_information,
                            "simultaneous": spec.simultaneous,
                            "description": spec.description,
                        }
                    )
            self._games_cache = games
        stored = self.checkpoints.by_game()
        models = list(self.models)
        return [
            {**g, "checkpoints": stored.get(str(g["id"]), []), "models": models}
            for g in self._games_cache
        ]

    def opponent(self, game_id: str, opponent: str) -> AgentSpec:
        """The seat spec of a browser match's ``opponent``: a bot, or a stored checkpoint
        of a run of ``game_id`` under ``runs_dir`` (``run:NAME@STEP``). Raises ValueError
        (UnknownBot, BadPolicyRef, UnknownCheckpoint) with the reason."""
        ref = PolicyRef.parse(opponent)
        if ref.kind is PolicyKind.CHECKPOINT:
            run = find_run(ref.name, self.runs_dir)
            trains = run.games if run is not None else ()
            if trains and game_id not in trains:
                raise ValueError(f"{opponent} was trained on {', '.join(trains)}, not {game_id}")
            return player_spec(opponent, runs_dir=self.runs_dir)
        if ref.kind in (PolicyKind.MODEL, PolicyKind.OPENAI):
            found = self.models.get(opponent.strip())
            if found is None:
                offered = ", ".join(self.models) or "none"
                raise ValueError(
                    f"{opponent} is not offered here (the server's models: {offered}; "
                    "arena serve --fill model:NAME adds one)"
                )
            return found
        if ref.kind is not PolicyKind.BOT:
            raise ValueError(
                f"{opponent} cannot play here: give a bot, run:NAME@STEP or a model the "
                "server offers"
            )
        return BotSpec(ref.name)

    def check_game(self, game_id: str, opponent: str) -> None:
        """Raise ValueError (with the reason) unless a person can play ``game_id`` against
        ``opponent`` (a bot, or ``run:NAME@STEP``) here."""
        try:
            spec = get_spec(game_id)
            if not spec.supports(2):
                raise ValueError(f"{game_id} is not a two-player game")
            other = self.opponent(game_id, opponent)
            validate_players(game_id, [other, other])
        except (UnknownGame, GameUnavailable, UnknownBot) as exc:
            raise ValueError(str(exc)) from None

    async def start(self, game_id: str, opponent: str, seat: int) -> StartedMatch:
        """Build the game on the game thread and start the match; return once the match
        is announced and the person is asked to move (or it is over). Raises
        ProtocolError ``bad_game`` when the game fails to start."""
        hub = self.hub
        try:
            other = self.opponent(game_id, opponent)
        except ValueError as exc:  # checked before; a run folder may have changed since
            raise ProtocolError("bad_game", f"{game_id} failed to start: {exc}") from None
        players: list[AgentSpec] = [other, other]
        players[seat] = LiveSeat(HUMAN_PLAYER)
        lineup = Lineup(game_id, tuple(players), secrets.randbelow(2**31))
        clock = move_clock(players, hub.limits.human_move_timeout_s + HUMAN_GRACE_S)
        limits = dataclasses.replace(hub.game_limits or SessionLimits(), move_timeout_s=clock)
        try:
            session = await hub.game_thread.run(functools.partial(start_session, lineup, limits))
        except (GameError, ValueError, UnknownGame, GameUnavailable) as exc:
            raise ProtocolError("bad_game", f"{game_id} failed to start: {exc}") from None
        match_id = uuid.uuid4().hex
        asked: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def on_prompt(turn: SeatTurn, deadline: float) -> None:
            hub.human_prompt(match_id, seat, turn, deadline)
            if not asked.done():
                asked.set_result(None)

        human = HumanSeat(seat, timeout_s=hub.limits.human_move_timeout_s, on_prompt=on_prompt)
        coordinator = build_match(
            lineup,
            bus=hub.bus,
            session=session,
            seated={seat: human},
            match_id=match_id,
            game_thread=hub.game_thread,
        )
        hub.core.human_match_starting(match_id, (seat,))
        coordinator.start()
        task = asyncio.get_running_loop().create_task(
            coordinator.wait_done(), name=f"web-human-{match_id[:8]}"
        )
        hub.matches.add(match_id, coordinator, task)
        # Answer once the match is announced and the person is asked to move (or it is
        # over): a subscription right after the answer then finds it, with its prompt.
        await asyncio.wait({asked, task}, return_when=asyncio.FIRST_COMPLETED)
        return StartedMatch(match_id, human, lambda: coordinator.done)
