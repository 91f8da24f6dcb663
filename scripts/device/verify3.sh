#!/usr/bin/env bash
# The last device call of the session (nvidia-h200): the compile tests on CUDA, the compile-
# inclusive first tuning (16 workers), P2 and where its first call goes, P1.
#   OUT=/some/dir bash scripts/device/verify3.sh
set -uo pipefail
source "$(dirname "$0")/prelude.sh"
unset TRITON_INTERPRET TRITON_DIST_DEVICE RAY_ADDRESS
{ date -u +"%Y-%m-%dT%H:%M:%SZ"; nproc; uptime; } >"$OUT/env.txt" 2>&1
timeout 120 python3 -m pytest -q -rfs --tb=short -p no:cacheprovider tests/unit/test_compile_processes.py \
  tests/unit/test_compile_pass.py tests/unit/test_graph_measure.py tests/gpu/test_cuda_graphs.py >"$OUT/pytest.txt" 2>&1
tail -3 "$OUT/pytest.txt"
for k in attention matmul; do timeout 60 python3 scripts/device/compile_workers.py $k 16 >>"$OUT/workers.log" 2>&1; done
cat "$OUT/workers.log"
timeout 130 python3 benchmarks/p2_tuning_efficiency.py --repeats 2 --out "$OUT" >"$OUT/p2.log" 2>&1
grep -E "^\| elementwise|^\| gemm|summary" "$OUT/p2.log"
timeout 40 python3 scripts/device/profile_p2.py >"$OUT/profile_p2.log" 2>&1
grep -E "first call|measured|compile pass" "$OUT/profile_p2.log"
timeout 100 python3 benchmarks/p1_hot_path.py --rounds 100 --number 20000 --out "$OUT" >"$OUT/p1.log" 2>&1
grep -E "over the host|overhead" "$OUT/p1.log"
