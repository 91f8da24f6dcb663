#!/usr/bin/env bash
# Diagnostics in one device call (nvidia-h200): the unit tests on CUDA with their tracebacks,
# where a graph-mode tuning's wall goes (P2, elementwise 2^24 and 2^26), a profile of a seeded
# fresh process's first call with shipped binaries (P8), and P1 over many rounds.
#   OUT=/some/dir bash scripts/device/diag.sh
set -uo pipefail
source "$(dirname "$0")/prelude.sh"
unset TRITON_INTERPRET TRITON_DIST_DEVICE RAY_ADDRESS
{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  python3 -c 'import sys, torch, triton; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'
  python3 -c 'import triton.runtime._async_compile as a; print("AsyncCompileMode", hasattr(a, "AsyncCompileMode"))'
  nproc; uptime
} >"$OUT/env.txt" 2>&1
timeout "${T_TESTS:-240}" python3 -m pytest -q -rfs --tb=short -p no:cacheprovider tests/unit tests/gpu/test_cuda_graphs.py \
  tests/contextual/test_contextual_timing.py tests/contextual/test_contextual.py tests/contextual/test_inner_options.py \
  --ignore=tests/unit/test_docs.py >"$OUT/pytest.txt" 2>&1
tail -5 "$OUT/pytest.txt"
timeout 90 python3 scripts/device/graph_phases.py >"$OUT/phases.log" 2>&1; tail -30 "$OUT/phases.log"
P8_ONLY_FIRST=1 timeout 150 python3 scripts/device/profile_first.py "$OUT" >"$OUT/first.log" 2>&1; tail -12 "$OUT/first.log"
timeout 60 python3 benchmarks/p1_hot_path.py --rounds 200 --number 20000 --out "$OUT" >"$OUT/p1.log" 2>&1
cat "$OUT/p1.log"
