"""Benchmarks: speed measured against straightforward baselines in the same process."""
