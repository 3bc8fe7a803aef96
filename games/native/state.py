"""What every native game keeps the same way: whether it is over, its rewards, the seats
that forfeited and the messages not yet drained. A native game sets ``_done``,
``_rewards``, ``_out`` and ``_messages``; these methods of the game API read them."""

from __future__ import annotations

from games.api import GameMessage


class GameBookkeeping:
    """``is_done``, ``rewards``, ``forfeited`` and ``drain_messages`` over the game's own
    fields (list it before the game API class it serves)."""

    _done: bool
    _rewards: dict[int, float]
    _out: set[int]
    _messages: list[GameMessage]

    def is_done(self) -> bool:
        return self._done

    def rewards(self) -> dict[int, float]:
        return dict(self._rewards)

    def forfeited(self) -> set[int]:
        return set(self._out)

    def drain_messages(self) -> list[GameMessage]:
        out, self._messages = self._messages, []
        return out
