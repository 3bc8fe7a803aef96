"""The rows of an exported dataset (``arena export``): one row per seat of a stored match,
stated once here for every format.

``ExportRow`` names each field with its meaning; ``arrow_schema`` gives each its Arrow type
(the Parquet files' schema), and ``features`` the Hugging Face ``datasets.Features`` both
formats load as. JSON Lines carries no types, so a column that is null in every row of a
file (``run_id`` of matches played outside a training run, ``reward`` of aborted ones)
reads as the ``null`` type unless these features are given:
``load_dataset("json", data_files=..., features=features())``.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    import datasets
    import pyarrow


EXPORT_STATUSES: tuple[str, ...] = ("finished", "truncated", "aborted")
"""The values of ``status``: the ways a match ends (``storage.models.MatchStatus``; a live
match is not over, and never exported)."""
RESULTS: tuple[str, ...] = ("win", "draw", "loss")
"""The values of ``result`` (``games.outcome.Result``)."""


class ChatMessage(TypedDict):
    """One chat message of a row, as the ecosystem's chat datasets write it."""

    role: str
    """``system``, ``user`` or ``assistant``."""
    content: str


@dataclass(frozen=True, slots=True)
class ExportRow:
    """One seat of one stored match: what it was shown, what it answered, how it ended."""

    messages: list[ChatMessage]
    """The chat the seat saw and answered, in order. Each ``assistant`` message is one of
    its moves, the text as the game received it (invalid ones too); the ``user`` message
    before it holds the game's messages the seat was shown since its previous move, one
    line each tagged with its sender (``[GAME] ...``, ``[Player 1] ...``: what
    ``arena.events.TurnPlayed.observation`` holds), less the echo of the seat's own
    previous move, which is that assistant message. A ``system`` message comes first when
    the seat's first observation began with the game's rules (messages of kind
    ``prompt``): those lines, tagged the same way; the system and the first user message
    joined by a newline are that first observation (arena's ``full`` chat,
    ``arena.renderers.seat_chat``, holds them as one user message). A turn stored as text
    only (recorded before schema 7) gives its observation text as it was, echo included.
    The seat's messages after its last move (the game's end) are not kept: it answered
    none."""
    reward: float | None
    """The seat's final reward; null for an aborted match (it carries none)."""
    result: str | None
    """``win``, ``draw`` or ``loss`` against the other seats' rewards (``games.outcome``);
    null for an aborted match."""
    status: str
    """How the match ended: ``finished``, ``truncated`` (the move cap; scored as a draw)
    or ``aborted``."""
    legal_moves: list[list[str] | None]
    """For each assistant message, in order: the moves the game listed for that turn, or
    null where the game lists none."""
    invalid: list[bool]
    """For each assistant message, in order: whether the game refused that move."""
    game_id: str
    """The game (``TicTacToe-v0``)."""
    match_id: str
    """The stored match's id (``arena show ID``)."""
    seat: int
    """The seat, 0-based (the player order of the match)."""
    num_players: int
    """Seats in the match."""
    player: str
    """Who played the seat, as the match recorded it (``random``, ``learner``,
    ``checkpoint:run@120``)."""
    policy: str
    """That player's policy key, what ratings are kept under (``bot:random@1``:
    ``arena.identity.policy_key``)."""
    players: list[str]
    """Who played each seat, in seat order (recorded names)."""
    run_id: str | None
    """The training run the match was played in; null outside one."""
    started_at: float
    """When the match started, Unix seconds (UTC)."""
    ended_at: float | None
    """When it ended, Unix seconds (UTC); null when not recorded."""
    rated: bool
    """False for a casual match, which moves no rating."""


FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(ExportRow))
"""The columns, in order."""


@functools.cache
def arrow_schema() -> pyarrow.Schema:
    """The Arrow schema of the rows (every column nullable where ``ExportRow`` says so):
    the Parquet files' schema, and what ``features`` is made from."""
    import pyarrow as pa

    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    types: dict[str, pa.DataType] = {
        "messages": pa.list_(message),
        "reward": pa.float64(),
        "result": pa.string(),
        "status": pa.string(),
        "legal_moves": pa.list_(pa.list_(pa.string())),
        "invalid": pa.list_(pa.bool_()),
        "game_id": pa.string(),
        "match_id": pa.string(),
        "seat": pa.int64(),
        "num_players": pa.int64(),
        "player": pa.string(),
        "policy": pa.string(),
        "players": pa.list_(pa.string()),
        "run_id": pa.string(),
        "started_at": pa.float64(),
        "ended_at": pa.float64(),
        "rated": pa.bool_(),
    }
    if tuple(types) != FIELDS:  # one schema: a field added to ExportRow needs its type here
        raise AssertionError(f"arrow types for {tuple(types)} but rows have {FIELDS}")
    return pa.schema([pa.field(name, kind) for name, kind in types.items()])


def features() -> datasets.Features:
    """The Hugging Face ``datasets.Features`` of an export, in either format: what
    ``load_dataset("parquet", ...)`` reads from the files, and what to pass as
    ``features=`` to ``load_dataset("json", ...)`` (see the module's docstring)."""
    import datasets

    return datasets.Features.from_arrow_schema(arrow_schema())


def row_dict(row: ExportRow) -> dict[str, Any]:
    """The row as a plain dict, the columns in order."""
    return {name: getattr(row, name) for name in FIELDS}
