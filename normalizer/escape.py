"""Cgroup escapes: a run task that leaves the run's cgroup, as evidence.

The monitor follows the run's tasks by lineage, so an escaped task is still
observed; what it escapes is everything bound to the cgroup: the network
policy's sock_addr programs and `cgroup.kill` at the end of the run. So an
escape is evidence (a kernel line) and makes `cgroup_correlation` partial
(normalizer/health.py):

- `event_110`: a migration of a run task (cgroup_attach_task) to a cgroup v2
  outside the run's cgroup and its descendants; value: the destination, as
  a path below the cgroup2 mount (never the run's own cgroup, whose name is a
  runner control value). Moves inside the run's subtree, and moves in cgroup
  v1 hierarchies (they change no v2 membership), stay in the spool only.
- `event_111`: a task created with clone3(CLONE_INTO_CGROUP); value null (the
  target is a cgroup fd, not a path). Counted as an escape whatever the target:
  the fd's cgroup cannot be known without reading kernel structs.
"""

from __future__ import annotations

from ebpf.wire import HOOK_CGROUP_ATTACH, HOOK_NEWTASK
from normalizer.classify import Classified, kind_name
from normalizer.paths import Resolved, c_string

CGROUP_ESCAPE = 110
CLONE_INTO_CGROUP = 111
CLONE_INTO_CGROUP_FLAG = 0x200000000
V2_HIERARCHY = 0
ESCAPE_HOOKS = frozenset({HOOK_NEWTASK, HOOK_CGROUP_ATTACH})


class EscapeWatch:
    """Classifies migrations and counts escapes for health."""

    def __init__(self, run_cgroup: str) -> None:
        self._run = run_cgroup.rstrip("/")
        self.migrations = 0
        self.clone_into_cgroup = 0

    def _outside(self, path: str | None) -> bool:
        if not self._run or path is None:
            return True  # an old spool without the run's path: every move counts
        return path != self._run and not path.startswith(self._run + "/")

    def classify(self, r: Resolved, order: int) -> Classified | None:
        """The escape line for a NEWTASK or CGROUP_ATTACH record, if it is one."""
        e = r.item.event
        if e.hook == HOOK_NEWTASK:
            if not e.a1 & CLONE_INTO_CGROUP_FLAG:
                return None
            self.clone_into_cgroup += 1
            event_type, value = CLONE_INTO_CGROUP, None
        elif e.hook == HOOK_CGROUP_ATTACH:
            path = c_string(e.data)
            if e.a3 != V2_HIERARCHY or not self._outside(path):
                return None
            self.migrations += 1
            event_type, value = CGROUP_ESCAPE, path
        else:
            return None
        return Classified(event_type=event_type, kind=kind_name(event_type), value=value,
                          meta=None, order=order, ts=e.ts)
