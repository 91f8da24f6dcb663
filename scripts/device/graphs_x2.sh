#!/usr/bin/env bash
# Graph mode in a group on nvidia-h200-x2: tests/gpu/test_graphs_nccl.py (NCCL, a
# collective captured in every graph) and the 2-GPU contextual test. Writes graphs_x2_pytest.txt.
set -uo pipefail
source "$(dirname "$0")/prelude.sh"
unset TRITON_INTERPRET TRITON_DIST_DEVICE RAY_ADDRESS
python3 -m pytest -q -rs -p no:cacheprovider -l tests/gpu/test_graphs_nccl.py \
  tests/contextual/test_contextual_dist.py 2>&1 | tee "$OUT/graphs_x2_pytest.txt"
rc=${PIPESTATUS[0]}
echo "graphs_x2.sh exit status: $rc"
exit "$rc"
