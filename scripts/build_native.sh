#!/usr/bin/env bash
# Build assay-runner's four C pieces in the checkout, for the venv's Python.
#
#   scripts/build_native.sh [VENV]     default VENV: .venv (made by scripts/setup.sh)
#   scripts/build_native.sh --sanitize DIR [VENV]
#                                      the same four pieces with AddressSanitizer and
#                                      UndefinedBehaviorSanitizer, into DIR instead of the
#                                      checkout (`make test-asan`, tests/sanitized.py):
#                                      DIR/_ringsink.so, DIR/_fastscan*.so, DIR/_framescan*.so,
#                                      DIR/bin/assay-runner (its Python CLI,
#                                      DIR/bin/assay-runner-py, links to VENV's)
#
#   ebpf/_ringsink.so        the ring consumer (ebpf/ringsink.c, loaded with ctypes
#                            by ebpf/ringsink.py); plain C, no libbpf headers
#   normalizer/_fastscan*.so the normalizer accelerator (normalizer/fastscan.c), a
#                            CPython extension for VENV's Python (normalizer/accel.py)
#   spool/_framescan*.so     the spool reader's frame walk (spool/framescan.c), a
#                            CPython extension for VENV's Python (spool/accel.py)
#   VENV/bin/assay-runner    the fast daemon client (runner/daemon/fastclient.c); it
#                            replaces pip's script and hands everything but a daemon
#                            run to the Python CLI, VENV/bin/assay-runner-py
#
# `make setup` (scripts/setup.sh) and the image build (Dockerfile) both call
# this, so a host and the image build the same pieces the same way. Each
# piece is rebuilt when missing or older than its source (the client also
# when pip put its Python script back) and gets one line saying which. Each
# has a Python fallback with the same output, so nothing would notice a
# missing one but the clock: a piece that cannot be built stops this script
# with exit 1 and one line saying what to install. `python -m
# runner.host.native` then says whether each is in place and loads.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

SANITIZE=
if [ "${1:-}" = --sanitize ]; then
  SANITIZE=${2:?--sanitize needs a directory}
  shift 2
fi
VENV=${1:-.venv}
CFLAGS=(-O2 -Wall -Wextra -Werror)
RING_SO=ebpf/_ringsink.so
SCAN_DIR=normalizer
FRAME_DIR=spool
CLIENT=$VENV/bin/assay-runner

say() { printf 'native: %s\n' "$*"; }
die() { printf 'native: error: %s\n' "$*" >&2; exit 1; }

[ -x "$VENV/bin/python" ] || die "no venv at $VENV: run 'sudo make setup' (or scripts/setup.sh) first"

# A sanitized build: its own tree, never the checkout's pieces (an ASan library needs libasan
# preloaded into the process that loads it). Every finding aborts: no error is recovered from.
if [ -n "$SANITIZE" ]; then
  CFLAGS=(-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
          -Wall -Wextra -Werror)
  mkdir -p "$SANITIZE/bin"
  RING_SO=$SANITIZE/_ringsink.so
  SCAN_DIR=$SANITIZE
  FRAME_DIR=$SANITIZE
  CLIENT=$SANITIZE/bin/assay-runner
  ln -sfn "$(realpath "$VENV/bin/assay-runner-py")" "$SANITIZE/bin/assay-runner-py"
fi

LOG=$(mktemp -t assay-native.XXXXXX)
trap 'rm -f "$LOG"' EXIT

# The compiler is checked once, and only when something needs building: a
# machine whose pieces are built needs no compiler for a second run.
compiler_checked=0
need_compiler() {
  [ "$compiler_checked" -eq 1 ] && return
  command -v gcc >/dev/null || die "gcc not found: apt-get install gcc libc6-dev (or 'sudo make setup')"
  printf '#include <stdint.h>\n#include <sys/socket.h>\n' | gcc -E -x c - -o /dev/null >/dev/null 2>&1 \
    || die "the C library headers are missing (gcc cannot find stdint.h): apt-get install libc6-dev"
  compiler_checked=1
}

# compile WHAT OUT GCC-ARGS...: gcc into OUT.tmp, then rename (nothing half-written).
compile() {
  local what=$1 out=$2
  shift 2
  if ! gcc "${CFLAGS[@]}" "$@" -o "$out.tmp" >"$LOG" 2>&1; then
    rm -f "$out.tmp"
    tail -n 20 "$LOG" >&2
    die "gcc could not build the $what ($out; output above)"
  fi
  mv -f "$out.tmp" "$out"
}

# 1. The ring consumer. Without it the runner reads the ring with one Python
#    call per record.
so=$RING_SO
if [ -f "$so" ] && [ "$so" -nt ebpf/ringsink.c ]; then
  say "ring consumer: already built ($so)"
else
  need_compiler
  compile "ring consumer" "$so" -shared -fPIC ebpf/ringsink.c
  say "ring consumer: built $so"
fi

# 2. The normalizer accelerator, for the venv's Python (its ABI suffix and
#    headers). Without it the normalizer runs its pure-Python path, 2-5x slower.
read -r ext inc < <("$VENV/bin/python" -c \
  'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"), sysconfig.get_paths()["include"])') || true
[ -n "${inc:-}" ] || die "$VENV/bin/python cannot tell its extension suffix and include directory"
# build_extension NAME SO SOURCE: a CPython extension, rebuilt when older than its source.
build_extension() {
  if [ -f "$2" ] && [ "$2" -nt "$3" ]; then
    say "$1: already built ($2)"
  else
    need_compiler
    [ -f "$inc/Python.h" ] || die "Python.h not found in $inc: apt-get install python3-dev"
    compile "$1" "$2" -shared -fPIC -I"$inc" "$3"
    say "$1: built $2"
  fi
}
build_extension "normalizer accelerator" "$SCAN_DIR/_fastscan$ext" normalizer/fastscan.c

# 3. The spool reader's frame walk, for the venv's Python, like the accelerator. Without it
#    its Python twin walks the frames, slower.
build_extension "spool frame reader" "$FRAME_DIR/_framescan$ext" spool/framescan.c

# 4. The fast daemon client becomes the venv's `assay-runner` (docs/daemon.md).
#    Without it every client call pays Python's start-up (about 100 ms).
client=$CLIENT
[ -x "$VENV/bin/assay-runner-py" ] \
  || die "$VENV/bin/assay-runner-py is missing (the fast client hands over to it): pip install -e . first"
if [ "$(head -c4 "$client" 2>/dev/null)" = $'\x7fELF' ] && [ "$client" -nt runner/daemon/fastclient.c ]; then
  say "fast client: already built ($client)"
else
  need_compiler
  compile "fast client" "$client" runner/daemon/fastclient.c
  say "fast client: built $client (the Python CLI is $VENV/bin/assay-runner-py)"
fi
