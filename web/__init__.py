"""The web front door: one ``websockets`` server for the pages, the JSON API, the live
match, lobby and training-run streams, and browser seats against bots.

    hub = await serve(db, bus)        # http://127.0.0.1:8765/
    ...
    await hub.close()

``arena serve`` runs ``web.cli.serve_command``. The live protocol is described in
``docs/protocol.md``; every limit is a field of ``ServerLimits``.
"""

from web.hub import DEFAULT_HOST, DEFAULT_PORT, HubStats, WebHub, serve
from web.human import FORFEIT_MOVE, HumanSeat, SeatNotWaiting
from web.limits import ServerLimits
from web.protocol import PROTOCOL_VERSION, ProtocolError

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "FORFEIT_MOVE",
    "PROTOCOL_VERSION",
    "HubStats",
    "HumanSeat",
    "ProtocolError",
    "SeatNotWaiting",
    "ServerLimits",
    "WebHub",
    "serve",
]
