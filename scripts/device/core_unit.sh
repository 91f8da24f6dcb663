#!/usr/bin/env bash
# Issue 2 on nvidia-h200: the core on CUDA with event timing.
#   1. examples/scale.py and examples/gemm.py as scripts (real kernels, torch.cuda.Event timing);
#   2. tests/unit on the GPU (kernels compiled for the GPU, not interpreted; the CPU-only and
#      "no CUDA" tests skip themselves by capability).
# Writes under $OUT: core_env.txt, core_scale.txt, core_gemm.txt, core_cache/ (the entries and
# tuning logs the examples wrote), core_pytest.txt, core_junit.xml. Exit status 0 when all pass.
set -uo pipefail
source "$(dirname "$0")/prelude.sh"
unset TRITON_INTERPRET TRITON_DIST_DEVICE  # real kernels on the detected device
export TRITON_DIST_AUTOTUNE_DIR="$OUT/core_cache"
rc=0

{
  python3 -c 'import sys, torch, triton; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'
  python3 -c 'from triton_dist._backends import get_backend; b = get_backend(); print("backend", b.kind, b.dist_backend, b.ray_resource, b.hardware())'
  nvidia-smi -L
} >"$OUT/core_env.txt" 2>&1

python3 examples/scale.py >"$OUT/core_scale.txt" 2>&1 || rc=1
python3 examples/scale.py >>"$OUT/core_scale.txt" 2>&1 || rc=1  # second process: a cache hit
python3 examples/gemm.py >"$OUT/core_gemm.txt" 2>&1 || rc=1
python3 examples/gemm.py --m 8192 --n 8192 --k 4096 --dtype bfloat16 >>"$OUT/core_gemm.txt" 2>&1 || rc=1

unset TRITON_DIST_AUTOTUNE_DIR  # the tests give every test its own cache root
python3 -m pytest tests/unit -q -rs -p no:cacheprovider --junitxml="$OUT/core_junit.xml" \
  2>&1 | tee "$OUT/core_pytest.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1

echo "core_unit.sh exit status: $rc" | tee -a "$OUT/core_pytest.txt"
exit "$rc"
