"""A seat played by a remote agent: a program that connected with its account's token.

``RemoteSeat`` is a ``HumanSeat`` whose moves come from an agent's connection (the hub
calls ``submit``), with one difference: at its deadline it does not play a forfeit move,
it forfeits (``arena.coordinator.SeatForfeit``), so it loses on time in every game,
whatever text the game would accept, and at once under any invalid-move rule. The match
ends ``finished``: a decided, rated result, never an abort.

A disconnect does not stop the clock: the seat keeps waiting for its move (from the
agent's next connection, see ``web.agents.agentdesk``) until its deadline, and forfeits when the
agent is not back within its grace period.
"""

from __future__ import annotations

from arena.seats import SeatForfeit
from web.live.human import HumanSeat


class RemoteSeat(HumanSeat):
    """A seat whose moves come from a remote agent's connection (see the module's
    docstring). ``name`` is the agent's policy key, ``agent:NAME``."""

    def on_timeout(self) -> str:
        """Lose on time: raises SeatForfeit."""
        raise SeatForfeit(f"{self.name} lost on time: no move within {self.timeout_s:g} s")
