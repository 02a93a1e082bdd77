#!/usr/bin/env bash
# `make test-asan`: the four C pieces built with AddressSanitizer and UndefinedBehaviorSanitizer,
# then the suites that drive them (their C/Python twin tests, fuzz and Hypothesis tests) run
# against those builds (docs/setup.md, "Sanitized C").
#
#   scripts/test_asan.sh [PYTEST-ARGS...]   build into build/asan (never the checkout), run the suites
#   scripts/test_asan.sh --env LOGDIR       print the sanitizer environment, one NAME=VALUE a line,
#                                           reports going to LOGDIR (tests/test_sanitized.py uses it)
#
# The builds go to their own tree, because an ASan library loads only into a
# process that has libasan first: pytest's Python gets it through LD_PRELOAD
# (tests/sanitized.py drops it again for the processes the tests start), and
# leak checking is off (CPython frees little at exit by design). Every finding
# is fatal where it happens (halt_on_error, abort_on_error, -fno-sanitize-recover):
# the process aborts. ASan also writes each report to a file in LOGDIR, and any
# report fails the run, even one from a child process whose test would have
# accepted its exit; UBSan (dlopened after libasan) ignores log_path and reports
# on stderr, so its findings fail through the abort: pytest's own death, or a
# fast client dying of SIGABRT where the Python CLI exits normally.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VENV=${VENV:-.venv}
TREE=build/asan
SUITES=(tests/test_sanitized.py tests/test_ringsink.py tests/test_normspeed.py tests/test_spool_reader.py
        tests/test_streamed_publish.py tests/test_fuzz_normalizer.py tests/test_fuzz_readers.py
        tests/test_fastclient.py tests/test_fastclient_edges.py)

sanitizer_env() {
  local logdir=$1
  echo "LD_PRELOAD=$(gcc -print-file-name=libasan.so)"
  echo "ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:abort_on_error=1:log_path=$logdir/asan"
  echo "UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1"
}

if [ "${1:-}" = --env ]; then
  sanitizer_env "${2:?--env needs a report directory}"
  exit 0
fi

bash scripts/build_native.sh --sanitize "$TREE" "$VENV"
logs=$(realpath "$TREE")/reports
rm -rf "$logs"
mkdir -p "$logs"
mapfile -t senv < <(sanitizer_env "$logs")
status=0
env "${senv[@]}" ASSAY_NATIVE_SANITIZED="$TREE" \
  "$VENV/bin/pytest" -q -p no:cacheprovider "${SUITES[@]}" "$@" || status=$?
if [ -n "$(ls -A "$logs")" ]; then
  for report in "$logs"/*; do
    printf '== %s\n' "$report" >&2
    cat "$report" >&2
  done
  printf 'test-asan: the sanitizers reported the findings above (%s)\n' "$logs" >&2
  exit 1
fi
exit "$status"
