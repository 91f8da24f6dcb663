#!/usr/bin/env bash
# Issue 7 R4 on nvidia-h200: crash isolation of a candidate that makes an illegal memory access.
#
#   run(command="bash scripts/device/crash_isolation.sh", carry=[".device"], kind="nvidia-h200")
#
# scripts/device/crash_target.py holds a Triton copy whose config 1 stores 4 TiB past its buffer.
# Three phases (scripts/device/crash_isolation.py): inline (the core stops with DeviceStateError
# at candidate 1, and the process's CUDA context stays broken: an illegal memory access is sticky,
# so inline tuning cannot get past it); isolated (fresh subprocess per attempt, the retry passes
# known_failures and completes with candidate 1 recorded as failed); and, when Ray is unpacked
# from .device/ray-py312.tar.xz (carry .device), the same through `python -m ray_runner run`,
# whose retry on a fresh actor marks the candidate failed and finishes the campaign.
# Results: $OUT/crash_isolation.json (+ .log, the ray_runner report).
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:=/tmp/crash-isolation-out}"
mkdir -p "$OUT"
export PYTHONPATH=$PWD/scripts/device:$PWD${PYTHONPATH:+:$PYTHONPATH}
if [ -f .device/ray-py312.tar.xz ]; then
  mkdir -p /tmp/site && tar -xJf .device/ray-py312.tar.xz -C /tmp/site && export PYTHONPATH=/tmp/site:$PYTHONPATH
fi
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee "$OUT/gpu.txt"
python -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)" 2>&1 | tee -a "$OUT/gpu.txt"
python scripts/device/crash_isolation.py --out "$OUT" 2>&1 | tee "$OUT/crash_isolation.log"
rc=${PIPESTATUS[0]}
cp /tmp/crash-isolation-*/ray-report/crash-isolation.json "$OUT/ray_report.json" 2>/dev/null || true
cp /tmp/crash-isolation-*/ray_runner.log "$OUT/ray_runner.log" 2>/dev/null || true
exit "$rc"
