"""What `assay-runner doctor` reports, as the doctor tests and the image tests both expect it."""

from __future__ import annotations

CHECKS = ("root", "hostns", "bcc", "headers", "tracefs", "cgroup2", "bpf", "hooks", "paths", "pidns",
          "landlock", "limits", "stale", "native")
"""The checks, in the order doctor prints them."""
