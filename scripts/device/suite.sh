#!/usr/bin/env bash
# Run several device scripts in one device call and bring their results back as one archive
# (the device tool returns at most 8 files). Usage, on the GPU machine:
#   OUT=... bash scripts/device/suite.sh TAG name[:timeout_s] [name[:timeout_s] ...]
# Each scripts/device/<name>.sh runs with OUT=/tmp/suite/<name>; everything ends up in
# $OUT/<TAG>.tar.gz, and a summary (exit status and last lines of each) is printed.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
tag=$1; shift
res=/tmp/suite; rm -rf "$res"; mkdir -p "$res" "$OUT"
if [ -f .device/ray-py312.tar.xz ]; then  # Ray for the scripts that need it
  mkdir -p /tmp/site && tar -xJf .device/ray-py312.tar.xz -C /tmp/site
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1
summary=$res/summary.txt
for item in "$@"; do
  name=${item%%:*}; limit=${item#*:}; [ "$limit" = "$item" ] && limit=300
  start=$(date +%s)
  OUT=$res/$name timeout --kill-after=10 "$limit" bash "scripts/device/$name.sh" >"$res/$name.log" 2>&1
  rc=$?
  echo "== $name: exit $rc in $(( $(date +%s) - start ))s (limit ${limit}s)" | tee -a "$summary"
  tail -n 15 "$res/$name.log" | sed 's/^/   /' | tee -a "$summary"
done
nvidia-smi -L >>"$summary" 2>&1
tar -czf "$OUT/$tag.tar.gz" -C "$res" .
cp "$summary" "$OUT/$tag-summary.txt"
