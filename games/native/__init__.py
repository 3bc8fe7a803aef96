"""Games written against the registry's own game API, one file each (each registers its
game when imported): Lowest Unique Number (hidden picks in turn), rock-paper-scissors and
Goofspiel (simultaneous moves), Haggle (a negotiation in free text) and Kuhn poker with
real stakes."""

from games.native import goofspiel, haggle, kuhn, rock_paper_scissors
from games.native.goofspiel import GoofspielGame
from games.native.haggle import HaggleGame
from games.native.kuhn import KuhnGame
from games.native.lowest_unique import LowestUniqueGame
from games.native.rock_paper_scissors import RockPaperScissorsGame
from games.registration import register_game

register_game(
    "LowestUnique-v0",
    min_players=2,
    max_players=15,
    hidden_information=True,
    description="Each round pick a number in secret; the lowest unique pick wins.",
)(LowestUniqueGame)

__all__ = [
    "GoofspielGame",
    "HaggleGame",
    "KuhnGame",
    "LowestUniqueGame",
    "RockPaperScissorsGame",
    "goofspiel",
    "haggle",
    "kuhn",
    "rock_paper_scissors",
]
