"""The recorder's planning (no I/O): which rows a batch of bus events turns into, the
state of the matches being recorded, and which matches are lost when events are.

A :class:`RecordPlanner` turns each batch into a :class:`Plan`: matches and seats to
insert, turn blocks (``storage.turnlog``) to append, ends to update, runs and policies to
create. Planning moves the live matches' counters forward; a plan that is not written
takes them back (``Plan.undo_counts``), and the planner's own state is saved and restored
around a write (``snapshot``/``restore``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from arena.eventformat import board_json
from arena.events import InvalidMove, MatchAborted, MatchEnded, MatchEvent, MatchStarted, TurnPlayed
from arena.identity import PolicyKind, checkpoint_of
from storage.models import MatchStatus
from storage.turnlog import MAX_BLOCK_TURNS, Block

log = logging.getLogger("storage.recorder")

LOST_EVENTS_REASON = "the recorder fell behind and lost this match's events"
FAILED_WRITE_REASON = "the recorder could not store this match's events"

# Plain strings: looking up enum members per event costs more than the rest of planning.
_LIVE, _ABORTED = MatchStatus.LIVE.value, MatchStatus.ABORTED.value
_LEARNER = PolicyKind.LEARNER.value

PolicyKey = tuple[str, str, str | None]
"""A seat's policy before it has a row: (kind, name, run id)."""


@dataclass(slots=True)
class LiveMatch:
    """A match being recorded: moves and invalid moves per seat so far."""

    num_players: int
    moves: list[int]
    invalid: list[int]
    next_seq: int = 0
    """The number its next turn block gets."""
    next_index: int = 0
    """The lowest index its next turn may have (indexes only go up)."""
    game_id: str = ""


class Gap:
    """Marks, in the event stream, where events were lost."""


GAP = Gap()

Queued = MatchEvent | Gap
"""What the recorder's writer takes in: an event, or the mark of a gap."""


class Unstorable(Exception):
    """An event that cannot be stored as it is (a turn index that went back); the
    batch is split until it is found, and its match is stored aborted."""


@dataclass
class Plan:
    """The rows one batch of events turns into, in write order."""

    runs: dict[str, float] = field(default_factory=dict)
    """Runs to create (id -> first seen)."""
    matches: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Matches that started in this batch (inserted as they stand at its end)."""
    seats: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Their seats; ``policy_id`` holds the policy key until it is resolved."""
    blocks: list[Block] = field(default_factory=list)
    """New turn blocks (``storage.turnlog``), in order."""
    open_blocks: dict[str, Block] = field(default_factory=dict)
    """The block of each match that the batch's next turns of it go to."""
    turns: int = 0
    """Turns in those blocks."""
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    """The blocks as rows, in ``storage.recordwrite.BLOCK_COLUMNS`` order, once encoded
    (the dictionary id of a dictionary made in this batch is filled in by the commit)."""
    new_dictionaries: dict[str, bytes] = field(default_factory=dict)
    """Dictionaries to store with this batch, by game."""
    ends: list[dict[str, Any]] = field(default_factory=list)
    """Ends of matches that started in an earlier batch (updates)."""
    seat_ends: list[dict[str, Any]] = field(default_factory=list)
    events: int = 0
    ended: int = 0
    ignored: int = 0
    lost: int = 0
    """Matches whose events a gap lost."""
    counted: list[tuple[LiveMatch, int, bool]] = field(default_factory=list)
    """Moves counted into live matches (undone if the batch is not written)."""
    numbered: dict[int, tuple[LiveMatch, int, int]] = field(default_factory=dict)
    """Live matches whose next block number or turn index this plan moved, and what they
    were (by ``id`` of the match's state)."""

    def undo_counts(self) -> None:
        """Take back the moves and block numbers this plan counted."""
        for state, seat, valid in reversed(self.counted):
            state.moves[seat] -= 1
            if not valid:
                state.invalid[seat] -= 1
        self.counted.clear()
        for state, seq, index in self.numbered.values():
            state.next_seq, state.next_index = seq, index
        self.numbered.clear()

    def touch(self, state: LiveMatch) -> None:
        """Keep what ``undo_counts`` restores of ``state``, before it first changes."""
        if id(state) not in self.numbered:
            self.numbered[id(state)] = (state, state.next_seq, state.next_index)

    def new_block(self, state: LiveMatch, match_id: str, first: int) -> Block:
        """Open the match's next block, at turn index ``first``."""
        self.touch(state)
        block = Block(match_id, state.next_seq, first, state.game_id)
        state.next_seq += 1
        self.blocks.append(block)
        self.open_blocks[match_id] = block
        return block


Snapshot = tuple[dict[str, LiveMatch], set[str], dict[str, str]]
"""The planner's state before a write: live matches, lost ones, matches to mark aborted."""


class RecordPlanner:
    """Plans each batch against the matches being recorded. ``policy_kind`` maps a seat's
    player name to its policy kind."""

    def __init__(self, policy_kind: Callable[[str], PolicyKind]) -> None:
        self.policy_kind = policy_kind
        self.live: dict[str, LiveMatch] = {}
        """Matches being recorded, by id."""
        self.lost: set[str] = set()
        """Matches whose events were lost (their later events are ignored)."""
        self.to_abort: dict[str, str] = {}
        """Matches to mark aborted with the next write, and why."""
        self.runs: set[str] = set()
        """Runs known to be stored."""
        self._kinds: dict[str, str] = {}

    def snapshot(self) -> Snapshot:
        """The state a failed write goes back to (``restore``)."""
        return dict(self.live), set(self.lost), dict(self.to_abort)

    def restore(self, saved: Snapshot) -> None:
        """Go back to ``saved`` (the matches' counters are taken back by the plan)."""
        self.live, self.lost, self.to_abort = saved

    def plan(self, batch: Iterable[Queued], writer_id: int | None) -> Plan:
        """The rows of ``batch``; new matches name ``writer_id``. Raises Unstorable."""
        plan = Plan()
        try:
            self._plan_into(plan, batch, writer_id)
        except BaseException:
            plan.undo_counts()
            raise
        return plan

    def committed(self, plan: Plan, aborts: Iterable[str]) -> None:
        """``plan`` is written, and the matches ``aborts`` marked aborted with it."""
        self.runs.update(plan.runs)
        for match_id in aborts:
            self.to_abort.pop(match_id, None)

    def give_up(self, batch: list[Queued]) -> dict[str, str]:
        """Forget the events of a batch that cannot be written: its matches (and, after a
        gap, every live one) are to be marked aborted. Returns them, with why."""
        ended = {e.match_id for e in batch if isinstance(e, MatchEnded | MatchAborted)}
        touched = {
            e.match_id: FAILED_WRITE_REASON
            for e in batch
            if not isinstance(e, Gap) and e.match_id not in self.lost  # (counted already)
        }
        if any(isinstance(e, Gap) for e in batch):
            for match_id in self.live:
                touched.setdefault(match_id, LOST_EVENTS_REASON)
        for match_id, why in touched.items():
            self.live.pop(match_id, None)
            self.to_abort[match_id] = why
            if match_id in ended:
                self.lost.discard(match_id)
            else:
                self.lost.add(match_id)
        return touched

    def _plan_into(self, plan: Plan, batch: Iterable[Queued], writer_id: int | None) -> None:
        for event in batch:
            plan.events += 1
            if isinstance(event, TurnPlayed):
                self._plan_turn(event, plan)
            elif isinstance(event, InvalidMove):
                continue  # also reported as a TurnPlayed
            elif isinstance(event, MatchStarted):
                self._plan_start(event, plan, writer_id)
            elif isinstance(event, MatchEnded | MatchAborted):
                self._plan_end(event, plan)
            elif isinstance(event, Gap):
                plan.events -= 1
                for match_id in self.live:
                    self.to_abort[match_id] = LOST_EVENTS_REASON
                    self.lost.add(match_id)
                plan.lost += len(self.live)
                self.live.clear()

    def _plan_turn(self, event: TurnPlayed, plan: Plan) -> None:
        state = self.live.get(event.match_id)
        if state is None:
            plan.ignored += 1
            return
        if event.index < state.next_index:
            raise Unstorable(
                f"match {event.match_id}: turn {event.index} came after turn {state.next_index - 1}"
            )
        plan.touch(state)
        state.next_index = event.index + 1
        block = plan.open_blocks.get(event.match_id)
        if (
            block is None
            or block.first + len(block.turns) != event.index
            or len(block.turns) >= MAX_BLOCK_TURNS
        ):
            block = plan.new_block(state, event.match_id, event.index)
        block.add_turn(event)
        plan.turns += 1
        if 0 <= event.seat < state.num_players:
            state.moves[event.seat] += 1
            if not event.valid:
                state.invalid[event.seat] += 1
            plan.counted.append((state, event.seat, event.valid))

    def _plan_start(self, event: MatchStarted, plan: Plan, writer_id: int | None) -> None:
        match_id = event.match_id
        if match_id in self.live or match_id in self.lost:
            log.warning("match %s started twice; the second start is ignored", match_id)
            plan.ignored += 1
            return
        if event.run_id is not None and event.run_id not in self.runs:
            plan.runs.setdefault(event.run_id, event.time)
        plan.matches[match_id] = {
            "id": match_id,
            "game_id": event.game_id,
            "seed": event.seed,
            "num_players": event.num_players,
            "status": _LIVE,
            "reason": "",
            "started_at": event.time,
            "ended_at": None,
            "run_id": event.run_id,
            "group_id": event.group_id,
            "rated": event.rated,
            "num_turns": 0,
            "writer_id": writer_id,
        }
        plan.seats[match_id] = [self._seat_row(event, seat) for seat in range(event.num_players)]
        zeros = [0] * event.num_players
        state = self.live[match_id] = LiveMatch(
            event.num_players, zeros, list(zeros), game_id=event.game_id
        )
        boards = board_json(event.board), board_json(event.full_board)
        plan.new_block(state, match_id, 0).set_start(event.messages, event.public_state, *boards)

    def _seat_row(self, event: MatchStarted, seat: int) -> dict[str, Any]:
        """The row of ``seat`` of a match that starts; its policy as a key until written."""
        name = event.players[seat] if seat < len(event.players) else f"seat-{seat}"
        kind = self._kinds.get(name)
        if kind is None:
            kind = self._kinds[name] = str(self.policy_kind(name))
        checkpoint = checkpoint_of(name)
        run = event.run_id if kind == _LEARNER else checkpoint.name if checkpoint else None
        key: PolicyKey = (kind, name, run)
        return {
            "match_id": event.match_id,
            "seat": seat,
            "policy_id": key,
            "reward": None,
            "moves": 0,
            "invalid_moves": 0,
            "forfeited": False,
        }

    def _plan_end(self, event: MatchEnded | MatchAborted, plan: Plan) -> None:
        match_id = event.match_id
        state = self.live.pop(match_id, None)
        if state is None:
            self.lost.discard(match_id)  # its events stop here
            plan.ignored += 1
            return
        plan.ended += 1
        if isinstance(event, MatchEnded):
            status, full_state = event.status, event.full_state
        else:
            status, full_state = _ABORTED, None
        end = {
            "status": status,
            "reason": event.reason,
            "ended_at": event.time,
            "num_turns": event.num_turns,
        }
        block = plan.open_blocks.pop(match_id, None)
        if full_state is not None:
            if block is None:
                block = plan.new_block(state, match_id, event.num_turns)
                del plan.open_blocks[match_id]
            block.end = (full_state,)
        new_row = plan.matches.get(match_id)
        if new_row is not None:  # started in this batch: insert it finished
            new_row.update(end)
        else:
            plan.ends.append({"m_id": match_id, **end})
        new_seats = plan.seats.get(match_id)
        for seat in range(state.num_players):
            values = _seat_end(event, state, seat)
            if new_seats is not None:
                new_seats[seat].update(values)
            else:
                plan.seat_ends.append({"m_id": match_id, "s_seat": seat, **values})


def _seat_end(event: MatchEnded | MatchAborted, state: LiveMatch, seat: int) -> dict[str, Any]:
    """What ``seat``'s row holds once its match ended (or was aborted)."""
    if isinstance(event, MatchEnded):
        reward: float | None = float(event.rewards[seat]) if seat < len(event.rewards) else None
        invalid = (
            event.invalid_moves[seat] if seat < len(event.invalid_moves) else state.invalid[seat]
        )
        forfeited = seat in event.forfeited
    else:
        reward, invalid, forfeited = None, state.invalid[seat], False
    return {
        "reward": reward,
        "moves": state.moves[seat],
        "invalid_moves": invalid,
        "forfeited": forfeited,
    }
