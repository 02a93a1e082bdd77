#!/usr/bin/env bash
# Build the assay-runner container image without a container registry (root).
#
#   scripts/image.sh [TAG]       default TAG: assay-runner:latest
#
# Environment:
#   BASE_IMAGE   base image (default assay-runner-base:bookworm). When that
#                default is absent it is made here: a debootstrap minbase of
#                Debian bookworm, imported with `docker import`. Any other
#                BASE_IMAGE must already be present (docker pull it).
#   EXTRA_CA     extra CA certificates for the build (docs/setup.md):
#                host (default) the host store's certificates that stock
#                     ca-certificates does not ship, e.g. a TLS proxy's CA;
#                PATH a PEM file; none: no extra CA.
#   ASSAY_IMAGE_CACHE  where the debootstrap tarball is cached
#                (default /var/cache/assay-runner). The tarball and the default
#                base image are remade after 30 days (security updates).
#
# Needs a running docker daemon (start one with `dockerd &` or
# `systemctl start docker`). Prints the image size at the end.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

TAG=${1:-assay-runner:latest}
DEFAULT_BASE=assay-runner-base:bookworm
# Bump when make_base changes: a base made by an older recipe is remade.
BASE_RECIPE=2
MAX_AGE_DAYS=30
BASE_IMAGE=${BASE_IMAGE:-$DEFAULT_BASE}
EXTRA_CA=${EXTRA_CA:-host}
CACHE=${ASSAY_IMAGE_CACHE:-/var/cache/assay-runner}
MIRROR=http://deb.debian.org/debian
CA_DIR=docker/extra-ca

say() { printf 'image: %s\n' "$*"; }
die() { printf 'image: error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root (docker, debootstrap): use 'sudo make image'"
command -v docker >/dev/null || die "docker not found: apt-get install docker.io (or 'sudo make setup')"
docker info >/dev/null 2>&1 || die "no docker daemon answers: start one ('dockerd &' or 'systemctl start docker')"

LOG=$(mktemp -t assay-image.XXXXXX)
trap 'rm -f "$LOG"' EXIT

# The base: Debian's own packages, no registry. The tarball is cached so a
# machine that lost its docker images re-imports in a second.
make_base() {
  local tarball="$CACHE/debian-bookworm-minbase-r$BASE_RECIPE.tar" root
  if [ -s "$tarball" ] && [ -z "$(find "$tarball" -mtime +$MAX_AGE_DAYS)" ]; then
    say "base rootfs: cached $tarball"
  else
    command -v debootstrap >/dev/null || die "debootstrap not found: apt-get install debootstrap (or 'sudo make setup')"
    mkdir -p "$CACHE"
    root=$(mktemp -d "$CACHE/rootfs.XXXXXX")
    say "base rootfs: debootstrap --variant=minbase bookworm (about 30 s)"
    if ! debootstrap --variant=minbase bookworm "$root" "$MIRROR" >"$LOG" 2>&1; then
      tail -n 20 "$LOG" >&2
      rm -rf "$root"
      die "debootstrap failed (output above)"
    fi
    cat >"$root/etc/apt/sources.list" <<SOURCES
deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
SOURCES
    # Slim like Debian's -slim images: no docs (copyright files stay), man
    # pages or translations, now and for every package installed later.
    cat >"$root/etc/dpkg/dpkg.cfg.d/assay-runner-slim" <<'SLIM'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
SLIM
    find "$root/usr/share/doc" -type f ! -name copyright -delete
    rm -rf "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/*
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin "$root"/var/lib/apt/lists/*
    tar --numeric-owner -C "$root" -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
    rm -rf "$root"
    say "base rootfs: cached $tarball"
  fi
  docker import --change 'CMD ["bash"]' --change "LABEL org.assay-runner.base-recipe=$BASE_RECIPE" \
    "$tarball" "$DEFAULT_BASE" >/dev/null
  say "base image: imported $DEFAULT_BASE"
}

# The default base is current when its recipe label matches and it is
# younger than MAX_AGE_DAYS.
base_current() {
  local recipe created
  recipe=$(docker image inspect -f '{{index .Config.Labels "org.assay-runner.base-recipe"}}' \
    "$DEFAULT_BASE" 2>/dev/null) || return 1
  created=$(docker image inspect -f '{{.Created}}' "$DEFAULT_BASE")
  [ "$recipe" = "$BASE_RECIPE" ] \
    && [ $(( $(date +%s) - $(date -d "$created" +%s) )) -lt $((MAX_AGE_DAYS * 86400)) ]
}

if [ "$BASE_IMAGE" = "$DEFAULT_BASE" ]; then
  if base_current; then
    say "base image: $BASE_IMAGE already present"
  else
    make_base
  fi
elif docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  say "base image: $BASE_IMAGE already present"
else
  die "base image $BASE_IMAGE is not present: 'docker pull $BASE_IMAGE', or leave BASE_IMAGE unset"
fi

# Extra CAs go into the build context for this build only.
rm -f "$CA_DIR"/build-extra-*.crt
trap 'rm -f "$CA_DIR"/build-extra-*.crt "$LOG"' EXIT
case "$EXTRA_CA" in
  none) say "extra CA: none" ;;
  *) python3 scripts/extra_ca.py "$EXTRA_CA" "$CA_DIR" | sed 's/^/image: /' ;;
esac

# The classic builder: it is in every docker (Debian's docker.io has no
# buildx, and a newer CLI without the buildx plugin refuses BuildKit).
build() {
  DOCKER_BUILDKIT=0 docker build --build-arg "BASE_IMAGE=$BASE_IMAGE" "$@" . >"$LOG" 2>&1 \
    || { tail -n 30 "$LOG" >&2; die "docker build failed (output above)"; }
}
say "docker build -t $TAG (BASE_IMAGE=$BASE_IMAGE)"
start=$SECONDS
build -t "$TAG"
# Keep the build stage tagged (all cached, a second), so that pruning this
# project's untagged images below does not throw the pip layers away.
build --target build -t "$TAG-build-stage"
docker image prune -f --filter label=org.assay-runner.image=1 --filter until=30m >/dev/null
size=$(docker image inspect -f '{{.Size}}' "$TAG")
say "built $TAG in $((SECONDS - start)) s; size $((size / 1000000)) MB ($size bytes)"
