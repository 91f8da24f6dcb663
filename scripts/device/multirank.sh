#!/usr/bin/env bash
# Issue 3 on nvidia-h200-x2: multi-rank tuning with NCCL on two GPUs and a real Triton kernel.
set -uo pipefail
source "$(dirname "$0")/prelude.sh"
python3 scripts/device/multirank_nccl.py --nprocs "${NPROCS:-2}" --out "$OUT" 2>&1 | tee "$OUT/multirank.log"
rc=$?
fit_out multirank  # a file per scenario and rank, the summary and every tuning log: over 8 files
exit "$rc"
