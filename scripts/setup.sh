#!/usr/bin/env bash
# Set up a fresh Debian/Ubuntu machine for assay-runner (run as root).
#
#   scripts/setup.sh              apt packages, venv, pip install, then doctor --fix
#   scripts/setup.sh --no-doctor  stop after pip (no kernel to fix yet, e.g. in a chroot)
#
# Every step checks before it acts and prints one line saying what it did or
# that it was already done, so a second run is fast. Kernel headers and the
# tracefs/debugfs mounts are fixed by `assay-runner doctor --fix`
# (runner/host/), the same code `doctor` checks with. See docs/setup.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VENV=.venv
# docker.io and debootstrap: `make image` and its smoke test (tests/test_image.py).
# bubblewrap: the external sandbox the probe harness is tested under (docs/probes.md).
# chromium: the HTML report test renders a report headless (tests/test_report_browser.py).
# systemd: systemd-analyze and systemd-socket-activate for the daemon's unit tests (tests/test_packaging.py).
PACKAGES=(python3-bpfcc python3-venv python3-dev bpftrace strace make gcc iproute2 git ca-certificates
          docker.io debootstrap systemd bubblewrap chromium bpftool)
# npm: the npm determinism workload (tests/test_transient_kernel.py). Machines
# that ship Node.js from another source already have it; Debian's otherwise.
command -v npm >/dev/null || PACKAGES+=(npm)
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1

say() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

run_doctor=1
case "${1:-}" in
  "") ;;
  --no-doctor) run_doctor=0 ;;
  *) die "unknown option '$1' (usage: scripts/setup.sh [--no-doctor])" ;;
esac

[ "$(id -u)" -eq 0 ] || die "must run as root (apt-get, mounts, /lib/modules links): use 'sudo make setup'"
command -v apt-get >/dev/null || die "apt-get not found: on other distros install the packages by hand (docs/setup.md)"

LOG=$(mktemp -t assay-setup.XXXXXX)
trap 'rm -f "$LOG"' EXIT

# Run a noisy command with its output in $LOG; on failure show the tail and stop.
quiet() {
  if ! "$@" >"$LOG" 2>&1; then
    tail -n 20 "$LOG" >&2
    die "'$*' failed (output above)"
  fi
}

# 1. apt packages: dpkg is asked first, apt-get update only runs when a
#    package is missing and there are no package lists (fresh images), or
#    when an install from stale lists fails.
missing=()
for pkg in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
  [ "$status" = installed ] || missing+=("$pkg")
done
if [ ${#missing[@]} -eq 0 ]; then
  say "apt packages: already installed (${PACKAGES[*]})"
else
  if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
    quiet apt-get update
    say "apt-get update: done (there were no package lists)"
  fi
  install=(apt-get install -y --no-install-recommends "${missing[@]}")
  if ! "${install[@]}" >"$LOG" 2>&1; then
    quiet apt-get update
    say "apt-get update: done (install from the old lists failed)"
    quiet "${install[@]}"
  fi
  say "apt packages: installed ${missing[*]}"
fi

# 2. The venv: Debian's python (bcc is Debian's python3-bpfcc, built for it),
#    with --system-site-packages so `import bcc` works inside the venv.
venv_ok() {
  [ -x "$VENV/bin/python" ] \
    && grep -qx 'home = /usr/bin' "$VENV/pyvenv.cfg" \
    && grep -qx 'include-system-site-packages = true' "$VENV/pyvenv.cfg"
}
if venv_ok; then
  say "venv: already at $VENV (/usr/bin/python3, system site-packages)"
else
  what="created $VENV"
  if [ -e "$VENV" ]; then
    rm -rf "$VENV"
    what="rebuilt $VENV (the old one could not see Debian's bcc)"
  fi
  quiet /usr/bin/python3 -m venv --system-site-packages "$VENV"
  say "venv: $what from /usr/bin/python3 --system-site-packages"
fi

# 3. pip install -e '.[dev,sdk]' (sdk: the OpenAI Agents SDK fixture that
#    `make demo` runs), skipped while pyproject.toml and the extras are
#    unchanged. The stamp hashes both, so changing EXTRAS reinstalls once; it
#    lives inside the venv, so a new venv always gets a fresh install.
EXTRAS=dev,sdk
stamp="$VENV/.assay-setup-stamp"
want=$({ cat pyproject.toml; echo "extras=$EXTRAS"; } | sha256sum | cut -d' ' -f1)
if [ -x "$VENV/bin/assay-runner" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  say "pip install -e .[$EXTRAS]: already done (pyproject.toml and extras unchanged)"
else
  quiet "$VENV/bin/pip" install --no-input -e ".[$EXTRAS]"
  echo "$want" >"$stamp"
  say "pip install -e .[$EXTRAS]: installed"
fi

# 3b. The C ring-buffer consumer (ebpf/ringsink.c, loaded with ctypes by
#     ebpf/ringsink.py), rebuilt when its source is newer. Without it the
#     runner reads the ring with one Python call per record.
so=ebpf/_ringsink.so
if [ -f "$so" ] && [ "$so" -nt ebpf/ringsink.c ]; then
  say "ring consumer: already built ($so)"
else
  quiet gcc -O2 -Wall -Wextra -Werror -shared -fPIC -o "$so" ebpf/ringsink.c
  say "ring consumer: built $so"
fi

# 3c. The normalizer's C accelerator (normalizer/fastscan.c, a CPython extension:
#     normalizer/accel.py), rebuilt when its source is newer. Without it the
#     normalizer runs its pure-Python path, with the same output.
ext=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
inc=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
so=normalizer/_fastscan$ext
if [ -f "$so" ] && [ "$so" -nt normalizer/fastscan.c ]; then
  say "normalizer accelerator: already built ($so)"
else
  quiet gcc -O2 -Wall -Wextra -Werror -shared -fPIC -I"$inc" -o "$so" normalizer/fastscan.c
  say "normalizer accelerator: built $so"
fi

# 3d. The fast daemon client (runner/daemon/fastclient.c) becomes the venv's
#     `assay-runner`: it serves `run` through the daemon without Python's
#     start-up and hands every other use to the Python CLI, `assay-runner-py`
#     (docs/daemon.md). Rebuilt when pip put its script back or the source is newer.
client=$VENV/bin/assay-runner
if [ "$(head -c4 "$client" 2>/dev/null)" = $'\x7fELF' ] && [ "$client" -nt runner/daemon/fastclient.c ]; then
  say "fast client: already built ($client)"
else
  quiet gcc -O2 -Wall -Wextra -Werror -o "$client.new" runner/daemon/fastclient.c
  mv -f "$client.new" "$client"
  say "fast client: built $client (the Python CLI is $VENV/bin/assay-runner-py)"
fi

# 4. Kernel side: tracefs/debugfs mounts and kernel headers (exact package,
#    else the closest distro headers + /lib/modules links), then every check.
if [ "$run_doctor" -eq 0 ]; then
  say "doctor --fix: skipped (--no-doctor)"
  exit 0
fi
say "doctor --fix:"
"$VENV/bin/assay-runner" doctor --fix || die "a required check failed (FAIL lines above; docs/setup.md)"
