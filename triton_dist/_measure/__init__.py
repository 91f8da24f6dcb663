"""Measuring a config space on a backend: sequential runs (CPU), interleaved rounds and
graph replays (devices), adaptive stopping, the run guard (in-place restore, correctness) and result
comparison.

Entry point: `bench.measure_candidates`.
"""
