"""What every native game keeps the same way: whether it is over, its rewards, the seats
that forfeited, the messages not yet drained and the invalid-move allowance. A native game
sets ``_done``, ``_rewards``, ``_out`` and ``_messages``; these methods of the game API read
them, and ``_say`` adds a message."""

from __future__ import annotations

from games.api import GAME, GameMessage, MessageKind


class GameBookkeeping:
    """``is_done``, ``rewards``, ``forfeited``, ``drain_messages`` and
    ``set_invalid_move_allowance`` over the game's own fields (list it before the game API
    class it serves)."""

    _done: bool
    _rewards: dict[int, float]
    _out: set[int]
    _messages: list[GameMessage]
    _allowance: int = 1
    """Invalid moves in a row a seat may retry (``set_invalid_move_allowance``)."""

    def _say(self, text: str, kind: MessageKind, to: int | None = None, sender: int = GAME) -> None:
        """Add a message: to seat ``to`` only, or to everyone (None)."""
        self._messages.append(GameMessage(sender=sender, text=text, kind=kind, to=to))

    def set_invalid_move_allowance(self, allowance: int) -> None:
        self._allowance = allowance

    def is_done(self) -> bool:
        return self._done

    def rewards(self) -> dict[int, float]:
        return dict(self._rewards)

    def forfeited(self) -> set[int]:
        return set(self._out)

    def drain_messages(self) -> list[GameMessage]:
        out, self._messages = self._messages, []
        return out
