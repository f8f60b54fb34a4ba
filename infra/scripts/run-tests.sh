#!/usr/bin/env bash
# The whole suite in two runs (make test, make test-fast):
#   1. every test that can share the machine, on TEST_WORKERS pytest-xdist workers, each with
#      its own database, Redis index, agents' users, Slurm accounts and folders
#      (tests/support/workers.py), a test file to a worker at a time;
#   2. the tests marked `serial` (the firewall's table, the whole demo, whole Slurm nodes), alone.
# Then the slowest tests, the time per test folder and both runs' counts. Exits non-zero when
# either run failed; both always run, so one failure does not hide another.
#
# usage: run-tests.sh PYTHON [PYTEST ARGS...]    (TEST_MARK: a marker expression to add)
set -uo pipefail
python=$1; shift
workers=${TEST_WORKERS:-4}
mark=${TEST_MARK:-}
logs=var/test-logs
mkdir -p "$logs"
export ARENA_TEST_TIMINGS="$PWD/$logs/timings.jsonl"
: > "$ARENA_TEST_TIMINGS"

both() {  # the marker expression for one run: its own and TEST_MARK's
  if [ -n "$mark" ]; then printf '(%s) and %s' "$mark" "$1"; else printf '%s' "$1"; fi
}

started=$(date +%s)
# The tiny models first, on both cores: most of the longest files need them, and a worker
# waiting for another's build (the build holds a lock on the folder) would do nothing meanwhile.
echo "[tests] the tiny models (var/test-models; skipped when up to date)"
"$python" -m infra.tiny_models build --out var/test-models | sed 's/^/[tiny-models] /' || exit 1
# The Nemotron-H kit beside the parallel run: few files need it, and they wait on its lock.
echo "[tests] the tiny Nemotron-H models in the background (var/test-models-nemotron; $logs/tiny-nemotron.log)"
"$python" -m infra.tiny_models build --arch nemotron_h --out var/test-models-nemotron \
  > "$logs/tiny-nemotron.log" 2>&1 &
nemotron=$!
echo "[tests] parallel run: $workers workers, tests not marked serial"
# --no-loadscope-reorder: the files go out longest first (tests/durations.json), not by count.
"$python" -m pytest -n "$workers" --dist loadfile --no-loadscope-reorder \
  -m "$(both 'not serial')" "$@"
parallel=$?
wait "$nemotron" || echo "[tests] the Nemotron-H kit's build failed: see $logs/tiny-nemotron.log"
parallel_done=$(date +%s)
echo "[tests] serial run: the tests marked serial, alone"
"$python" -m pytest -p no:xdist -m "$(both 'serial')" "$@"
serial=$?
finished=$(date +%s)

"$python" -m tests.support.timing "$ARENA_TEST_TIMINGS"
echo "[tests] parallel run $((parallel_done - started)) s (exit $parallel)," \
  "serial run $((finished - parallel_done)) s (exit $serial), all $((finished - started)) s"
# pytest's 5 is "no test collected": fine for one run (a selection with no serial test),
# not for both. Otherwise the first run's failure, else the second's.
[ "$parallel" -eq 5 ] && [ "$serial" -eq 5 ] && exit 5
for status in "$parallel" "$serial"; do
  [ "$status" -ne 0 ] && [ "$status" -ne 5 ] && exit "$status"
done
exit 0
