"""What a match tells its event bus: its start, each turn (and invalid move), the progress
of a simultaneous round, its end.

Nothing is built while nobody listens (``listened``): a match without subscribers pays for
no event. A turn is published as the coordinator has it; the observation is rendered, and
the boards decoded, only if a subscriber asks (``arena.events.TurnPlayed``).
"""

from __future__ import annotations

from collections.abc import Sequence

from arena.eventbus import EventBus
from arena.events import (
    InvalidMove,
    MatchAborted,
    MatchEnded,
    MatchStarted,
    RoundProgress,
    TurnPlayed,
)
from arena.seats import SeatTurn
from games.session import GameSession, Outcome, Status
from games.sessionviews import SpectatorViews
from games.turnrecord import TurnRecord

_NO_VIEWS = SpectatorViews(None, None, None)
"""What a match announced before its first view was read shows (it ended at once)."""


class MatchPublisher:
    """Publishes one match's events on ``bus`` (nothing without one)."""

    def __init__(
        self,
        bus: EventBus | None,
        session: GameSession,
        match_id: str,
        players: tuple[str, ...],
        *,
        group_id: str | None,
        run_id: str | None,
        rated: bool,
    ) -> None:
        self.bus = bus
        self.session = session
        self.match_id = match_id
        self.players = players
        self.group_id = group_id
        self.run_id = run_id
        self.rated = rated
        self.announced = False
        """The start was announced (or passed over while nobody listened)."""

    @property
    def listened(self) -> bool:
        """Someone subscribes to the bus: events are worth building."""
        return self.bus is not None and self.bus.has_subscribers

    def publish(self, event: object) -> None:
        """Publish ``event`` (never blocks)."""
        if self.bus is not None:
            self.bus.publish(event)  # type: ignore[arg-type]

    def announce(self, views: SpectatorViews | None) -> None:
        """``MatchStarted``, once (``views``: the game as it starts; None: not read)."""
        if self.announced:
            return
        self.announced = True
        if self.listened:
            views = views or _NO_VIEWS
            session = self.session
            self.publish(
                MatchStarted(
                    match_id=self.match_id,
                    game_id=session.game_id,
                    seed=session.seed,
                    num_players=session.num_players,
                    players=self.players,
                    group_id=self.group_id,
                    run_id=self.run_id,
                    public_state=views.public_state,
                    board=views.board,
                    full_board=views.full_board,
                    rated=self.rated,
                    messages=session.start_messages,
                )
            )

    def progress(self, number: int, movers: tuple[int, ...], moved: tuple[int, ...]) -> None:
        """Who of a simultaneous round's ``movers`` has ``moved`` (never what)."""
        if self.listened:
            self.publish(RoundProgress(self.match_id, number, movers, moved))

    def turn(
        self,
        record: TurnRecord,
        turn: SeatTurn,
        tokens: Sequence[int] | None,
        logprobs: Sequence[float] | None,
        elapsed: float,
        views: SpectatorViews,
    ) -> None:
        """``TurnPlayed`` for the move ``record`` (the answer to ``turn``, sampled as
        ``tokens`` with ``logprobs``, taking ``elapsed`` seconds), and ``InvalidMove`` when
        it was not valid."""
        self.publish(
            TurnPlayed.of(
                self.match_id,
                record,
                tokens=tokens,
                logprobs=logprobs,
                elapsed_s=elapsed,
                public_state=views.public_state,
                seen=turn.messages[turn.new_from :],
                legal_moves=turn.legal_moves,
                board_text=views.board_text,
                full_board_text=views.full_board_text,
            )
        )
        if not record.valid:
            self.publish(
                InvalidMove(
                    match_id=self.match_id,
                    index=record.index,
                    seat=record.seat,
                    action=record.action,
                    reason=record.reason,
                )
            )

    def end(self, outcome: Outcome, full_state: str | None) -> None:
        """``MatchAborted`` or ``MatchEnded`` (announcing the start first if it never was)."""
        if not self.listened:
            return
        if not self.announced:
            self.announce(None)
        session = self.session
        if outcome.status is Status.ABORTED:
            self.publish(
                MatchAborted(
                    match_id=self.match_id,
                    reason=outcome.reason,
                    num_turns=len(session.turns),
                )
            )
        else:
            self.publish(
                MatchEnded(
                    match_id=self.match_id,
                    status=outcome.status.value,
                    rewards=tuple(outcome.rewards[s] for s in range(session.num_players)),
                    invalid_moves=tuple(session.invalid_moves),
                    forfeited=tuple(sorted(outcome.forfeited)),
                    reason=outcome.reason,
                    num_turns=len(session.turns),
                    full_state=full_state,
                )
            )
