#!/usr/bin/env bash
# Issue 3 on nvidia-h200-x2: multi-rank tuning with NCCL on two GPUs and a real Triton kernel.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
mkdir -p "$OUT"
python scripts/device/multirank_nccl.py --nprocs "${NPROCS:-2}" --out "$OUT" 2>&1 | tee "$OUT/multirank.log"
