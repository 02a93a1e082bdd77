"""What a fresh container lacks, mounted by the image's entrypoint (runner/cli/container.py).

Why not leave it to `doctor --fix`: every `docker run` starts from a fresh
mount namespace, and docker mounts no tracefs, no debugfs and, on a hybrid
cgroup host, no cgroup v2. Without them `run` stops at its first check, so
each container would need `doctor --fix` first. The mounts are cheap and
`fix_mounts` only adds what is missing, so the entrypoint does them every
time; headers (slow, network) stay with `doctor --fix`. Each mount it makes
or fails to make is one line on stderr; a failure (no CAP_SYS_ADMIN) is then
explained by the command's own checks.
"""

from __future__ import annotations

from collections.abc import Iterator

from runner.errors import RunnerError
from runner.host.mounts import cgroup2_mount, fix_mounts, mounts, remount_writable


def fix_container_mounts() -> Iterator[str]:
    """`fix_mounts`, then make a read-only cgroup v2 mount writable.

    Docker mounts cgroup v2 read-only in a container without --privileged
    (on a cgroup v2 host, or when bound with `:ro`). Inside the container's
    own mount namespace clearing that flag is harmless; on a host a
    read-only cgroup2 mount is deliberate, so `doctor --fix` leaves it.
    """
    yield from fix_mounts()
    try:
        target = cgroup2_mount()
    except RunnerError:
        return  # fix_mounts said why
    if any(m.mount_point == target and m.read_only for m in mounts()):
        yield remount_writable(target)
