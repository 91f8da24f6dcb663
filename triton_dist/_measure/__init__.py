"""Measuring a config space on a backend: sequential runs (CPU), interleaved rounds and
graph replays (devices), adaptive stopping, the run guard (in-place restore, correctness) and result
comparison.

Entry point: `bench.measure_candidates` (`adaptive.measure_adaptive` for ``adaptive=True``); the
caller picks from its results with `pick.pick_best`. The modules, from the entry point down:

- `bench`: `measure_candidates`; one candidate after another (the CPU, a custom ``do_bench``);
- `rounds`: interleaved rounds and graph mode on a device, as named steps; `runs`: one
  candidate's runs (eager, capture, replay, failure); `agreement`: graph mode's checkpoints;
- `adaptive`: screen, reference, drop or finish;
- `compile`: a miss's compile pass before measuring (configs compiled concurrently); `forked`:
  its compiles in forked child processes;
- `guard`: in-place restore, correctness checks, time limits; `compare`: result comparison;
  `restore_kernel`: the device pass that restores a mutated argument;
- `pick`: the deterministic pick; `result`: `CandidateResult` and failure-vs-bug classification
  (leaves: they import no other module of this package but `result`).
"""
