#!/usr/bin/env bash
# Issue 8 on nvidia-h200-x2: P4, the campaign efficiency of a Ray campaign on 2 GPUs (the GEMM
# example, world sizes 1 and 2), and the same benchmark with 4 CPU actors on that machine.
#
#   OUT=/some/dir scripts/device/bench_x2.sh          # about 4-6 minutes
#
# Needs Ray, which the GPU machine does not have: carry .device/ray-py312.tar.xz (made here by
# ../shared/tools/pack-ray-for-device); it is unpacked into /tmp/site. Writes under $OUT:
# bench_x2_env.txt, p4_campaign_efficiency.json/.log (GPUs), p4_cpu/ (the same with 4 CPU
# actors) and results.json. Exit status 0 when both campaigns ran.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
: "${OUT:?OUT must name the folder for the results}"
mkdir -p "$OUT"
if ! python3 -c 'import ray' 2>/dev/null; then
  if [ ! -f .device/ray-py312.tar.xz ]; then
    echo "Ray is not installed and .device/ray-py312.tar.xz is missing: run ../shared/tools/pack-ray-for-device and carry it" >&2
    exit 2
  fi
  mkdir -p /tmp/site && tar -xJf .device/ray-py312.tar.xz -C /tmp/site
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$repo${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0
unset TRITON_INTERPRET TRITON_DIST_DEVICE RAY_ADDRESS

{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  python3 -c 'import sys, torch, triton, ray; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__, "ray", ray.__version__)'
  nvidia-smi -L
  nproc; uptime
} >"$OUT/bench_x2_env.txt" 2>&1

rc=0
# P4_ARGS: extra arguments of the GPU campaign (e.g. --long); P4_CPU=0 skips the CPU campaign
# shellcheck disable=SC2086
python3 benchmarks/run_all.py --out "$OUT" --only p4 --timeout 480 -- ${P4_ARGS:-} || rc=1
if [ "${P4_CPU:-1}" != 0 ]; then
  mkdir -p "$OUT/p4_cpu"
  TRITON_DIST_DEVICE=cpu TRITON_INTERPRET=1 python3 benchmarks/run_all.py --out "$OUT/p4_cpu" --only p4 \
    --timeout 300 -- --actors 4 || rc=1
fi
echo "bench_x2.sh exit status: $rc"
exit "$rc"
