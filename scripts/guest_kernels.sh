#!/usr/bin/env bash
# Prepare what the kernel matrix (scripts/kernel_matrix.py) boots: run as root.
#
#   scripts/guest_kernels.sh debian-6.1 [debian-6.12 debian-5.10 ...]
#
# Installs qemu-system-x86 and busybox-static (apt) and virtme-ng (pip, into .venv), then fetches
# each named Debian kernel from the Debian registry with `apt-get download`
# (the image with its modules, and its headers, which BCC compiles against) and
# unpacks them with `dpkg-deb -x` into $ASSAY_GUEST_KERNELS (default
# /var/lib/assay-runner/guest-kernels/<abi>/root: virtme-ng hides /var/cache from its guests);
# nothing is installed on the host.
# The generic -amd64 flavour: the -cloud-amd64 kernels lack 9p, which
# virtme-ng mounts the guest's root with. A kernel is named by the Debian
# meta-package that tracks it, so the newest build of that line is fetched.
# A kernel of another Debian release than the host's (5.10: Debian 11) is
# found through apt lists of that release's own, kept in the cache and read
# only for it: the host's apt sources are not touched.
# Prints one line per kernel: `<name> <abi> <dir>`. Every step checks before it
# acts, so a second run is fast and offline.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VENV=.venv
CACHE=${ASSAY_GUEST_KERNELS:-/var/lib/assay-runner/guest-kernels}
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1

say() { printf 'guest-kernels: %s\n' "$*" >&2; }
die() { printf 'guest-kernels: error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root (apt-get)"
[ $# -gt 0 ] || die "usage: scripts/guest_kernels.sh debian-6.1|debian-6.12 ..."
[ -x "$VENV/bin/python" ] || die "no $VENV: run 'make setup' first"

# The Debian meta-packages naming each kernel line (image, headers), and the Debian
# release to find them in ("" for the host's own apt sources).
meta() {
  case "$1" in
    debian-5.10) echo "linux-image-amd64 linux-headers-amd64 bullseye" ;;
    debian-6.1) echo "linux-image-amd64 linux-headers-amd64" ;;
    debian-6.12) echo "linux-image-6.12-amd64 linux-headers-6.12-amd64" ;;
    *) die "unknown kernel '$1' (known: debian-5.10 debian-6.1 debian-6.12)" ;;
  esac
}

# apt options reading the lists of one release (none: the host's), fetched once into the cache.
APT=()
use_release() {
  APT=()
  [ -n "$1" ] || return 0
  local dir=$CACHE/apt-$1
  APT=(-o "Dir::Etc::SourceList=$dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
       -o "Dir::State::Lists=$dir/lists" -o "Dir::Cache=$dir/cache")
  if [ ! -e "$dir/ready" ]; then
    mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial"
    echo "deb http://deb.debian.org/debian $1 main" >"$dir/sources.list"
    apt-get "${APT[@]}" update >&2 || die "cannot fetch the apt lists of Debian $1"
    touch "$dir/ready"
  fi
}

# The one package a meta-package depends on (the current build of its line).
target() {
  apt-cache "${APT[@]}" depends "$1" 2>/dev/null | awk '/Depends: linux-/ {print $2; exit}'
}

# busybox: virtme-ng builds the guest's initramfs with it.
for pkg in qemu-system-x86 busybox-static; do
  [ "$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)" = installed ] && continue
  apt-get install -y --no-install-recommends "$pkg" >&2 \
    || { apt-get update >&2 && apt-get install -y --no-install-recommends "$pkg" >&2; } \
    || die "cannot install $pkg"
  say "$pkg: installed"
done
if [ ! -x "$VENV/bin/vng" ]; then
  "$VENV/bin/pip" install -q virtme-ng >&2 || die "cannot pip install virtme-ng"
  say "virtme-ng: installed into $VENV"
fi

for name in "$@"; do
  read -r image_meta headers_meta release <<<"$(meta "$name")"
  use_release "$release"
  image=$(target "$image_meta")
  if [ -z "$image" ]; then
    apt-get "${APT[@]}" update >&2 || true
    image=$(target "$image_meta")
  fi
  [ -n "$image" ] || die "$image_meta names no kernel package (apt lists?)"
  headers=$(target "$headers_meta")
  abi=${image#linux-image-}
  common=$(apt-cache "${APT[@]}" depends "$headers" | awk '/Depends: linux-headers-.*-common/ {print $2; exit}')
  [ -n "$headers" ] && [ -n "$common" ] || die "no headers for $image in the apt lists"
  dir=$CACHE/$abi
  if [ ! -e "$dir/ready" ]; then
    rm -rf "$dir" && mkdir -p "$dir/debs" "$dir/root"
    (cd "$dir/debs" && apt-get "${APT[@]}" download "$image" "$headers" "$common" >&2) \
      || die "apt-get download $image $headers $common failed"
    for deb in "$dir"/debs/*.deb; do dpkg-deb -x "$deb" "$dir/root"; done
    # The headers' build link points at /usr/src on the machine they are installed on;
    # here they stay in the cache, which the guest sees at the same path.
    ln -sfn "$dir/root/usr/src/linux-headers-$abi" "$dir/root/lib/modules/$abi/build"
    ln -sfn "$dir/root/usr/src/$common" "$dir/root/lib/modules/$abi/source"
    [ -e "$dir/root/lib/modules/$abi/build/include" ] || die "headers of $abi did not unpack as expected"
    rm -rf "$dir/debs"
    touch "$dir/ready"
    say "$name: fetched and unpacked $image into $dir"
  fi
  echo "$name $abi $dir"
done
