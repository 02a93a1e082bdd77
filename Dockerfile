# assay-runner in a container (Debian 12 "bookworm", like the machines it is
# tested on). The image holds the same prerequisites `make setup` installs:
# python3-bpfcc, bpftrace, strace, the venv from /usr/bin/python3 with
# --system-site-packages, and the package installed into it.
#
# eBPF is not namespaced: the container observes the HOST kernel, so it must
# run --privileged (CAP_BPF, CAP_SYS_ADMIN, cgroup and pid-namespace creation)
# and see the host's kernel interfaces and headers:
#
#   docker build -t assay-runner .
#   docker run --rm --privileged --cgroupns=private \
#     -v /sys/kernel/tracing:/sys/kernel/tracing \
#     -v /sys/kernel/debug:/sys/kernel/debug \
#     -v /lib/modules:/lib/modules:ro -v /usr/src:/usr/src:ro \
#     -v "$PWD/runs:/opt/assay-runner/runs" \
#     assay-runner run --out runs -- CMD...
#
# - tracefs/debugfs: mount them on the host first (`sudo assay-runner doctor
#   --fix`, or `mount -t tracefs tracefs /sys/kernel/tracing`); without the
#   binds, `doctor --fix` inside the container mounts them for that container.
# - Kernel headers are per kernel, so they cannot be baked in at build time
#   (the build host's kernel is not the run host's). Bind the host's
#   /lib/modules and /usr/src read-only after setting headers up on the host
#   (`sudo make setup` or `sudo assay-runner doctor --fix`, docs/setup.md). Or
#   drop those two binds and run `doctor --fix` first in the same container
#   (it installs the closest headers package with apt; network needed), e.g.
#   --entrypoint sh IMAGE -c '.venv/bin/assay-runner doctor --fix &&
#   exec .venv/bin/assay-runner run --out runs -- CMD...'.
# - `docker run ... assay-runner` with no arguments runs `doctor`.
FROM debian:bookworm

ENV DEBIAN_FRONTEND=noninteractive \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /opt/assay-runner
COPY . .

# A developer's .venv/runs/egg-info in the build context belong to the host
# (the editable install points at the host's checkout): start clean.
# --no-doctor: no kernel fixes at build time (no tracefs, and the kernel
# seen here is the build host's). The run-time `doctor --fix` does them.
RUN rm -rf .venv runs build ./*.egg-info \
 && bash scripts/setup.sh --no-doctor

ENTRYPOINT ["/opt/assay-runner/.venv/bin/assay-runner"]
CMD ["doctor"]
