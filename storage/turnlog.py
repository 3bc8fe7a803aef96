"""How a match's turns are stored: blocks of what is new, and what is rebuilt from them.

A turn is stored as what it added: the messages the game sent because of the move (to
each seat and to everyone, once each), the move itself (the seat's text, the parsed move,
tokens and logprobs, validity, timing) and the views after it (the public state, the
public board and, where it differs, the all-seeing board, as the game gave them). A seat's
observation is never stored: it is rebuilt, exactly, from the messages (``rebuild``), so a
message sent to every seat is kept once instead of once per seat, and a turn costs what
it added, not the whole state of the game.

The recorder writes the turns of a match that one of its transactions holds as one block
(``turn_blocks``: a row per block, at most ``MAX_BLOCK_TURNS`` turns), the match's start
(its first messages and views) in its first block and its all-seeing final state in its
last. A block is JSON compressed with Zstandard: the views of consecutive turns differ
little, and compression keeps what they share once per block, so a block is a keyframe
followed by what changed (a match's storage grows with its length, linearly). Each block
decodes on its own. The blocks of a game are compressed against that game's dictionary
(raw content: text its matches repeat), so what every match repeats is stored once.

Zstandard rather than zlib: a tic-tac-toe match is about 6 KB of JSON before compression,
and zlib took about 125 microseconds a block against a 32 KiB preset dictionary (it hashes
the whole dictionary again for every block), as much as the match took to play; Zstandard
digests the dictionary once (``precompute_compress``) and takes about 15 (``python -m
bench.storage``). Blocks written by zlib (``FORMAT_ZLIB``) are still read.

A block is one byte, ``FORMAT``, then one Zstandard frame: the length of a UTF-8 JSON text
(4 bytes, little-endian), that text, then little-endian doubles: each turn's
``elapsed_s`` and ``time``, then every turn's logprobs in turn order (exact, NaN and
infinities included, and 8 bytes each instead of 16 to 20 characters of JSON that
compress poorly). The JSON is ``[start, turns, end]``: ``start`` is null or ``[messages,
state, board, full_board]``; ``turns`` is a list of lists, one value per name of
``TURN_COLUMNS`` (``[seat, action, move, valid, reason, truncated, tokens, logprobs,
messages, observation, state, board, full_board, legal_moves]``: ``logprobs`` their
count, or null; ``messages`` null when the publisher gave only the observation text,
which is then stored in ``observation``, else null; ``state`` an integer when it is the
text of the turn's message of that position: a game's public state is often the board it
just sent); ``end`` is null or ``[full_state]``. A message is ``{sender, text, kind,
to}``; boards are their compact JSON text. ``decode_block`` puts ``elapsed_s`` and
``time`` back after ``truncated``, and the logprobs in their place.

A turn is written from the published event (``arena.events.TurnPlayed``) and read back
as the one turn record, ``arena.events.Turn``, column by column: a ``Turn`` field
appended to ``TURN_COLUMNS`` is stored from then on, and a list written before it (one
value shorter) reads it as the field's default.
"""

from __future__ import annotations

import dataclasses
import json
import struct
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import zstandard

from arena.eventformat import board_json, format_messages
from arena.events import Turn, TurnPlayed
from arena.text import encodable
from games.api import GameMessage, MessageKind

FORMAT = 2
"""The block format this module writes (a stored block starts with it): a Zstandard frame."""
FORMAT_ZLIB = 1
"""The format of blocks written before: the same body, zlib-compressed. Still read."""
MAX_BLOCK_TURNS = 256
"""Most turns in one block: longer runs are cut, so a reader of a match's last turns
decodes at most this many more."""
COMPRESSION_LEVEL = 3
"""Zstandard's level for blocks (its default: higher levels cost 2-8x the time for 10-30 %
fewer bytes on these blocks)."""
MAX_DICTIONARY_BYTES = 32 * 1024
"""Longest dictionary (zlib, which read the older blocks, looked back 32 KiB at most)."""
MAX_CACHED_DICTIONARIES = 64
"""Dictionaries whose digested form each thread keeps (one per game it records or reads)."""
DICTIONARY_SAMPLE_BLOCKS = 8
"""Blocks of a game a new dictionary is made from."""

TURN_COLUMNS: tuple[str, ...] = (
    "seat",
    "action",
    "move",
    "valid",
    "reason",
    "truncated",
    "tokens",
    "logprobs",
    "messages",
    "observation",
    "public_state",
    "board",
    "full_board",
    "legal_moves",
)
"""The ``Turn`` fields a stored turn's list holds, in order (``elapsed_s`` and ``time``
go with the doubles). Append a field to store it; never reorder or remove one."""

_KINDS = {kind.value: kind for kind in MessageKind}
_ELAPSED = TURN_COLUMNS.index("truncated") + 1
"""Where ``elapsed_s`` (then ``time``) stands in a turn's list in memory."""
_LOGPROBS, _MESSAGES, _STATE = (
    TURN_COLUMNS.index(name) for name in ("logprobs", "messages", "public_state")
)
"""Where the logprobs, messages and public state stand in a stored turn's list."""
_IN_MEMORY = (*TURN_COLUMNS[:_ELAPSED], "elapsed_s", "time", *TURN_COLUMNS[_ELAPSED:])
"""The fields of a turn's list as ``decode_block`` returns it."""
_LENGTH = struct.Struct("<I")


class BlockError(ValueError):
    """A stored block cannot be read (damaged, or of an unknown format)."""


def decode_messages(rows: Sequence[Any]) -> tuple[GameMessage, ...]:
    """The messages a block holds (``{sender, text, kind, to}``), as ``GameMessage``s."""
    return tuple(
        GameMessage(m["sender"], m["text"], _KINDS.get(m["kind"], MessageKind.INFO), m["to"])
        for m in rows
    )


def _state_ref(state: str | None, messages: Sequence[GameMessage] | None) -> str | int | None:
    """``state``, or the position of the first of ``messages`` whose text it is."""
    if state is not None and messages:
        for i, m in enumerate(messages):
            if m.text == state:
                return i
    return state


@dataclass(slots=True)
class Block:
    """One block being written: its place in the match and its content."""

    match_id: str
    seq: int
    """0-based number of the block in its match."""
    first: int
    """Index of its first turn."""
    game_id: str = ""
    """The match's game (blocks of one game share a dictionary)."""
    start: tuple[Any, ...] | None = None
    """See ``set_start``."""
    turns: list[tuple[Any, ...]] = field(default_factory=list)
    """The turns as stored (``add``)."""
    end: tuple[str] | None = None
    doubles: list[float] = field(default_factory=list)
    """Each turn's ``elapsed_s`` and ``time``."""
    logprobs: list[float] = field(default_factory=list)

    def set_start(
        self,
        messages: Sequence[GameMessage] | None,
        state: str | None,
        board: str | None,
        full_board: str | None,
    ) -> None:
        """The match's start: its first messages and views (boards as JSON text)."""
        self.start = (
            messages,
            _state_ref(state, messages),
            storable_board(board),
            storable_board(full_board),
        )

    def add_turn(self, turn: TurnPlayed) -> None:
        """Append one turn: its ``TURN_COLUMNS`` (``observation`` only when there are no
        ``messages``; boards as JSON text), its times and its logprobs."""
        logprobs = turn.logprobs
        count = None
        if logprobs is not None:
            self.logprobs.extend(logprobs)
            count = len(logprobs)
        self.doubles.append(turn.elapsed_s)
        self.doubles.append(turn.time)
        messages = turn.messages
        special = {
            "logprobs": count,
            "observation": turn.observation if messages is None else None,
            "public_state": _state_ref(turn.public_state, messages),
            "board": storable_board(turn.board_text),
            "full_board": storable_board(turn.full_board_text),
        }
        self.turns.append(
            tuple(
                special[name] if name in special else getattr(turn, name) for name in TURN_COLUMNS
            )
        )

    def body(self) -> bytes:
        """The block before compression (see the module's docstring): cheap, for the
        event loop; ``compress`` does the rest, anywhere (Zstandard lets other threads
        run)."""
        body = _dumps((self.start, self.turns, self.end))
        doubles = self.doubles + self.logprobs
        return _LENGTH.pack(len(body)) + body + struct.pack(f"<{len(doubles)}d", *doubles)

    def data(self) -> bytes:
        """The stored bytes: ``compress(body())``."""
        return compress(self.body())


def compress(body: bytes, dictionary: bytes | None = None) -> bytes:
    """A block's stored bytes from its ``body``, compressed against ``dictionary`` (raw
    content; the reader needs the same one)."""
    return bytes((FORMAT,)) + _codecs(dictionary)[0].compress(body)


class _Codecs(threading.local):
    """Each thread's compressors and decompressors, by dictionary: a Zstandard context
    serves one thread at a time, and digesting a dictionary costs as much as compressing
    a few dozen blocks, so it is done once per thread and dictionary."""

    def __init__(self) -> None:
        self.by_dictionary: dict[
            bytes | None, tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]
        ] = {}


_THREAD_CODECS = _Codecs()


def _codecs(
    dictionary: bytes | None,
) -> tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]:
    cache = _THREAD_CODECS.by_dictionary
    found = cache.get(dictionary)
    if found is not None:
        return found
    if len(cache) >= MAX_CACHED_DICTIONARIES:
        cache.pop(next(iter(cache)))  # the oldest
    if dictionary is None:
        found = (
            zstandard.ZstdCompressor(level=COMPRESSION_LEVEL, write_checksum=False),
            zstandard.ZstdDecompressor(),
        )
    else:
        digested = zstandard.ZstdCompressionDict(
            dictionary, dict_type=zstandard.DICT_TYPE_RAWCONTENT
        )
        digested.precompute_compress(level=COMPRESSION_LEVEL)
        found = (
            zstandard.ZstdCompressor(
                level=COMPRESSION_LEVEL,
                dict_data=digested,
                write_checksum=False,
                write_dict_id=False,
            ),
            zstandard.ZstdDecompressor(dict_data=digested),
        )
    cache[dictionary] = found
    return found


def make_dictionary(bodies: Sequence[bytes]) -> bytes:
    """A dictionary for a game from the bodies of some of its blocks: what its matches
    have in common (rules, boards, the shape of every turn) is in any one of them, and
    the compressors prefer what lies at its end, so the newest blocks go last."""
    return b"".join(bodies[-DICTIONARY_SAMPLE_BLOCKS:])[-MAX_DICTIONARY_BYTES:]


def _dumps(value: Any) -> bytes:
    """JSON as UTF-8 bytes: orjson (several times faster than the standard library's
    encoder, which matters at every move; it writes a message, a dataclass, as an object
    without a Python call per message); text orjson refuses (lone surrogates) goes
    through ``arena.text.encodable`` (U+FFFD), as in every column."""
    try:
        return orjson.dumps(value)
    except TypeError:
        text = json.dumps(value, ensure_ascii=False, default=dataclasses.asdict)
        return encodable(text).encode()


def storable_board(text: str | None) -> str | None:
    """A board's JSON text as stored: a lone surrogate escaped in it (``\\udc80``, from a
    game whose board the standard library encoded) becomes U+FFFD, as everywhere else."""
    if text is None or "\\ud" not in text:  # (the standard library writes hex in lower case)
        return text
    return board_json(json.loads(text))


@dataclass
class MatchLog:
    """A match's blocks, decoded and joined in order."""

    start_messages: tuple[GameMessage, ...] | None = None
    start_state: str | None = None
    start_board: str | None = None
    start_full_board: str | None = None
    turns: list[Turn] = field(default_factory=list)
    full_state: str | None = None


def decode_block(data: bytes, dictionary: bytes | None = None) -> tuple[Any, list[list[Any]], Any]:
    """``(start, turns, end)`` of one stored block (compressed against ``dictionary``),
    each turn as written (its times put back in place). Raises BlockError."""
    if not data or data[0] not in (FORMAT, FORMAT_ZLIB):
        raise BlockError(f"a stored block of an unknown format ({data[:1]!r})")
    try:
        if data[0] == FORMAT:
            packed = _codecs(dictionary)[1].decompress(data[1:])
        elif dictionary is None:
            packed = zlib.decompress(data[1:])
        else:
            unpacker = zlib.decompressobj(zdict=dictionary)
            packed = unpacker.decompress(data[1:]) + unpacker.flush()
        (length,) = _LENGTH.unpack_from(packed)
        body_end = _LENGTH.size + length
        start, turns, end = orjson.loads(packed[_LENGTH.size : body_end])
        doubles = struct.unpack_from(f"<{(len(packed) - body_end) // 8}d", packed, body_end)
        at = 2 * len(turns)
        for i, turn in enumerate(turns):
            count = turn[_LOGPROBS]
            if count is not None:
                turn[_LOGPROBS] = doubles[at : at + count]
                at += count
            state, messages = turn[_STATE], turn[_MESSAGES]
            if isinstance(state, int) and not isinstance(state, bool):
                turn[_STATE] = messages[state]["text"]
            turn[_ELAPSED:_ELAPSED] = doubles[2 * i : 2 * i + 2]
        if start is not None and isinstance(start[1], int) and not isinstance(start[1], bool):
            start[1] = start[0][start[1]]["text"]
    except (
        zlib.error,
        zstandard.ZstdError,
        struct.error,
        ValueError,
        TypeError,
        IndexError,
    ) as exc:
        raise BlockError(f"a stored block cannot be read: {exc}") from exc
    return start, turns, end


def _tuple(values: Sequence[Any] | None) -> tuple[Any, ...] | None:
    return None if values is None else tuple(values)


def _board(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    value: dict[str, Any] = json.loads(text)
    return value


_READ: dict[str, Callable[[Any], Any]] = {
    "valid": bool,
    "truncated": bool,
    "elapsed_s": float,
    "time": float,
    "tokens": _tuple,
    "logprobs": _tuple,
    "legal_moves": _tuple,
    "messages": lambda rows: None if rows is None else decode_messages(rows),
    "board": _board,
    "full_board": _board,
}
"""How a stored value becomes its ``Turn`` field (the others are kept as they are)."""
_READ_WITHOUT_BOARDS: dict[str, Callable[[Any], Any]] = {
    **_READ,
    "board": lambda _: None,
    "full_board": lambda _: None,
}
"""``_READ`` for a reader that needs no board (decoding them is a fifth of reading a turn)."""


def stored_turn(index: int, row: Sequence[Any], *, boards: bool = True) -> Turn:
    """Turn ``index`` from its list as ``decode_block`` returns it (a shorter list, written
    before a column was added, gives that field its default); without ``boards``, its
    ``board`` and ``full_board`` are left None."""
    read = _READ if boards else _READ_WITHOUT_BOARDS
    values = {
        name: read[name](value) if name in read else value
        for name, value in zip(_IN_MEMORY, row, strict=False)
    }
    return Turn(index=index, **values)


def read_blocks(
    blocks: Iterable[tuple[int, bytes, bytes | None]], since: int = 0, *, boards: bool = True
) -> MatchLog:
    """Join a match's blocks (``(first turn index, data, dictionary)``, in order) into
    one log, keeping the turns from index ``since``; without ``boards``, the turns' boards
    are left None (``stored_turn``). Raises BlockError."""
    log = MatchLog()
    for first, data, dictionary in blocks:
        start, turns, end = decode_block(data, dictionary)
        if start is not None:
            messages, log.start_state, log.start_board, log.start_full_board = start
            log.start_messages = None if messages is None else decode_messages(messages)
        for offset, row in enumerate(turns):
            if first + offset >= since:
                try:
                    log.turns.append(stored_turn(first + offset, row, boards=boards))
                except (ValueError, TypeError) as exc:
                    raise BlockError(f"turn {first + offset} cannot be read: {exc}") from exc
        if end is not None:
            (log.full_state,) = end
    return log


@dataclass(frozen=True)
class SeatView:
    """What one seat was shown when it had to move (``rebuild``)."""

    messages: tuple[GameMessage, ...]
    """Every message the seat had received (its whole transcript), in order."""
    new_from: int
    """Where the messages since its previous move begin."""
    legal_moves: tuple[str, ...] | None = None
    """The moves the game listed (None: none, or not stored)."""

    @property
    def observation(self) -> str:
        """The messages since its previous move, as text (``TurnPlayed.observation``)."""
        return format_messages(self.messages[self.new_from :])


def _walk(log: MatchLog, num_players: int) -> Iterator[tuple[list[GameMessage], int, int] | None]:
    """For each turn of ``log``: its seat's transcript (a list that grows as the walk goes
    on), where the new part began and where the transcript then ended; None for a turn
    whose publisher gave only the observation text.

    Exact: a seat receives every public message and its own private ones in the order
    the game sent them, which is the order they are stored in."""
    logs: list[list[GameMessage]] = [[] for _ in range(num_players)]
    seen = [0] * num_players

    def deliver(messages: Iterable[GameMessage]) -> None:
        for m in messages:
            if m.to is None:
                for seat_log in logs:
                    seat_log.append(m)
            elif 0 <= m.to < num_players:
                logs[m.to].append(m)

    deliver(log.start_messages or ())
    for turn in log.turns:
        seat = turn.seat
        if turn.messages is None or not 0 <= seat < num_players:
            yield None
        else:
            end = len(logs[seat])
            yield logs[seat], seen[seat], end
            seen[seat] = end
        deliver(turn.messages or ())


def observations(log: MatchLog, num_players: int) -> list[str]:
    """What each turn's seat was shown since its previous move, as text: rebuilt from the
    messages (``TurnPlayed.observation``, byte for byte), or the text as it was given."""
    out = []
    for turn, place in zip(log.turns, _walk(log, num_players), strict=True):
        if place is None:
            out.append(turn.observation or "")
        else:
            seat_log, start, end = place
            out.append(format_messages(seat_log[start:end]))
    return out


def shown_messages(
    log: MatchLog, num_players: int
) -> Iterator[tuple[Turn, list[GameMessage] | None]]:
    """Each turn of ``log`` with the messages its seat was shown since its previous move
    (``TurnPlayed.seen``: what ``observations`` renders), rebuilt from the stored messages;
    None for a turn stored as text only. One short list per turn, not the whole transcript:
    for reading many matches in turn (``storage.export``)."""
    for turn, place in zip(log.turns, _walk(log, num_players), strict=True):
        yield turn, None if place is None else place[0][place[1] : place[2]]


def seat_views(log: MatchLog, num_players: int) -> list[SeatView | None]:
    """What each turn's seat was given when it had to move: its whole transcript then and
    where the new part began (``SeatTurn.messages`` and ``new_from``, from which prompts
    and the trainer's observations are rendered); None where only the text was stored.
    Each view holds its own copy of the transcript: for one match at a time."""
    return [
        None if place is None else SeatView(tuple(place[0][: place[2]]), place[1], t.legal_moves)
        for t, place in zip(log.turns, _walk(log, num_players), strict=True)
    ]
