#!/usr/bin/env bash
# Issue 8 on nvidia-h200: the benchmarks P1 (cached call), P2 (tuning wall / ideal), P3 (selection
# quality), P5 (first call in a fresh process) and P6 (adaptive measurement) on one GPU; P7 (issue
# 16: Triton's tutorial kernels, every method incl. stock triton.autotune, and the L2 block) on
# request.
#
#   OUT=/some/dir scripts/device/bench.sh            # all five (about 6-8 minutes)
#   OUT=/some/dir scripts/device/bench.sh p7         # the tutorial-kernel suite (issue 16) + block
#   OUT=/some/dir scripts/device/bench.sh p1 p2 p3   # some of them (split over two runs)
#
# Python 3.12, torch CUDA, triton; no Ray, no internet. Writes under $OUT: bench_env.txt,
# <benchmark>.json and .log for each, oracle.json (per-config kernel times from CUDA-graph
# replays, shared by P2/P3/P6 so they are measured once), results.json (the summaries) and the
# plots strategies.png, adaptive.png, tuning_wall.png, hot_path.png. Exit status: 0 when every
# benchmark ran (figures are judged in docs/performance.md, not here).
set -uo pipefail
source "$(dirname "$0")/prelude.sh"
unset TRITON_INTERPRET TRITON_DIST_DEVICE RAY_ADDRESS  # real kernels on the detected device
export BENCH_ORACLE_CACHE="$OUT/oracle.json"
which=("$@")
[ ${#which[@]} -gt 0 ] || which=(p1 p2 p3 p5 p6)

{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  python3 -c 'import sys, torch, triton; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'
  python3 -c 'from triton_dist._backends import get_backend; b = get_backend(); print("backend", b.kind, b.hardware())'
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv
  nproc; uptime
} >"$OUT/bench_env.txt" 2>&1

# per benchmark: its arguments (sized for one GPU and a 10-minute run) and a time limit (s)
declare -A args=(
  [p1]="--rounds 60 --number 20000"
  [p2]="--repeats 3"
  [p3]="--trials 5 --triton-trials 2"
  [p5]="--processes 3"
  [p6]="--trials 8"
  [p7]="--trials ${P7_TRIALS:-5} --block"
)
# p2 p3 p6 together stay under 7 minutes (each about 1 minute on the first H200 run)
declare -A limit=([p1]=120 [p2]=150 [p3]=180 [p5]=240 [p6]=90 [p7]=420)
rc=0
for b in "${which[@]}"; do
  # run_all.py runs one benchmark in its own process, logs it and collects every result so far
  # shellcheck disable=SC2086
  python3 benchmarks/run_all.py --out "$OUT" --only "$b" --timeout "${limit[$b]:-300}" -- ${args[$b]:-} || rc=1
done
python3 benchmarks/run_all.py --out "$OUT" --collect || rc=1
fit_out bench  # a .json and a .log per benchmark, the oracle, results.json and four plots: over 8 files
echo "bench.sh exit status: $rc"
exit "$rc"
