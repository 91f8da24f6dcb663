#!/usr/bin/env bash
# Issue 5 item 9: a Ray campaign with cases of world size 1 and 2 on real GPUs (nvidia-h200-x2).
#
#   run with carry [".device"], e.g.:  bash scripts/device/campaign.sh
#   (.device/ray-py312.tar.xz comes from ../shared/tools/pack-ray-for-device; the GPU image has no Ray)
#
# Runs examples/campaigns/gemm-gpu.yaml on an embedded local Ray (gangs of 1 and 2 GPUs, NCCL
# inside a gang), then proves the entries are used: fresh processes in strict cache-only mode
# call matmul for every case (one process per W=1 case set, a 2-rank NCCL job with autotune_pg for
# the W=2 cases) and measure nothing; `ray_runner preflight` must report every rank hitting.
# Records in $OUT: the campaign report (JSON with wall time, per-case times and the efficiency
# sum(W x case time) / (GPUs x wall); Markdown; plot), its log, the checks, a summary.
# CAMPAIGN=examples/campaigns/cpu.yaml runs the same steps on a CPU machine (a dry run).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-out/campaign}
CAMPAIGN=${CAMPAIGN:-examples/campaigns/gemm-gpu.yaml}
PY=${PY:-python3}
mkdir -p "$OUT"
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1
# NVLink multicast stays off (the machine's rule); Ray's actors inherit these from this shell
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TRITON_DIST_AUTOTUNE_DIR=${TRITON_DIST_AUTOTUNE_DIR:-/tmp/td-campaign-cache}
rm -rf "$TRITON_DIST_AUTOTUNE_DIR" reports
if ! "$PY" -c "import ray" 2>/dev/null; then
  if [ ! -f .device/ray-py312.tar.xz ]; then
    echo "Ray is not installed and .device/ray-py312.tar.xz is missing: run ../shared/tools/pack-ray-for-device here and carry .device" | tee "$OUT/summary.txt" >&2
    exit 2
  fi
  mkdir -p /tmp/site && tar -xJf .device/ray-py312.tar.xz -C /tmp/site
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}

{
  date -u +%FT%TZ
  "$PY" -c "import sys, ray, torch, triton; print('python', sys.version.split()[0], 'ray', ray.__version__, 'torch', torch.__version__, 'triton', triton.__version__, 'cuda devices', torch.cuda.device_count() if torch.cuda.is_available() else 0)"
  nvidia-smi -L 2>/dev/null || echo "no nvidia-smi"
  nproc
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

echo "== campaign $CAMPAIGN"
start=$(date +%s.%N)
timeout 330 "$PY" -m ray_runner run "$CAMPAIGN" --no-progress 2>&1 | tee "$OUT/campaign.log"
rc=${PIPESTATUS[0]}
wall=$("$PY" -c "import time; print(round(time.time() - $start, 1))")
name=$("$PY" -c "from ray_runner.spec import load_campaign; print(load_campaign('$CAMPAIGN').name)")
cp "reports/$name.json" "reports/$name.md" "$OUT/" 2>/dev/null
cp "reports/$name.png" "$OUT/" 2>/dev/null

echo "== fresh processes, TRITON_DIST_AUTOTUNE_CACHE_ONLY=strict: every case must hit, nothing measured"
"$PY" - "$CAMPAIGN" > /tmp/verify-specs.txt <<'PY'
import json, sys
from ray_runner.spec import load_campaign
by_size = {}
for case in load_campaign(sys.argv[1]).cases():
    by_size.setdefault(case.world_size, []).append([case.target.function, case.target.args, case.case])
for size, calls in sorted(by_size.items()):
    print(size, json.dumps({"world_size": size, "calls": calls}))
PY
vrc=0
: > "$OUT/verify.log"
while read -r size spec; do
  port=$((29500 + RANDOM % 1000))
  pids=()
  for ((rank = 0; rank < size; rank++)); do
    TRITON_DIST_AUTOTUNE_CACHE_ONLY=strict RANK=$rank WORLD_SIZE=$size LOCAL_RANK=$rank MASTER_ADDR=127.0.0.1 \
      MASTER_PORT=$port timeout 120 "$PY" -m tests.ray.verify_hits "$spec" > "/tmp/verify-$size-$rank.txt" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || vrc=1; done
  for ((rank = 0; rank < size; rank++)); do
    echo "-- world size $size, rank $rank: $(grep -c '^{' "/tmp/verify-$size-$rank.txt") calls hit" >> "$OUT/verify.log"
    grep -v '^{' "/tmp/verify-$size-$rank.txt" | tail -5 >> "$OUT/verify.log" || true
  done
done < /tmp/verify-specs.txt
cat "$OUT/verify.log"
echo "== preflight" | tee -a "$OUT/verify.log"
timeout 120 "$PY" -m ray_runner preflight "$CAMPAIGN" 2>&1 | grep -v "^\s*$" | tail -20 | tee -a "$OUT/verify.log"
prc=${PIPESTATUS[0]}

"$PY" - "$OUT/$name.json" "$rc" "$vrc" "$prc" "$wall" > "$OUT/summary.txt" <<'PY'
import json, sys
path, rc, vrc, prc, wall = sys.argv[1:]
try:
    r = json.load(open(path))
except OSError:
    print(f"no report ({path}); campaign exit {rc}")
    sys.exit(0)
print(f"campaign {r['campaign']} on {r['device']}: exit {rc}; counts {r['counts']}; devices {r['devices']}")
print(f"wall {r['wall_s']} s (command {wall} s); sum of case times {r['sum_case_s']} s; "
      f"busy device-seconds {r['busy_device_s']}")
print(f"efficiency {r['efficiency']} = {r['efficiency_definition']}")
print(f"gangs started {r['gangs']['started']}, start-up s {r['gangs']['start_s']}")
print(f"cache-only check exit {vrc} (0: every rank of every case hit, nothing measured); preflight exit {prc}")
print()
print(f"{'#':>3} {'W':>2} {'status':7} {'case':45} {'best ms':>9} {'default ms':>10} {'speed-up':>8} {'time s':>7}  best config")
for c in r["cases"]:
    case = json.dumps(c["case"], sort_keys=True)
    f = lambda v, w: f"{v:{w}.4f}" if isinstance(v, (int, float)) else f"{'-':>{w}}"
    print(f"{c['number']:>3} {c['world_size']:>2} {c['status']:7} {case:45} {f(c['best_ms'], 9)} {f(c['default_ms'], 10)} "
          f"{(c['speedup'] or 0):8.2f} {c['seconds'] if c['seconds'] is not None else '-':>7}  {c['best_config']}")
PY
cat "$OUT/summary.txt"
[ "$rc" -eq 0 ] && [ "$vrc" -eq 0 ] && [ "$prc" -eq 0 ]
