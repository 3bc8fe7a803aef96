"""The web front door: one ``websockets`` server for the pages, the JSON API, the live
match, lobby and training-run streams, and browser seats against bots.

    hub = await serve(db, bus)        # http://127.0.0.1:8765/
    ...
    await hub.close()

``arena serve`` runs ``web.cli.serve_command``. The live protocol is described in
``docs/protocol.md``; every limit is a field of ``ServerLimits``.

Built like ``websockets``: a sans-I/O core decides everything (``web.core.HubCore`` for the
live streams and browser seats, ``web.api.HttpApi`` for pages and JSON, ``web.hosts`` for
the Host and Origin checks, ``web.streams`` and ``web.protocol`` for the messages), and
``web.hub.WebHub`` is the thin asyncio layer that does the I/O around it.
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
