"""The web front door: one ``websockets`` server for the pages, the JSON API, the live
match, lobby and training-run streams, and browser seats against bots.

    hub = await serve(db, bus)        # http://127.0.0.1:8765/
    ...
    await hub.close()

``arena serve`` runs ``web.cli.serve_command``. The live protocol is described in
``docs/protocol.md``; every limit is a field of ``ServerLimits``.

Built like ``websockets``: a sans-I/O core decides everything (``web.core.HubCore`` for the
live streams and browser seats, ``web.pages.api.HttpApi`` for pages and JSON,
``web.pages.hosts`` for the Host and Origin checks, ``web.live.streams`` and
``web.protocol`` for the messages), and ``web.hub.WebHub`` is the thin asyncio layer that
does the I/O around it.

By audience:

* ``web.pages``: what browsers read over HTTP (pages, static files, the JSON API, the
  runs' metrics and the games' ratings);
* ``web.live``: live matches and their streams, spectators, and people's seats;
* ``web.agents``: remote agents, the server's side and the client an agent runs
  (``web.agents.AgentClient``).

What every audience shares stays here: the hub and its core (``hub``, ``core``), the
protocol's messages (``protocol``), the connections (``connections``), the I/O the core
asks for (``needs``), the frames it sends (``outbox``), the limits (``limits``), the
counters (``hubstats``) and the commands (``cli``).
"""

from typing import Any

_EXPORTS = {
    "DEFAULT_HOST": "web.hub",
    "DEFAULT_PORT": "web.hub",
    "HubStats": "web.hub",
    "WebHub": "web.hub",
    "serve": "web.hub",
    "FORFEIT_MOVE": "web.live.human",
    "HumanSeat": "web.live.human",
    "SeatNotWaiting": "web.live.human",
    "ServerLimits": "web.limits",
    "PROTOCOL_VERSION": "web.protocol",
    "ProtocolError": "web.protocol",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    # Loaded on first use: an agent process (``web.agents``) does not load the server.
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'web' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
