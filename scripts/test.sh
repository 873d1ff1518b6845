#!/usr/bin/env bash
# Installs what is needed, then runs the whole test suite once per Keras backend, each in its
# own process. Extra arguments go to pytest (e.g. -k parity).
#
# The backends run side by side: much of a test is single-threaded work (tracing, compiling,
# child processes starting), so on a small machine three processes finish well before three
# runs in a row. KERAS_VIT_TEST_SERIAL=1 runs them one after another instead; KERAS_VIT_BACKENDS
# picks backends (default: all three). Each line of output carries its backend's name.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
# One persistent JAX compilation cache per run, fresh each time: the child processes of the
# recipe and fault tests compile the same train steps as each other.
export JAX_COMPILATION_CACHE_DIR="$logs/jax-cache"

run_backend() {
  local backend=$1
  shift
  # --doctest-modules: the examples in the public docstrings run too, on every backend.
  KERAS_BACKEND=$backend .venv/bin/python -m pytest tests keras_vit --doctest-modules -q \
    -p no:cacheprovider "$@" 2>&1 | sed -u "s/^/[$backend] /" | tee "$logs/$backend.log"
  echo "${PIPESTATUS[0]}" >"$logs/$backend.status"
}

backends=(${KERAS_VIT_BACKENDS:-tensorflow jax torch})
for backend in "${backends[@]}"; do
  if [ "${KERAS_VIT_TEST_SERIAL:-0}" = 1 ]; then
    run_backend "$backend" "$@"
  else
    run_backend "$backend" "$@" &
  fi
done
wait

failed=0
passed_total=0
failed_total=0
count() { awk -v pat="$1" '{for (i = 2; i <= NF; i++) if ($i ~ pat) n += $(i - 1)} END {print n + 0}' <<<"$2"; }
for backend in "${backends[@]}"; do
  # pytest's last line: "N passed, M failed, ... in T s", after the backend's prefix.
  summary=$(tail -n 1 "$logs/$backend.log" | sed "s/^\[$backend\] //")
  echo "$backend: $summary"
  passed_total=$((passed_total + $(count '^passed' "$summary")))
  failed_total=$((failed_total + $(count '^(failed|errors?)' "$summary")))
  [ "$(cat "$logs/$backend.status" 2>/dev/null)" = 0 ] || failed=1
done
echo "all backends: $passed_total passed, $failed_total failed"
exit $failed
