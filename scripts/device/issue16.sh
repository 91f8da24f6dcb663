#!/usr/bin/env bash
# Issue 16 on nvidia-h200, one device call: the GPU tests of the default mode and of contextual
# timing, P7 (Triton's tutorial kernels: every method incl. stock triton.autotune, regrets against
# warm and cold oracles, the real first call), the L2 block, P1 (and P2 with WITH_P2=1).
#
#   OUT=/some/dir scripts/device/issue16.sh
set -uo pipefail
source "$(dirname "$0")/prelude.sh"
unset TRITON_INTERPRET TRITON_DIST_DEVICE RAY_ADDRESS
rc=0
{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  git log -1 --oneline 2>/dev/null || echo "no git: tree copied without .git"
  python3 -c 'import sys, torch, triton; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv
  nproc; uptime
} >"$OUT/env16.txt" 2>&1
timeout "${T_TESTS:-150}" python3 -m pytest -q -rs -p no:cacheprovider tests/unit/test_default_mode.py \
  tests/contextual/test_contextual_timing.py tests/contextual/test_contextual.py tests/gpu/test_cuda_graphs.py \
  >"$OUT/pytest16.txt" 2>&1 || rc=1
tail -3 "$OUT/pytest16.txt"
timeout "${T_P7:-260}" python3 benchmarks/p7_tutorials.py --trials "${P7_TRIALS:-4}" --rep-ms 3 --out "$OUT" \
  ${P7_ARGS:-} >"$OUT/p7.log" 2>&1 || rc=1
tail -12 "$OUT/p7.log"
timeout "${T_BLOCK:-110}" python3 benchmarks/p7_tutorials.py --only-block --trials "${BLOCK_TRIALS:-2}" --out "$OUT" >"$OUT/block.log" 2>&1 || rc=1
grep -E "^block|picks" "$OUT/block.log" | head -20
if [ -z "${SKIP_P1:-}" ]; then
  timeout "${T_P1:-50}" python3 benchmarks/p1_hot_path.py --rounds 40 --number 20000 --out "$OUT" >"$OUT/p1.log" 2>&1 || rc=1
  grep -E "over the host|overhead" "$OUT/p1.log"
fi
if [ -n "${WITH_P2:-}" ]; then
  timeout "${T_P2:-200}" python3 benchmarks/p2_tuning_efficiency.py --repeats "${P2_REPEATS:-3}" --out "$OUT" >"$OUT/p2.log" 2>&1 || rc=1
  tail -16 "$OUT/p2.log"
fi
fit_out issue16  # WITH_P2=1 writes 10 files
echo "issue16.sh exit status: $rc"
exit "$rc"
