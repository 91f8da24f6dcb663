#!/usr/bin/env bash
# One device call after a round of merges (nvidia-h200; the last of 2026-12-01 ran WORKERS=16): the unit and contextual tests on
# CUDA, the compile pass's bound (P8 'parallel' for WORKERS, default 16,24,32), P2 and where its first call
# goes, and P1.   OUT=/some/dir bash scripts/device/verify2.sh
set -uo pipefail
source "$(dirname "$0")/prelude.sh"
unset TRITON_INTERPRET TRITON_DIST_DEVICE RAY_ADDRESS
{ date -u +"%Y-%m-%dT%H:%M:%SZ"; nproc; uptime; } >"$OUT/env.txt" 2>&1
timeout "${T_TESTS:-150}" python3 -m pytest -q -rfs --tb=short -p no:cacheprovider tests/unit tests/gpu/test_cuda_graphs.py \
  tests/contextual/test_contextual_timing.py tests/contextual/test_contextual.py tests/contextual/test_inner_options.py \
  --ignore=tests/unit/test_docs.py >"$OUT/pytest.txt" 2>&1
tail -3 "$OUT/pytest.txt"
for k in attention matmul; do
  timeout 90 python3 scripts/device/compile_workers.py $k "${WORKERS:-16,24,32}" >>"$OUT/workers.log" 2>&1
done
cat "$OUT/workers.log"
timeout 130 python3 benchmarks/p2_tuning_efficiency.py --repeats 2 --out "$OUT" >"$OUT/p2.log" 2>&1
tail -16 "$OUT/p2.log"
timeout 40 python3 scripts/device/profile_p2.py >"$OUT/profile_p2.log" 2>&1
grep -E "first call|measured" "$OUT/profile_p2.log"
timeout 100 python3 benchmarks/p1_hot_path.py --rounds 100 --number 20000 --out "$OUT" >"$OUT/p1.log" 2>&1
grep -E "over the host|overhead" "$OUT/p1.log"
