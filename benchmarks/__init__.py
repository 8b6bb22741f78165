"""Benchmarks: correctness lives in tests/, speed is measured here and reported as ratios."""
