"""The asyncio side of the agent protocol, under ``web.agents.agentdesk``'s sans-I/O desk.

``AgentService`` belongs to a ``WebHub`` (seen through ``AgentHost``, so that this module
does not import the hub) and does the I/O the desk asks for:

* the ``authenticate`` need (``storage.agents.authenticate``: a constant-time check; the
  token arrives as a ``Secret`` and is never logged), ``load_ratings`` (the game's stored
  ratings, for pairing) and ``forfeit`` (``GameCoordinator.forfeit``: a resignation);
* the tick (every ``agent_tick_s``): pairs the seek queue, builds each pairing's match on
  the hub's game thread (``arena.match.build_match``: a ``RemoteSeat`` per agent, a
  ``HumanSeat`` per browser person, bots and checkpoints for the fill-ins), starts it on
  the hub's bus (recorded and shown like any match), and forfeits the seats whose
  agent's grace period is over;
* the account poll (every ``agent_account_poll_s``): a revoked agent is disconnected and
  its live seats forfeit.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy.exc import SQLAlchemyError

from arena.coordinator import GameCoordinator
from arena.identity import PolicyKind, PolicyRef
from arena.match import Lineup, LiveSeat, build_match, start_session
from arena.seats import AgentSpec, BotSpec, SeatAgent, SeatTurn
from games.bots import UnknownBot, bots_for, check_bot
from games.limits import SessionLimits
from games.registry import GameUnavailable, UnknownGame, get_spec
from games.sessionerrors import GameError
from matchmaking.agents import move_clock
from matchmaking.players import player_spec
from storage.agents import authenticate, revoked_among, touch_agent
from storage.errors import AmbiguousMatchId, MatchNotFound, StorageError
from storage.queries import get_match
from storage.ratings import load_ratings, rated_flags
from web.agents.agentdesk import Account, Forfeit, PendingMatch, match_ended_frame
from web.agents.remote import RemoteSeat
from web.live.human import HumanSeat
from web.needs import Need, Secret

if TYPE_CHECKING:
    from arena.eventbus import EventBus
    from arena.gamethread import GameThread
    from storage.db import Database
    from web.connections import Client
    from web.core import HubCore
    from web.limits import ServerLimits

log = logging.getLogger("web.agents")

AGENT_NEEDS = ("authenticate", "load_ratings", "forfeit", "ended_matches")
"""The needs of the agent desk that ``AgentService.fulfil`` does."""
MOVE_CLOCK_GRACE_S = 10.0
"""How much longer than a seat's own clock the coordinator of a match from the seek queue
waits before it aborts (the seat forfeits first; this only catches a bug)."""


def check_seek_game(game_id: str, players: int | None, person: bool) -> int:
    """The seat count of a seek for ``game_id`` (``players``, else the game's smallest);
    raises ValueError with the reason when it cannot be sought here. People play two-seat
    games whose legal moves are listed (as against bots)."""
    try:
        spec = get_spec(game_id)
    except UnknownGame as exc:
        raise ValueError(str(exc)) from None
    if not spec.available:
        raise ValueError(f"{game_id} is not available here: {spec.reason}")
    count = players if players is not None else max(2, spec.min_players)
    if count < 2 or not spec.supports(count):
        if spec.max_players < 2:
            raise ValueError(f"{game_id} is a one-player game: there is no one to pair it with")
        raise ValueError(f"{game_id} takes {spec.players_text} players, not {count}")
    if person and (count != 2 or not spec.legal_moves):
        raise ValueError(
            f"{game_id} cannot be played from a browser: people play two-seat games that "
            "list their legal moves"
        )
    return count


_MODEL_KINDS = frozenset({PolicyKind.MODEL, PolicyKind.OPENAI})
_SEATED_AS_THEMSELVES = frozenset({PolicyKind.CHECKPOINT, *_MODEL_KINDS})


class FillIns:
    """The bots, stored checkpoints and models that may fill empty seats.

    ``players``: their text forms (bot names, ``run:NAME@STEP``, ``model:smollm2``,
    ``openai:BASE_URL#MODEL``); None: each game's own bots (``games.bots.bots_for``);
    empty: no fill-ins. Checkpoints and models are resolved at once
    (``matchmaking.players.player_spec``): raises BadPolicyRef, UnknownCheckpoint or
    ModelNotFound. A model sits under its recorded name (``model:smollm2@1a2b3c4d``).
    """

    def __init__(self, players: Sequence[str] | None, runs_dir: str = "runs") -> None:
        self.players = None if players is None else tuple(players)
        self.specs: dict[str, AgentSpec] = {}
        self.keys: dict[str, tuple[PolicyKind, str]] = {}
        for text in self.players or ():
            self._add(text, player_spec(text, runs_dir=runs_dir))
        self._cache: dict[tuple[str, int], list[tuple[str, PolicyKind, str]]] = {}

    def _add(self, text: str, spec: AgentSpec) -> None:
        ref = PolicyRef.parse(text)
        kind = ref.kind if ref.kind in _SEATED_AS_THEMSELVES else PolicyKind.BOT
        key = getattr(spec, "policy", ref.key) if kind in _MODEL_KINDS else ref.key
        self.specs[text] = spec
        self.keys[text] = (kind, key)

    def models(self) -> dict[str, AgentSpec]:
        """The fill-ins that are language models, by their text (``model:smollm2``): their
        weights load before play, and a person may pick them on the play page."""
        return {t: s for t, s in self.specs.items() if self.keys[t][0] in _MODEL_KINDS}

    async def preload(self) -> None:
        """Load the model fill-ins' weights now (as the server starts), not under their
        first move clock. Raises what the loader raises."""
        models = list(self.models().values())
        if models:
            from matchmaking.agents import preload

            await preload(models)

    def spec(self, player: str) -> AgentSpec:
        """The seat spec of fill-in ``player``."""
        found = self.specs.get(player)
        return found if found is not None else BotSpec(player)

    def __call__(self, game_id: str, num_players: int) -> list[tuple[str, PolicyKind, str]]:
        """(player, kind, policy key) of each fill-in that can play ``game_id``."""
        cached = self._cache.get((game_id, num_players))
        if cached is not None:
            return cached
        out: list[tuple[str, PolicyKind, str]] = []
        try:
            spec = get_spec(game_id)
        except UnknownGame:
            return out
        names = self.players if self.players is not None else tuple(bots_for(spec))
        for name in names:
            if name not in self.specs:
                if PolicyRef.parse(name).kind is not PolicyKind.BOT:
                    continue
                with contextlib.suppress(UnknownBot, ValueError):
                    check_bot(name, spec)
                    self._add(name, BotSpec(name))
            if name in self.specs:
                try:
                    self.specs[name].check(game_id)
                except (UnknownBot, ValueError):
                    continue
                kind, key = self.keys[name]
                out.append((name, kind, key))
        self._cache[(game_id, num_players)] = out
        return out


class RunningMatches(Protocol):
    """The matches a hub runs itself, each held until the task that waits for its end is
    done (``web.hub.LiveMatches``)."""

    def add(self, match_id: str, coordinator: GameCoordinator, task: asyncio.Task[Any]) -> None:
        """Hold a running match until ``task`` ends."""
        ...

    def get(self, match_id: str) -> GameCoordinator | None:
        """The running match's coordinator, or None."""
        ...


class MatchHost(Protocol):
    """What the hub's match services (``AgentService``, ``web.live.browserhub.BrowserMatches``)
    need of the web hub they serve (``web.hub.WebHub``): its sans-I/O core, bus, limits and
    game thread, the matches it runs, and the prompt it sends a person. The hub imports
    this module; this module never imports it."""

    @property
    def bus(self) -> EventBus:
        """The bus its matches publish to."""
        ...

    @property
    def limits(self) -> ServerLimits:
        """The server's limits."""
        ...

    @property
    def game_limits(self) -> SessionLimits | None:
        """The session limits of the matches it starts."""
        ...

    @property
    def game_thread(self) -> GameThread:
        """The thread that touches its games."""
        ...

    @property
    def core(self) -> HubCore:
        """The sans-I/O core (its ``agents`` desk, its stats)."""
        ...

    @property
    def matches(self) -> RunningMatches:
        """The matches it runs itself."""
        ...

    def human_prompt(self, match_id: str, seat: int, turn: SeatTurn, deadline: float) -> None:
        """A person in a browser seat must move: tell them."""
        ...


class AgentHost(MatchHost, Protocol):
    """What ``AgentService`` needs beyond a ``MatchHost``: the database, and the I/O it
    does for the core."""

    @property
    def db(self) -> Database | None:
        """The database (None: none)."""
        ...

    def flush(self) -> None:
        """Write the frames the core produced to their clients."""
        ...

    def pump(self) -> None:
        """Hand the core every event already queued on the bus, now."""
        ...

    async def close_client(self, client: Client, code: int, reason: str) -> None:
        """Close ``client``'s connection with ``code`` and ``reason``."""
        ...


class AgentService:
    """The agent protocol's I/O for ``hub`` (see the module's docstring)."""

    def __init__(self, hub: AgentHost, fill_ins: FillIns) -> None:
        self.hub = hub
        self.fill_ins = fill_ins
        self._tasks: list[asyncio.Task[None]] = []
        self._building: set[asyncio.Task[None]] = set()

    @property
    def desk(self) -> Any:
        """The hub's ``AgentDesk``."""
        return self.hub.core.agents

    def start(self) -> None:
        """Start the tick and the account poll (needs a running loop)."""
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._tick_loop(), name="web-agents-tick"))
        self._tasks.append(loop.create_task(self._poll_loop(), name="web-agents-accounts"))

    async def close(self) -> None:
        """Stop the loops and the matches being built."""
        tasks = [*self._tasks, *self._building]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task

    # -- needs ---------------------------------------------------------------------------
    async def fulfil(self, need: Need) -> Any:
        """Do an agent need (``authenticate``, ``load_ratings``, ``forfeit``); the result or
        the exception it raised."""
        db = self.hub.db
        try:
            if need.kind == "authenticate":
                if db is None:
                    return StorageError("no database")
                token = need.args["token"]
                info = await authenticate(db, token.reveal() if isinstance(token, Secret) else "")
                if info is None:
                    log.info("refused an agent authentication")  # never the token
                    return None
                if not db.read_only:
                    self._background(self._touch(info.name))
                return Account(info.name)
            if need.kind == "load_ratings":
                if db is None:
                    return {}
                rows = await load_ratings(db, need.args["game"])
                return {r.policy: (r.mu, r.sigma, r.games) for r in rows}
            if need.kind == "ended_matches":
                if db is None:
                    return {}
                return await self._ended_matches(db, need.args["account"], need.args["ids"])
            if need.kind == "forfeit":
                forfeit: Forfeit = need.args["forfeit"]
                if not self._forfeit(forfeit):
                    return LookupError("the match is over")
                return True
        except StorageError as exc:
            return exc
        except (SQLAlchemyError, OSError) as exc:
            return db.error(exc) if db is not None else StorageError(str(exc))
        raise RuntimeError(f"the agent desk asked for {need.kind!r}, which it cannot do")

    async def _ended_matches(
        self, db: Any, account: str, ids: Sequence[str]
    ) -> dict[str, list[dict[str, Any]]]:
        """The ``match_ended`` frame of each seat ``account`` played in each stored match of
        ``ids`` that is over (a match not stored, live, or without its seat: none)."""
        out: dict[str, list[dict[str, Any]]] = {}
        flags = await rated_flags(db, ids)
        for match_id in ids:
            try:
                detail = await get_match(db, match_id)
            except (MatchNotFound, AmbiguousMatchId):
                continue
            summary = detail.match
            if summary.id != match_id or summary.status == "live":
                continue
            aborted = summary.status == "aborted"
            rewards = None if aborted else [s.reward or 0.0 for s in summary.seats]
            forfeited = [s.seat for s in summary.seats if s.forfeited]
            out[match_id] = [
                match_ended_frame(
                    match_id,
                    s.seat,
                    summary.status,
                    summary.reason,
                    rewards,
                    forfeited,
                    flags.get(match_id, False),
                )
                for s in summary.seats
                if s.policy == account
            ]
        return out

    async def _touch(self, name: str) -> None:
        db = self.hub.db
        if db is not None:
            with contextlib.suppress(SQLAlchemyError, StorageError, OSError):
                await touch_agent(db, name)

    def _background(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._building.add(task)
        task.add_done_callback(self._building.discard)

    def _forfeit(self, forfeit: Forfeit) -> bool:
        coordinator = self.hub.matches.get(forfeit.match_id)
        if coordinator is None or coordinator.done:
            return False
        log.info(
            "match %s: seat %d forfeits: %s", forfeit.match_id[:8], forfeit.seat, forfeit.reason
        )
        coordinator.forfeit(forfeit.seat, forfeit.reason)
        return True

    # -- periodic work -------------------------------------------------------------------
    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(self.hub.limits.agent_tick_s)
            try:
                self.tick()
            except Exception:  # a bug: log it, keep pairing
                log.exception("the agent tick failed")
            self.hub.flush()

    def tick(self) -> None:
        """Pair the queue, start what was paired, forfeit what must forfeit."""
        work = self.desk.tick()
        for pending in work.start:
            self._background(self._start(pending))
        for forfeit in work.forfeits:
            self._forfeit(forfeit)

    async def _poll_loop(self) -> None:
        while True:
            await asyncio.sleep(self.hub.limits.agent_account_poll_s)
            try:
                await self.poll_accounts()
            except (SQLAlchemyError, StorageError, OSError) as exc:
                log.warning("cannot check the agents' accounts now: %s", exc)
            except Exception:
                log.exception("the agent account poll failed")

    async def poll_accounts(self) -> None:
        """Disconnect the revoked agents and forfeit their live seats."""
        db = self.hub.db
        desk = self.desk
        names = {*desk.online(), *(s.account.name for s in desk.seats.values())}
        if db is None or not names:
            return
        gone = await revoked_among(db, names)
        if not gone:
            return
        closes, forfeits = desk.revoked(gone)
        self.hub.flush()
        for forfeit in forfeits:
            self._forfeit(forfeit)
        for client, close in closes:
            self._background(self.hub.close_client(client, close.code, close.reason))

    # -- matches from the seek queue -----------------------------------------------------
    async def _start(self, pending: PendingMatch) -> None:
        hub = self.hub
        limits = hub.limits
        match_id = pending.match_id
        players: list[AgentSpec] = []
        seated: dict[int, SeatAgent] = {}
        for plan in pending.seats:
            if plan.kind is PolicyKind.AGENT:
                players.append(LiveSeat(plan.player))
                seated[plan.seat] = RemoteSeat(
                    plan.seat,
                    timeout_s=limits.agent_move_timeout_s,
                    on_prompt=functools.partial(self._agent_prompt, match_id, plan.seat),
                    name=plan.player,
                )
            elif plan.kind is PolicyKind.HUMAN:
                players.append(LiveSeat(plan.player))
                seated[plan.seat] = HumanSeat(
                    plan.seat,
                    timeout_s=limits.human_move_timeout_s,
                    on_prompt=functools.partial(hub.human_prompt, match_id, plan.seat),
                    name=plan.player,
                )
            else:
                players.append(self.fill_ins.spec(plan.player))
        lineup = Lineup(pending.game_id, tuple(players), seed=pending.pairing.seed)
        clock = move_clock(
            players,
            max(limits.agent_move_timeout_s, limits.human_move_timeout_s) + MOVE_CLOCK_GRACE_S,
        )
        try:
            session = await hub.game_thread.run(
                functools.partial(
                    start_session,
                    lineup,
                    dataclasses.replace(hub.game_limits or SessionLimits(), move_timeout_s=clock),
                )
            )
            coordinator = build_match(
                lineup,
                bus=hub.bus,
                session=session,
                seated=seated,
                match_id=match_id,
                game_thread=hub.game_thread,
                rated=pending.pairing.rated,
            )
        except (GameError, ValueError, UnknownGame, GameUnavailable, UnknownBot) as exc:
            log.warning(
                "a match of %s from the seek queue failed to start: %s", pending.game_id, exc
            )
            self.desk.failed(pending, str(exc))
            hub.flush()
            return
        handles = {s: a for s, a in seated.items() if isinstance(a, HumanSeat)}
        self.desk.started(pending, coordinator.players, handles)
        hub.core.stats.seek_matches += 1
        hub.flush()
        coordinator.start()
        task = asyncio.get_running_loop().create_task(
            coordinator.wait_done(), name=f"web-seek-{match_id[:8]}"
        )
        hub.matches.add(match_id, coordinator, task)
        task.add_done_callback(functools.partial(self._ended, match_id, coordinator))

    def _agent_prompt(self, match_id: str, seat: int, turn: SeatTurn, deadline: float) -> None:
        self.hub.pump()  # the turns before this prompt reach spectators first
        self.desk.prompt(match_id, seat, turn, deadline)
        self.hub.flush()

    def _ended(self, match_id: str, coordinator: GameCoordinator, _task: Any) -> None:
        outcome = coordinator.outcome
        if outcome is None:
            return
        status = outcome.status.value
        n = coordinator.session.num_players
        rewards = None if status == "aborted" else [outcome.rewards.get(s, 0.0) for s in range(n)]
        self.desk.match_over(match_id, status, outcome.reason, rewards, sorted(outcome.forfeited))
        self.hub.flush()
