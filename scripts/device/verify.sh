#!/usr/bin/env bash
# One device call after a round of merges (nvidia-h200): the unit and contextual tests on CUDA
# (graph replay, the restructured rounds, the compile pass with a real compiler), P8 for the
# tutorial matmul (the fresh-process first call with shipped binaries and host modules), P2 on
# the real first call, and P1.
#   OUT=/some/dir bash scripts/device/verify.sh
set -uo pipefail
source "$(dirname "$0")/prelude.sh"
unset TRITON_INTERPRET TRITON_DIST_DEVICE RAY_ADDRESS
rc=0
{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  python3 -c 'import sys, torch, triton; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv
  nproc; uptime
} >"$OUT/env.txt" 2>&1
timeout "${T_TESTS:-210}" python3 -m pytest -q -rs -p no:cacheprovider tests/unit tests/gpu/test_cuda_graphs.py tests/contextual/test_contextual_timing.py \
  tests/contextual/test_contextual.py tests/contextual/test_inner_options.py >"$OUT/pytest.txt" 2>&1 || rc=1
tail -15 "$OUT/pytest.txt"
timeout "${T_P8:-150}" python3 benchmarks/p8_compile.py --kernels matmul --workers 16 --out "$OUT" >"$OUT/p8.log" 2>&1 || rc=1
tail -25 "$OUT/p8.log"
timeout "${T_P2:-120}" python3 benchmarks/p2_tuning_efficiency.py --repeats 2 --out "$OUT" >"$OUT/p2.log" 2>&1 || rc=1
tail -16 "$OUT/p2.log"
timeout "${T_P1:-40}" python3 benchmarks/p1_hot_path.py --rounds 40 --number 20000 --out "$OUT" >"$OUT/p1.log" 2>&1 || rc=1
grep -E "over the host|overhead" "$OUT/p1.log"
echo "verify.sh exit status: $rc"
exit "$rc"
