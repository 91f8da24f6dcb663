#!/usr/bin/env bash
# Issue 8 diagnostics on nvidia-h200: where a graph-mode tuning's wall goes (probe_p2.py: profiler
# gap analysis, capture/replay costs) and how sampling schemes rank near-tied long kernels against
# the P3 oracle (probe_context.py). Writes probe_p2.txt and probe_context.txt under $OUT.
set -uo pipefail
source "$(dirname "$0")/prelude.sh"
unset TRITON_INTERPRET TRITON_DIST_DEVICE RAY_ADDRESS
rc=0
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv >"$OUT/probe_env.txt" 2>&1
python3 scripts/device/probe_p2.py /tmp/traces 2>&1 | tee "$OUT/probe_p2.txt" || rc=1
python3 scripts/device/probe_context.py 2>&1 | tee "$OUT/probe_context.txt" || rc=1
echo "probe.sh exit status: $rc"
exit "$rc"
