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
# gcc, libc6-dev (gcc only recommends it) and python3-dev: the C pieces (scripts/build_native.sh).
# systemd: systemd-analyze and systemd-socket-activate for the daemon's unit tests (tests/test_packaging.py).
PACKAGES=(python3-bpfcc python3-venv python3-dev bpftrace strace make gcc libc6-dev iproute2 git ca-certificates
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

# 3b. The four C pieces (ring consumer, normalizer accelerator, spool frame
#     reader, fast daemon client), each rebuilt when older than its source; a piece that cannot be
#     built stops set-up with what to install (scripts/build_native.sh).
bash scripts/build_native.sh "$VENV"

# 3c. The OCI registry that the push, pull and shipping tests start
#     (tests/registry_support.py): Debian's docker-registry, unpacked into the
#     venv rather than installed, because the package enables a service that
#     listens on :5000 on every interface.
REGISTRY="$VENV/registry/usr/bin/docker-registry"
if [ -x "$REGISTRY" ]; then
  say "docker-registry: already unpacked ($REGISTRY)"
else
  dl=$(mktemp -d)
  if ! (cd "$dl" && apt-get download docker-registry) >"$LOG" 2>&1; then
    quiet apt-get update
    (cd "$dl" && quiet apt-get download docker-registry)
  fi
  quiet dpkg-deb -x "$dl"/docker-registry_*.deb "$VENV/registry"
  rm -rf "$dl"
  say "docker-registry: unpacked into $VENV/registry"
fi

# 4. Kernel side: tracefs/debugfs mounts and kernel headers (exact package,
#    else the closest distro headers + /lib/modules links), then every check.
if [ "$run_doctor" -eq 0 ]; then
  say "doctor --fix: skipped (--no-doctor)"
  exit 0
fi
say "doctor --fix:"
"$VENV/bin/assay-runner" doctor --fix || die "a required check failed (FAIL lines above; docs/setup.md)"
