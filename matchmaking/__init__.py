"""Who plays whom: model seats, ratings, opponent choice, the league, the seek queue.

Players are named by ``arena.identity.PolicyRef`` (one identity type for learners, bots,
checkpoints, people and remote agents).

- ``agents``: a past checkpoint (or any sampler) in a seat, and the bounded pool of loaded
  samplers;
- ``ratings``: a rating and its scale; ``paircounts`` the rated results collapsed,
  ``btfit`` their Bradley-Terry fit (kept live by ``BTRatings``), ``bttable`` the fit with
  intervals, ``openskill_ratings`` openskill's Plackett-Luce for comparison;
- ``leaderboard``: a game's table from the stored results, and the first-mover advantage;
- ``recording``: every match played on a bus stored, and its live ratings;
- ``pfsp``: prioritized fictitious self-play weights and collapse detection.
"""
