"""Who plays whom: model seats, ratings, opponent choice, the league, the seek queue.

Players are named by ``arena.identity.PolicyRef`` (one identity type for learners, bots,
checkpoints, people and remote agents).

- ``agents``: a past checkpoint (or any sampler) in a seat, and the bounded pool of loaded
  samplers;
- ``ratings``: openskill live ratings, Bradley-Terry with bootstrap intervals, the
  first-mover advantage;
- ``pfsp``: prioritized fictitious self-play weights and collapse detection.
"""
