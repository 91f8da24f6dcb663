#!/usr/bin/env bash
# Issue 8 on nvidia-h200: graph measurement (autotune(..., graphs=True)).
#   1. its tests on the GPU (real CUDA graphs) and the interleaved-measurement tests;
#   2. P2 (tuning wall / ideal, with a graphs=True column) and P3 (selection quality) with the
#      strategies seed, default, adaptive, graphs, graphs_adaptive, measured in the same run.
# Writes under $OUT: graphs_pytest.txt, bench_env.txt, the benchmarks' .json/.log, results.json.
set -uo pipefail
source "$(dirname "$0")/prelude.sh"
unset TRITON_INTERPRET TRITON_DIST_DEVICE RAY_ADDRESS
export BENCH_ORACLE_CACHE="$OUT/oracle.json"
rc=0
python3 -m pytest -q -rs -p no:cacheprovider tests/gpu/test_cuda_graphs.py tests/unit/test_graph_measure.py \
  tests/unit/test_device_measure.py tests/unit/test_adaptive.py 2>&1 | tee "$OUT/graphs_pytest.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
python3 scripts/device/graph_costs.py 2>&1 | tee "$OUT/graph_costs.txt" || rc=1
python3 scripts/device/graph_phases.py 2>&1 | tee "$OUT/graph_phases.txt" || rc=1
{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  python3 -c 'import sys, torch, triton; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv
  nproc; uptime
} >"$OUT/bench_env.txt" 2>&1
python3 benchmarks/run_all.py --out "$OUT" --only p2 --timeout "${P2_LIMIT:-200}" -- --repeats 3 || rc=1
python3 benchmarks/run_all.py --out "$OUT" --only p3 --timeout "${P3_LIMIT:-260}" -- --trials 5 \
  --strategies ${P3_STRATEGIES:-seed default adaptive graphs graphs_adaptive} || rc=1
if [ -n "${WITH_P6:-}" ]; then
  python3 benchmarks/run_all.py --out "$OUT" --only p6 --timeout 150 -- --trials 8 || rc=1
fi
python3 benchmarks/run_all.py --out "$OUT" --collect || rc=1
echo "graphs.sh exit status: $rc"
exit "$rc"
