#!/usr/bin/env bash
# Set up .venv, then the main job on the CPU: a pre-tuning campaign on embedded Ray that seeds
# the cache, and an inline demo that starts warm from it (strict cache-only: no tuning at all).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh
export TRITON_DIST_AUTOTUNE_DIR=${TRITON_DIST_AUTOTUNE_DIR:-$PWD/out/cache}
echo "== 1. pre-tuning campaign on embedded Ray (cache: $TRITON_DIST_AUTOTUNE_DIR)"
.venv/bin/python -m ray_runner run examples/campaigns/cpu.yaml --seed nodes
echo "== 2. what the campaign cached"
.venv/bin/python -m triton_dist.cache ls
echo "== 3. inline demo: the training-side call hits the seeded cache (strict cache-only)"
TRITON_DIST_AUTOTUNE_CACHE_ONLY=strict .venv/bin/python -m examples.demo_inline
echo "== 4. inline tuning from scratch (function-level and contextual), in a cache of its own"
rm -rf out/inline-cache
TRITON_DIST_AUTOTUNE_DIR=$PWD/out/inline-cache .venv/bin/python examples/scale.py
(cd out && ../.venv/bin/python ../examples/contextual_scale.py)  # logs to out/.autotune_logs/
