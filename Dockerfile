# assay-runner in a container: Debian 12 "bookworm", like the machines it is
# tested on. docs/setup.md ("Containers") has the build, the `docker run`
# line (tested by tests/test_image.py), the extra-CA option and the sizes:
#
#   make image          # debootstraps the base when absent, then builds
#
# eBPF is not namespaced: the container observes the HOST kernel. It shares
# the host's pid and cgroup namespaces (kernel events carry host pids and the
# BPF filter uses absolute cgroup levels) and needs CAP_SYS_ADMIN, which the
# kernel accepts for BPF (bpf_capable). --privileged is not needed, and fails
# on hosts whose capability bounding set is smaller than docker's full set.
# The entrypoint (runner/cli/container.py) mounts tracefs, debugfs and cgroup
# v2 inside the container when they are missing, then runs the CLI.
# Kernel headers are per kernel, so they are not baked in: bind the host's
# /lib/modules and /usr/src read-only (set up on the host by `make setup`).
#
# Build arguments and inputs:
# - BASE_IMAGE: a Debian bookworm image. The default is the minbase rootfs that
#   `scripts/image.sh` makes with debootstrap and imports (no registry needed).
#   A pulled `debian:bookworm-slim` should do as well (not tried: no registry).
# - docker/extra-ca/*.crt: extra CA certificates (PEM) the image trusts, for
#   builds behind a TLS-intercepting proxy. `make image` fills it from the host
#   (EXTRA_CA=host, the default) or a file (EXTRA_CA=path); docs/setup.md.
#
# Two stages: `build` makes the venv (pip and its downloads stay there) and
# builds the four C pieces with scripts/build_native.sh, the script `make
# setup` runs (gcc and the headers stay there); the final stage adds only
# Debian's python3-bpfcc, copies the checkout with its venv and pieces, and
# fails the build unless each piece loads there (`python -m runner.host.native`).
ARG BASE_IMAGE=assay-runner-base:bookworm

FROM ${BASE_IMAGE} AS build
# The label lets scripts/image.sh prune only this project's old images.
LABEL org.assay-runner.image=1
ENV DEBIAN_FRONTEND=noninteractive \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt
COPY docker/extra-ca/ /tmp/extra-ca/
# gcc, libc6-dev and python3-dev: the C pieces. The accelerator is a CPython
# extension; the final stage's python3 (python3-bpfcc's) is the same Debian
# python3 from the same base, so its ABI is the one built for here.
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv python3-dev gcc libc6-dev \
    ca-certificates \
 && find /tmp/extra-ca -name '*.crt' -exec cp {} /usr/local/share/ca-certificates/ \; \
 && update-ca-certificates
WORKDIR /opt/assay-runner
# Dependencies first, from pyproject.toml alone: this layer stays cached while
# only the sources change. setuptools is the build backend (no build isolation
# below, so no second download); it stays in this stage.
COPY pyproject.toml ./
RUN python3 -m venv --system-site-packages .venv \
 && python3 -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' >/tmp/requirements.txt \
 && .venv/bin/pip install --no-input -r /tmp/requirements.txt "setuptools>=68"
# The checkout (.dockerignore leaves out tests, docs and the like), installed
# editable as `make setup` does: the C pieces are built into the checkout's
# package directories, where the runner loads them from. A piece that cannot
# be built stops the build (the script exits 1 and says what is missing).
COPY . .
RUN .venv/bin/pip install --no-input --no-deps --no-build-isolation -e . \
 && bash scripts/build_native.sh .venv \
 && .venv/bin/pip uninstall -y -q setuptools pip \
 && rm -rf docker build scripts ./*.egg-info \
 && find . -name __pycache__ -prune -exec rm -rf {} +

FROM ${BASE_IMAGE}
LABEL org.assay-runner.image=1
ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONDONTWRITEBYTECODE=1
COPY --from=build /usr/local/share/ca-certificates/ /usr/local/share/ca-certificates/
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3-bpfcc ca-certificates \
 && update-ca-certificates \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /var/cache/debconf/*-old /var/log/apt /var/log/dpkg.log
COPY --from=build /opt/assay-runner /opt/assay-runner
WORKDIR /opt/assay-runner
# Every C piece is in place and loads with this stage's Python and C library:
# otherwise the build fails here instead of the image silently taking the
# slower Python paths.
RUN .venv/bin/python -m runner.host.native
ENTRYPOINT ["/opt/assay-runner/.venv/bin/python", "-m", "runner.cli.container"]
CMD ["doctor"]
