"""Turns are stored as what they added, and what each seat saw is rebuilt exactly.

For every game that runs here, a recorded match is read back and every turn's rebuilt view
is compared with what the seat was given while it played, byte for byte: the observation
text (``arena show``, the reveal), the whole transcript and where its new part began (the
agent protocol's ``messages``), and the trainer's prompt tokens in each observation format.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from arena.coordinator import GameCoordinator
from arena.eventbus import EventBus
from arena.eventformat import format_messages
from arena.events import TurnPlayed
from arena.renderers import ByteRenderer
from arena.seats import SeatTurn
from arena.seatview import SeatView
from games.limits import SessionLimits
from games.registry import catalogue, make
from storage import Recorder, get_match, open_database
from storage.turnlog import MAX_BLOCK_TURNS, Block, BlockError, decode_block, read_blocks

MAX_TURNS = 30
"""Moves per match in the every-game test (a long game is cut there: truncated)."""


class Capturing:
    """A seat agent that plays a listed move (else a bracketed guess) and keeps every
    turn it was given, as it was given."""

    def __init__(self, seed: int, seen: list[tuple[int, SeatTurn]]) -> None:
        self.name = "capture"
        self._rng = random.Random(seed)
        self._seen = seen

    async def act(self, turn: SeatTurn) -> str:
        self._seen.append((turn.turn_index, turn))
        if turn.legal_moves:
            return self._rng.choice(turn.legal_moves)
        return f"[{self._rng.randrange(10)}]"


def _game_ids() -> list[str]:
    """Every built-in game (arena's own and TextArena's) that runs here."""
    return sorted(
        spec.game_id for spec in catalogue(available_only=True) if spec.source != "plugin"
    )


def _prompts(
    game_id: str, seat: int, turns: list[tuple[Any, int, Any]], fmt: Any
) -> list[list[int]]:
    view = SeatView(seat, game_id, ByteRenderer(), fmt)
    return [view.prompt(messages, new_from, legal).to_ints() for messages, new_from, legal in turns]


async def _record_one(game_id: str, db_url: str) -> tuple[str, list[tuple[int, SeatTurn]], Any]:
    spec = next(s for s in catalogue() if s.game_id == game_id)
    session = make(
        game_id,
        spec.min_players,
        seed=3,
        limits=SessionLimits(max_turns=MAX_TURNS, move_timeout_s=None),
    )
    seen: list[tuple[int, SeatTurn]] = []
    bus = EventBus()
    witness = bus.subscribe(max_queue=100_000, name="witness")
    db = await open_database(db_url)
    agents = {s: Capturing(s, seen) for s in range(session.num_players)}
    async with Recorder(db, bus) as recorder:
        coordinator = GameCoordinator(session, agents, bus=bus)  # type: ignore[arg-type]
        await coordinator.wait_done()
    assert recorder.problem is None
    published = []
    while (event := witness.get_nowait()) is not None:
        if isinstance(event, TurnPlayed):
            published.append(event.observation)
    detail = await get_match(db, coordinator.match_id)
    await db.close()
    seen.sort(key=lambda item: item[0])
    assert [t.index for t in detail.turns] == [i for i, _ in seen]
    assert [t.observation for t in detail.turns] == published
    return game_id, seen, detail


@pytest.mark.slow
async def test_every_game_rebuilds_what_each_seat_was_shown_byte_for_byte(tmp_path: Any) -> None:
    games = _game_ids()
    assert "TicTacToe-v0" in games and "KuhnPoker-v0" in games and len(games) > 50
    for n, game_id in enumerate(games):
        _, seen, detail = await _record_one(game_id, str(tmp_path / f"g{n}.db"))
        views = detail.seat_views()
        assert len(views) == len(seen) == len(detail.turns), game_id
        for (index, given), stored, view in zip(seen, detail.turns, views, strict=True):
            assert view is not None and stored.seat == given.seat, (game_id, index)
            assert view.messages == tuple(given.messages), (game_id, index)
            assert view.new_from == given.new_from, (game_id, index)
            assert stored.legal_moves == (
                None if given.legal_moves is None else tuple(given.legal_moves)
            )
            shown = format_messages(given.messages[given.new_from :])
            assert stored.observation == shown, (game_id, index)  # byte for byte
            assert stored.observation.encode() == shown.encode()


@pytest.mark.parametrize("game_id", ["TicTacToe-v0", "ConnectFour-v0", "KuhnPoker-v0"])
async def test_the_trainers_prompts_are_rebuilt_token_for_token(
    game_id: str, tmp_path: Any
) -> None:
    _, seen, detail = await _record_one(game_id, str(tmp_path / "a.db"))
    views = detail.seat_views()
    for seat in range(detail.match.num_players):
        given = [(list(t.messages), t.new_from, t.legal_moves) for _, t in seen if t.seat == seat]
        rebuilt = [
            (list(v.messages), v.new_from, v.legal_moves and list(v.legal_moves))
            for t, v in zip(detail.turns, views, strict=True)
            if t.seat == seat and v is not None
        ]
        for fmt in ("full", "last", "compact"):
            assert _prompts(game_id, seat, rebuilt, fmt) == _prompts(game_id, seat, given, fmt)


def test_a_block_round_trips_logprobs_times_and_states_exactly() -> None:
    from games.api import GAME, GameMessage, MessageKind

    nan, inf = float("nan"), float("inf")
    hi = GameMessage(GAME, "hi", MessageKind.PROMPT, 0)
    board, move = (
        GameMessage(GAME, "the board", MessageKind.BOARD),
        GameMessage(0, "[1]", MessageKind.ACTION),
    )
    messages = (board, move)
    block = Block("m", 0, 0)
    block.set_start((hi,), "hi", None, None)
    block.add_turn(
        TurnPlayed(
            "m", 0, 0, None, "[1]", True, None, False, (5, 6, 7), (-0.5, -inf, nan), 1e-7,
            "the board", 1796160209.17532, "[1]", messages=messages,
            board_text='{"kind":"grid"}', full_board_text=None, legal_moves=("[1]", "[2]"),
        )
    )  # fmt: skip
    log = read_blocks([(0, block.data(), None)])
    assert log.start_messages == (hi,) and log.start_state == "hi"
    (back,) = log.turns
    assert (back.elapsed_s, back.time, back.tokens) == (1e-7, 1796160209.17532, (5, 6, 7))
    assert back.logprobs is not None and back.logprobs[:2] == (-0.5, -inf)
    assert back.logprobs[2] != back.logprobs[2]  # NaN stays NaN
    assert back.messages == messages and back.public_state == "the board"
    assert back.legal_moves == ("[1]", "[2]") and back.board == {"kind": "grid"}
    with pytest.raises(BlockError):
        decode_block(b"\x01not zlib")
    with pytest.raises(BlockError):
        decode_block(b"\x02not zstandard")
    with pytest.raises(BlockError):
        decode_block(b"\x09" + block.data()[1:])  # a format this code does not know


def test_blocks_of_the_zlib_format_are_still_read_with_or_without_a_dictionary() -> None:
    """A database recorded before blocks were Zstandard frames keeps its turns readable:
    the same body, zlib-compressed (against the game's preset dictionary or none)."""
    import zlib

    from games.api import GAME, GameMessage, MessageKind
    from storage.turnlog import FORMAT, FORMAT_ZLIB, compress

    hi = GameMessage(GAME, "hi", MessageKind.PROMPT, 0)
    block = Block("m", 0, 0)
    block.set_start((hi,), "hi", None, None)
    block.add_turn(
        TurnPlayed(
            "m", 0, 0, None, "[1]", True, None, False, None, (-0.25,), 0.5, "hi", 2.0, "[1]",
            messages=(hi,), board_text='{"kind":"grid"}', full_board_text=None,
        )
    )  # fmt: skip
    body = block.body()
    dictionary = body * 3
    packer = zlib.compressobj(6, zdict=dictionary)
    old_with = bytes((FORMAT_ZLIB,)) + packer.compress(body) + packer.flush()
    old_without = bytes((FORMAT_ZLIB,)) + zlib.compress(body)
    new_with = compress(body, dictionary)
    assert new_with[0] == FORMAT != FORMAT_ZLIB
    assert len(new_with) < len(compress(body))  # the dictionary is used
    decoded = [decode_block(old_with, dictionary), decode_block(old_without)]
    decoded.append(decode_block(new_with, dictionary))
    assert decoded[0] == decoded[1] == decoded[2]
    log = read_blocks([(0, old_with, dictionary)])
    assert log.start_messages == (hi,) and log.turns[0].logprobs == (-0.25,)
    with pytest.raises(BlockError):
        decode_block(new_with, b"another dictionary")  # read against the wrong one


async def test_long_matches_are_cut_into_blocks_and_read_back_whole(tmp_path: Any) -> None:
    from tests.conftest import counting_session

    session = counting_session(2, rounds=MAX_BLOCK_TURNS)  # 2 x 256 moves
    bus = EventBus()
    db = await open_database(str(tmp_path / "long.db"))
    seen: list[tuple[int, SeatTurn]] = []

    class Counter:
        name = "counter"

        async def act(self, turn: SeatTurn) -> str:
            seen.append((turn.turn_index, turn))
            return turn.legal_moves[0] if turn.legal_moves else "[0]"

    async with Recorder(db, bus, batch_size=100) as recorder:
        coordinator = GameCoordinator(session, {0: Counter(), 1: Counter()}, bus=bus)
        await coordinator.wait_done()
    assert recorder.problem is None
    detail = await get_match(db, coordinator.match_id)
    assert len(detail.turns) == 2 * MAX_BLOCK_TURNS == len(seen)
    for (_, given), stored in zip(seen, detail.turns, strict=True):
        assert stored.observation == format_messages(given.messages[given.new_from :])
    await db.close()


async def test_blocks_of_a_game_share_one_dictionary_across_processes(db_url: str) -> None:
    from sqlalchemy import func, select

    from arena.play import play_matches
    from storage.models import BlockDictionary, TurnBlock

    shown: dict[tuple[str, int], str] = {}
    for run in range(2):  # two recording processes, one after the other
        db = await open_database(db_url)
        bus = EventBus()
        witness = bus.subscribe(max_queue=100_000, name="witness")
        async with Recorder(db, bus) as recorder:
            for game in ("TicTacToe-v0", "ConnectFour-v0"):
                await play_matches(game, ["random", "random"], 5, seed=run, bus=bus)
        assert recorder.problem is None
        while (event := witness.get_nowait()) is not None:
            if isinstance(event, TurnPlayed):
                shown[(event.match_id, event.index)] = event.observation
        await db.close()
    db = await open_database(db_url, read_only=True)
    async with db.sessions() as session:
        per_game = dict(
            (await session.execute(
                select(BlockDictionary.game_id, func.count()).group_by(BlockDictionary.game_id)
            )).all()
        )  # fmt: skip
        plain = await session.scalar(
            select(func.count()).select_from(TurnBlock).where(TurnBlock.dictionary_id.is_(None))
        )
    assert per_game == {"TicTacToe-v0": 1, "ConnectFour-v0": 1} and plain == 0
    for match_id in {m for m, _ in shown}:
        detail = await get_match(db, match_id)
        for t in detail.turns:
            assert t.observation == shown[(match_id, t.index)]
    await db.close()


def test_every_layer_reads_the_one_turn_record() -> None:
    """A turn is written once (``games.turnrecord.TurnRecord``, extended by
    ``arena.events.Turn``): the event carries every field of it, storage keeps the fields
    its columns name and gives back the same record, and the web keeps that record."""
    import dataclasses

    from arena.events import TURN_FIELDS, Turn
    from games.api import GAME, GameMessage, MessageKind
    from games.turnrecord import TurnRecord
    from storage.turnlog import TURN_COLUMNS

    assert issubclass(Turn, TurnRecord)
    assert set(TURN_COLUMNS) <= set(TURN_FIELDS)
    said = GameMessage(GAME, "X took 4", MessageKind.BOARD)
    record = TurnRecord(3, 1, "I take [4]", False, True, None, True, "[4]", (said,), round=2)
    event = TurnPlayed.of(
        "m", record, tokens=(7, 8), logprobs=(-0.5, -1.0), elapsed_s=0.25, time=9.0,
        public_state="X took 4", board_text='{"cells":[4]}', legal_moves=["[4]", "[5]"],
    )  # fmt: skip
    turn = event.turn()
    for f in dataclasses.fields(TurnRecord):
        assert getattr(turn, f.name) == getattr(record, f.name), f.name
    assert turn.board == {"cells": [4]} and turn.legal_moves == ("[4]", "[5]")
    block = Block("m", 0, 3)
    block.add_turn(event)
    (back,) = read_blocks([(3, block.data(), None)]).turns
    kept = {*TURN_COLUMNS, "index", "elapsed_s", "time"}
    for name in TURN_FIELDS:
        expected = getattr(turn, name) if name in kept else getattr(Turn, name, None)
        if name == "observation":
            expected = None  # stored as messages; queries rebuild it
        assert getattr(back, name) == expected, name
