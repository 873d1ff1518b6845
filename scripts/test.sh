#!/usr/bin/env bash
# Installs what is needed, then runs the whole test suite once per Keras backend, each in its
# own process. Extra arguments go to pytest (e.g. -k parity).
#
# The backends run side by side: much of a test is single-threaded work (tracing, compiling,
# child processes starting), so on a small machine three processes finish well before three
# runs in a row. KERAS_VIT_TEST_SERIAL=1 runs them one after another instead; KERAS_VIT_BACKENDS
# picks backends (default: all three). Each line of output carries its run's name (jax-2: the
# second jax process, below).
#
# Bounds: each test has pytest-timeout's limit (pyproject.toml), which fails a hung test with
# its stack and lets the others run; the whole run stops at KERAS_VIT_TEST_LIMIT seconds
# from the start, install included (default 5200: CI kills at 5400 s, 90 minutes, without a
# word), naming each process still running. At the end it prints what the run cost: its wall
# time, the test CPU each backend logged (tests/cpu_time.py) and the peak memory of all its
# processes.
set -uo pipefail
cd "$(dirname "$0")/.."
limit=${KERAS_VIT_TEST_LIMIT:-5200}
bash scripts/setup.sh || exit 1

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
export KERAS_VIT_CPU_LOG=${KERAS_VIT_CPU_LOG:-$logs/cpu.jsonl}
touch "$KERAS_VIT_CPU_LOG"
.venv/bin/python scripts/peak_memory.py $$ "$logs/peak-memory" &
sampler=$!
# One persistent JAX compilation cache per run, fresh each time: the child processes of the
# recipe and fault tests compile the same train steps as each other. JAX's own threshold
# decides what goes in (compiles over a second): writing every eager op's compile too costs
# the test processes more than the hits save.
export JAX_COMPILATION_CACHE_DIR="$logs/jax-cache"
# Five test processes (and their children) share the machine's cores: each framework's own
# pool of worker threads per process would oversubscribe them, its threads spinning while
# they wait. PyTorch and TensorFlow run one compute thread per process here (a value
# already set is kept); JAX keeps its own, where the limit made its compiles slower.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} TF_NUM_INTRAOP_THREADS=${TF_NUM_INTRAOP_THREADS:-1}

# The jax and tensorflow runs are the longest (XLA compiles their tests' eager ops one shape
# at a time; their export, benchmark and fault tests start many child processes), and the
# backends side by side leave a core idle while one runs alone at the end: these of their
# files run in a second process of that backend from the start (KERAS_VIT_TEST_SPLIT=0: one
# process per backend).
declare -A SECOND=(
  [jax]="tests/test_export.py tests/test_quantization.py tests/test_benchmarks.py tests/test_faults.py
    tests/test_packaging.py tests/test_recipes.py tests/test_documented_commands.py tests/test_processes.py"
  [tensorflow]="tests/test_export.py tests/test_benchmarks.py tests/test_faults.py tests/test_packaging.py
    tests/test_recipes.py tests/test_quantization.py tests/test_family.py tests/test_documented_commands.py
    tests/test_distillation.py tests/test_accumulation.py"
)

# The parity tests once with XLA as users run it (its default optimisation, where the other
# processes compile cheaper: tests/conftest.py), on JAX, in a process of their own.
declare -A USERS_COMPILER=(
  [jax]="tests/test_family.py tests/test_checkpoint_parity.py tests/test_transformers.py tests/test_keras_hub.py"
)

# run NAME BACKEND PYTEST-ARGS...: one pytest process, its lines prefixed with [NAME].
run() {
  local name=$1 backend=$2 users=0
  shift 2
  [[ $name == *-users ]] && users=1
  # SIGINT at the limit: pytest stops where it is and says which test that was; its process
  # group (the test's children too) is killed a minute later if it has not stopped.
  local left=$((limit - SECONDS))
  ((left > 0)) || left=1  # timeout 0 would be none
  KERAS_VIT_USERS_COMPILER=$users KERAS_BACKEND=$backend timeout --signal=INT --kill-after=60 \
    "$left" .venv/bin/python -m pytest -q -p no:cacheprovider "$@" 2>&1 |
    sed -u "s/^/[$name] /" | tee "$logs/$name.log"
  local status=${PIPESTATUS[0]}
  # A second process may have nothing to run (-k, -m selecting none of its files).
  [[ $name == *-2 || $name == *-users ]] && [ "$status" = 5 ] && status=0
  echo "$status" >"$logs/$name.status"
}

# start NAME BACKEND PYTEST-ARGS...: run, side by side with the others (one after another
# with KERAS_VIT_TEST_SERIAL=1).
start() {
  runs+=("$1")
  if [ "${KERAS_VIT_TEST_SERIAL:-0}" = 1 ]; then
    run "$@"
  else
    run "$@" &
    pids+=($!)
  fi
}

backends=(${KERAS_VIT_BACKENDS:-tensorflow jax torch})
runs=()
pids=()
for backend in "${backends[@]}"; do
  # --doctest-modules: the examples in the public docstrings run too, on every backend.
  everything=(tests keras_vit --doctest-modules)
  if [ -n "${SECOND[$backend]:-}" ] && [ "${KERAS_VIT_TEST_SERIAL:-0}" != 1 ] && [ "${KERAS_VIT_TEST_SPLIT:-1}" != 0 ]; then
    second=(${SECOND[$backend]})
    start "$backend-2" "$backend" "${second[@]}" "$@"
    everything+=("${second[@]/#/--ignore=}")
  fi
  if [ -n "${USERS_COMPILER[$backend]:-}" ]; then
    users=(${USERS_COMPILER[$backend]})
    start "$backend-users" "$backend" "${users[@]}" "$@"
    everything+=("${users[@]/#/--ignore=}")
  fi
  start "$backend" "$backend" "${everything[@]}" "$@"
done
((${#pids[@]} == 0)) || wait "${pids[@]}"  # a bare wait would wait for the sampler too
kill "$sampler" 2>/dev/null

failed=0
passed_total=0
failed_total=0
count() { awk -v pat="$1" '{for (i = 2; i <= NF; i++) if ($i ~ pat) n += $(i - 1)} END {print n + 0}' <<<"$2"; }
for name in "${runs[@]}"; do
  # pytest's last line: "N passed, M failed, ... in T s", after the run's prefix.
  summary=$(tail -n 1 "$logs/$name.log" | sed "s/^\[$name\] //")
  echo "$name: $summary"
  status=$(cat "$logs/$name.status" 2>/dev/null)
  if [ "$status" = 124 ] || [ "$status" = 137 ]; then
    echo "$name: still running at the suite's limit, KERAS_VIT_TEST_LIMIT=$limit s: stopped (its test is in its last lines above)"
  fi
  passed_total=$((passed_total + $(count '^passed' "$summary")))
  failed_total=$((failed_total + $(count '^(failed|errors?)' "$summary")))
  [ "$(cat "$logs/$name.status" 2>/dev/null)" = 0 ] || failed=1
done
echo "all backends: $passed_total passed, $failed_total failed"
peak=$(cat "$logs/peak-memory" 2>/dev/null || echo 0)
echo "cost: wall $SECONDS s (install included); $(.venv/bin/python scripts/cpu_time.py --summary "$KERAS_VIT_CPU_LOG");" \
  "peak memory $(awk -v b="$peak" 'BEGIN {printf "%.1f", b / 2^30}') GiB (every test process and child, PSS)"
exit $failed
