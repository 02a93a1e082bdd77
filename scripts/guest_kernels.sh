#!/usr/bin/env bash
# Prepare what the kernel matrix (scripts/kernel_matrix.py) boots: run as root.
#
#   scripts/guest_kernels.sh debian-6.1 [debian-6.12 ...]
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

# The Debian meta-packages naming each kernel line (image, headers).
meta() {
  case "$1" in
    debian-6.1) echo "linux-image-amd64 linux-headers-amd64" ;;
    debian-6.12) echo "linux-image-6.12-amd64 linux-headers-6.12-amd64" ;;
    *) die "unknown kernel '$1' (known: debian-6.1 debian-6.12)" ;;
  esac
}

# The one package a meta-package depends on (the current build of its line).
target() {
  apt-cache depends "$1" 2>/dev/null | awk '/Depends: linux-/ {print $2; exit}'
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
  read -r image_meta headers_meta <<<"$(meta "$name")"
  image=$(target "$image_meta")
  if [ -z "$image" ]; then
    apt-get update >&2 || true
    image=$(target "$image_meta")
  fi
  [ -n "$image" ] || die "$image_meta names no kernel package (apt lists?)"
  headers=$(target "$headers_meta")
  abi=${image#linux-image-}
  common=$(apt-cache depends "$headers" | awk '/Depends: linux-headers-.*-common/ {print $2; exit}')
  [ -n "$headers" ] && [ -n "$common" ] || die "no headers for $image in the apt lists"
  dir=$CACHE/$abi
  if [ ! -e "$dir/ready" ]; then
    rm -rf "$dir" && mkdir -p "$dir/debs" "$dir/root"
    (cd "$dir/debs" && apt-get download "$image" "$headers" "$common" >&2) \
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
