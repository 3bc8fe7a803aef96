"""Games written against the registry's own game API (one file each)."""

from games.native.lowest_unique import LowestUniqueGame
from games.registry import register_game

register_game(
    "LowestUnique-v0",
    min_players=2,
    max_players=15,
    hidden_information=True,
    description="Each round pick a number in secret; the lowest unique pick wins.",
)(LowestUniqueGame)

__all__ = ["LowestUniqueGame"]
