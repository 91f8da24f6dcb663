# Sourced by the scripts of scripts/device/: run from the repository root, results under $OUT,
# the project importable, Python unbuffered and writing no bytecode into the copied tree.
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo" || exit 1
: "${OUT:?OUT must name the folder for the results}"
mkdir -p "$OUT"
export PYTHONPATH=$repo${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
