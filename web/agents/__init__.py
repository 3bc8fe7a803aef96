"""Remote agents: programs that play seats on an ``arena serve`` server with an account's
token (``docs/agents.md``, ``docs/protocol.md``).

The server's side: authentication (``agentsessions``), the seek queue (``seeks``), agent
seats and how agents learn their matches' ends (``agentseats``, ``agentends``), all without
I/O under one desk (``agentdesk``), and its asyncio layer (``agenthub``, ``remote``).

The client an agent runs in its own process, exported here: ``AgentClient`` (the protocol
session, ``agentclient``), the types its policies see (``agenttypes``) and ready-made
policies (``agentpolicies``)::

    from web.agents import AgentClient, bot_policy
"""

from web.agents.agentclient import AgentClient
from web.agents.agentpolicies import bot_policy, model_policy, seat_policy
from web.agents.agenttypes import (
    AgentError,
    AgentTurn,
    MatchInfo,
    MatchResult,
    PolicyFactory,
    SeatPolicy,
)

__all__ = [
    "AgentClient",
    "AgentError",
    "AgentTurn",
    "MatchInfo",
    "MatchResult",
    "PolicyFactory",
    "SeatPolicy",
    "bot_policy",
    "model_policy",
    "seat_policy",
]
