#!/usr/bin/env bash
# Installs what is needed, then runs the whole test suite once per Keras backend,
# each in its own process. Extra arguments go to pytest (e.g. -k parity).
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1

failed=0
passed_total=0
failed_total=0
for backend in ${KERAS_VIT_BACKENDS:-tensorflow jax torch}; do
  echo "=== KERAS_BACKEND=$backend"
  log=$(mktemp)
  # --doctest-modules: the examples in the public docstrings run too, on every backend.
  KERAS_BACKEND=$backend .venv/bin/python -m pytest tests keras_vit --doctest-modules -q -p no:cacheprovider "$@" 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  summary=$(tail -n 1 "$log")
  count() { awk -v pat="$1" '{for (i = 2; i <= NF; i++) if ($i ~ pat) n += $(i - 1)} END {print n + 0}' <<<"$summary"; }
  passed_total=$((passed_total + $(count '^passed')))
  failed_total=$((failed_total + $(count '^(failed|errors?)')))
  rm -f "$log"
  [ "$status" -eq 0 ] || failed=1
done
echo "all backends: $passed_total passed, $failed_total failed"
exit $failed
