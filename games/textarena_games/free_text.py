"""TextArena games whose bracketed lists are rules, not legal moves.

Negotiation games print their actions as a menu (``[Propose] <offer>``, ``[Accept]``,
``[Reject]``) whatever the state: ``[Propose]`` alone is refused (it needs an offer) and
``[Accept]`` is refused while there is nothing to accept. Read as legal moves, the menu
would send the random bot to forfeit, so these games list none (``free_text``): they are
for models, which read the rules, not for the random bot.
"""

from __future__ import annotations

from games.textarena_game import TextArenaExtras

GAME_IDS = ("NewRecruit-v0", "TwoDollar-v0")

EXTRAS = TextArenaExtras(free_text=True)
