"""Benchmarks: each reports figures as ratios against a baseline measured in the same run."""
