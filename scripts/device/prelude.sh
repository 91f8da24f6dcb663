# Sourced by the scripts of scripts/device/: run from the repository root, results under $OUT,
# the project importable, Python unbuffered and writing no bytecode into the copied tree.
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo" || exit 1
: "${OUT:?OUT must name the folder for the results}"
mkdir -p "$OUT"
export PYTHONPATH=$repo${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1

# The device tool brings back at most 8 files from $OUT, none more than 2 folders down: where a run
# wrote more (or deeper), fit_out TAG packs everything into $OUT/TAG.tar.gz and leaves beside it only
# the *env*.txt files (also in the archive), so that nothing written stays behind on the machine.
fit_out() {
  local tag=${1:-out} files deep
  files=$(find "$OUT" -type f | wc -l)
  deep=$(find "$OUT" -mindepth 4 -type f | wc -l)
  [ "$files" -le 8 ] && [ "$deep" -eq 0 ] && return 0
  tar -czf "/tmp/$tag.$$.tar.gz" -C "$OUT" . \
    && find "$OUT" -mindepth 1 -maxdepth 1 ! -name '*env*.txt' -exec rm -rf {} + \
    && mv "/tmp/$tag.$$.tar.gz" "$OUT/$tag.tar.gz" \
    && echo "fit_out: $files files under \$OUT (the device tool brings back 8): all of them in $tag.tar.gz"
}
