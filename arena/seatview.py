"""What one seat is shown, and how its answer becomes a move: shared by every model seat.

A ``SeatView`` turns the seat's transcript into a prompt in the chosen observation format
(``full``, ``last`` or ``compact``; see ``arena.renderers``) and a sampled answer back into
move text. The learner's ``PlayerEnv`` and a past checkpoint sitting in a seat
(``matchmaking``) use the same one, so a checkpoint sees exactly what it was trained on.
"""

from __future__ import annotations

from collections.abc import Sequence

from arena.renderers import (
    Message,
    ObservationFormat,
    PromptCache,
    Renderer,
    SeatChat,
    bare_move,
    bracket_bare_move,
    compact_observation,
    seat_chat,
)
from arena.types import Observation, StopCondition
from games.api import GameMessage


class SeatView:
    """Prompts and answers of one seat of one game (stateful: the ``full`` chat grows)."""

    def __init__(
        self, seat: int, game_id: str, renderer: Renderer, observation_format: ObservationFormat
    ) -> None:
        self.seat = seat
        self.game_id = game_id
        self.renderer = renderer
        self.observation_format: ObservationFormat = observation_format
        self._chat = SeatChat(seat)
        self._cache = PromptCache()

    def prompt(
        self,
        messages: Sequence[GameMessage],
        new_from: int,
        legal_moves: Sequence[str] | None,
    ) -> Observation:
        """The prompt for the seat's transcript ``messages`` (the messages from
        ``new_from`` on are new since its previous move)."""
        fmt = self.observation_format
        if fmt == "full":  # the transcript only grows: extend the chat
            seat = self._chat
            seat.extend(messages[seat.consumed :])
            return self.renderer.build_incremental_prompt(seat.final, seat.pending(), self._cache)
        chat: list[Message]
        if fmt == "compact":
            text = compact_observation(self.game_id, messages, self.seat, legal_moves)
            chat = [{"role": "user", "content": text}]
        else:
            chat = seat_chat(messages, self.seat, new_from, fmt)
        return self.renderer.build_generation_prompt(chat)

    @property
    def stop_condition(self) -> StopCondition:
        """The renderer's stop sequences."""
        return self.renderer.get_stop_sequences()

    def move(self, tokens: Sequence[int]) -> str:
        """The move text in sampled ``tokens`` (compact answers get their brackets)."""
        message, _ended = self.renderer.parse_response(tokens)
        text = message_text(message)
        if self.observation_format == "compact":
            text = bracket_bare_move(text)
        return text

    def answer_tokens(self, move: str) -> list[int]:
        """The tokens with which the seat answers ``move`` (a legal move as the game
        writes it): the move's text (bare in the compact format: ``[4]`` -> ``4``) and
        the renderer's stop (``Renderer.answer_tokens``); ``move()`` reads ``move`` back
        from them."""
        text = bare_move(move) if self.observation_format == "compact" else move
        return self.renderer.answer_tokens(text)


def message_text(message: object) -> str:
    """The text of a renderer's parsed message (cookbook messages may hold a list of parts)."""
    content = message.get("content", "") if isinstance(message, dict) else ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content)
