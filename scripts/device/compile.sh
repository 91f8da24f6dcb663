#!/usr/bin/env bash
# Issue 23, target 1 on the device (nvidia-h200): a miss's compiles in forked child processes.
# The real-compile tests of the process pass, the compile-only CPU benchmark on the host's cores
# (serial / threads / processes, the tutorial matmul's 16 configs for sm_90), then P8 for the
# tutorial matmul and the attention forward (compile-inclusive first tuning, serial vs the pass).
#   OUT=/some/dir bash scripts/device/compile.sh          (T_P8=..., KERNELS=matmul,attention)
set -uo pipefail
source "$(dirname "$0")/prelude.sh"
unset TRITON_INTERPRET TRITON_DIST_DEVICE RAY_ADDRESS
rc=0
{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  python3 -c 'import sys, torch, triton; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'
  python3 -c 'from triton_dist._measure import forked; print("process compiles:", forked.unavailable() or "available")'
  nproc; uptime
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
timeout "${T_TESTS:-90}" python3 -m pytest -q -rfs --tb=short -p no:cacheprovider tests/unit/test_compile_processes.py \
  >"$OUT/pytest.txt" 2>&1 || rc=1
tail -5 "$OUT/pytest.txt"
timeout "${T_CPU:-120}" python3 benchmarks/p8_cpu_compile.py --workers 16 --out "$OUT" >"$OUT/p8_cpu.log" 2>&1 || rc=1
tail -12 "$OUT/p8_cpu.log"
timeout "${T_P8:-420}" python3 benchmarks/p8_compile.py --kernels "${KERNELS:-matmul,attention}" --workers 16 --out "$OUT" \
  >"$OUT/p8.log" 2>&1 || rc=1
tail -60 "$OUT/p8.log"
echo "compile.sh exit status: $rc"
exit "$rc"
