#!/usr/bin/env bash
# Issue 4 on the GPU machine: contextual_autotune with real Triton kernels on CUDA.
#   nvidia-h200:    the seed example + tests/contextual on one GPU (the 2-GPU test skips itself)
#   nvidia-h200-x2: the same, plus is_dist=True over NCCL on two GPUs
# Writes under $OUT: contextual_env.txt, contextual_example.txt, contextual_example_rank-0.log,
# contextual_pytest.txt, contextual_junit.xml. Exit status: 0 when the example and the tests pass.
set -uo pipefail
source "$(dirname "$0")/prelude.sh"
unset TRITON_INTERPRET TRITON_DIST_DEVICE  # real kernels on the detected device
rc=0

{
  python3 -c 'import sys, numpy, torch, triton; print("python", sys.version.split()[0]); print("torch", torch.__version__, "triton", triton.__version__, "numpy", numpy.__version__); print("accelerators", torch.accelerator.device_count() if hasattr(torch, "accelerator") else "?")'
  python3 -c 'from triton_dist._backends import get_backend; b = get_backend(); print("backend", b.kind, b.hardware())'
  nvidia-smi -L
} >"$OUT/contextual_env.txt" 2>&1

# 1. the seed's contextual example, as is, in a scratch working directory (it logs to ./.autotune_logs)
work=$(mktemp -d)
(cd "$work" && python3 "$repo/examples/contextual_scale.py") >"$OUT/contextual_example.txt" 2>&1 || rc=1
cp "$work/.autotune_logs/rank-0.log" "$OUT/contextual_example_rank-0.log" 2>/dev/null || rc=1

# 2. the contextual tests on the GPU (the gloo test still runs its two ranks on the CPU)
python3 -m pytest tests/contextual -q -rs -p no:cacheprovider --junitxml="$OUT/contextual_junit.xml" \
  2>&1 | tee "$OUT/contextual_pytest.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1

echo "contextual.sh exit status: $rc" | tee -a "$OUT/contextual_pytest.txt"
exit "$rc"
