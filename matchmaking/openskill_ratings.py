"""openskill's Plackett-Luce ratings, updated match by match.

Not the default (that is Bradley-Terry, ``matchmaking.btfit``): kept for comparison
(``arena leaderboard --method openskill`` replays the stored results through it) and for
tournaments' own tables. Any number of seats, ties included.
"""

from __future__ import annotations

from collections.abc import Sequence

from openskill.models import PlackettLuce

from games.outcome import ranks
from matchmaking.ratings import Rating


class LiveRatings:
    """openskill Plackett-Luce ratings per game and policy, updated match by match."""

    def __init__(self, model: PlackettLuce | None = None) -> None:
        self.model = model if model is not None else PlackettLuce()
        self._ratings: dict[tuple[str, str], Rating] = {}

    def get(self, game_id: str, policy: str) -> Rating:
        """The rating (the model's prior for a policy never rated)."""
        found = self._ratings.get((game_id, policy))
        if found is not None:
            return found
        prior = self.model.rating()
        return Rating(float(prior.mu), float(prior.sigma))

    def set(self, game_id: str, policy: str, rating: Rating) -> None:
        """Load a stored rating."""
        self._ratings[(game_id, policy)] = rating

    def update(
        self, game_id: str, policies: Sequence[str], rewards: Sequence[float]
    ) -> dict[str, Rating]:
        """Rate one finished match: seat i played ``policies[i]`` and got ``rewards[i]``.

        A policy in several seats (self-play) is not rated (it cannot gain on itself);
        returns the new rating of each rated policy. Raises ValueError when the lists
        differ in length or hold fewer than two seats."""
        if len(policies) != len(rewards):
            raise ValueError("one reward per seat")
        if len(policies) < 2:
            raise ValueError("a rated match needs at least two seats")
        if len(set(policies)) != len(policies):
            return {}
        teams = []
        for policy in policies:
            current = self.get(game_id, policy)
            teams.append([self.model.rating(mu=current.mu, sigma=current.sigma)])
        rated = self.model.rate(teams, ranks=[float(r) for r in ranks(rewards)])
        out = {}
        for policy, team in zip(policies, rated, strict=True):
            new = Rating(float(team[0].mu), float(team[0].sigma))
            self._ratings[(game_id, policy)] = new
            out[policy] = new
        return out

    def table(self, game_id: str) -> list[tuple[str, Rating]]:
        """The game's rated policies, best ordinal first."""
        rows = [(p, r) for (g, p), r in self._ratings.items() if g == game_id]
        return sorted(rows, key=lambda row: -row[1].ordinal)
