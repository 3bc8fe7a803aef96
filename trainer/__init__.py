"""Trainer: rollouts to datums, the self-play training loop, model backends."""
