#!/usr/bin/env bash
# Set up .venv and run the whole test suite (what CI runs). Extra arguments go to pytest.
#
# Two layers: the main suite in .venv (Triton 3.9), then the Ascend layer (tests/ascend/) in
# .venv-ascend, where `triton` is triton-ascend 3.2.0 (scripts/setup-ascend.sh). With extra
# arguments only the main suite runs them; TRITON_DIST_TEST_LAYERS=main|ascend|all picks the
# layers explicitly (default: all without arguments, main with). The Ascend layer is skipped,
# with the reason printed, only when installing triton-ascend fails.
set -euo pipefail
cd "$(dirname "$0")/.."
layers=${TRITON_DIST_TEST_LAYERS:-$([ $# -eq 0 ] && echo all || echo main)}
case "$layers" in main|ascend|all) ;; *) echo "TRITON_DIST_TEST_LAYERS must be main, ascend or all, got '$layers'" >&2; exit 2 ;; esac
bash scripts/setup.sh
source scripts/env.sh
# KubeRay's CRDs for the manifest schema test: shared/ lies beside the checkout (CI and sessions)
if [ -z "${KUBERAY_CRD_DIR:-}" ] && [ -d ../shared/kuberay-crd ]; then
  KUBERAY_CRD_DIR=$(cd ../shared/kuberay-crd && pwd)
  export KUBERAY_CRD_DIR
fi
.venv/bin/python -m ruff check triton_dist ray_runner tests benchmarks examples scripts
.venv/bin/lint-imports --no-cache   # the import contracts in pyproject.toml (layers, no cycles)
.venv/bin/python -m mypy           # the core's types ([tool.mypy] in pyproject.toml)
rc=0
if [ "$layers" != ascend ]; then
  set +e
  .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
  rc=$?
  set -e
  if [ "$rc" -eq 5 ]; then
    echo "pytest collected no tests: failing on purpose" >&2
  fi
fi
if [ "$layers" != main ]; then
  log=$(mktemp)
  if bash scripts/setup-ascend.sh >"$log" 2>&1; then
    echo "== Ascend layer: tests/ascend/ with triton-ascend in .venv-ascend"
    set +e
    .venv-ascend/bin/python -m pytest -q -p no:cacheprovider tests/ascend
    arc=$?
    set -e
    if [ "$arc" -eq 5 ]; then
      echo "Ascend layer: pytest collected no tests: failing on purpose" >&2
    fi
    [ "$rc" -ne 0 ] || rc=$arc
  else
    echo "== Ascend layer SKIPPED: installing triton-ascend into .venv-ascend failed" \
         "(scripts/setup-ascend.sh); its last lines:" >&2
    grep -v '^WARNING: Location' "$log" | tail -n 15 >&2
  fi
  rm -f "$log"
fi
exit "$rc"
