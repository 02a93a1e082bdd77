"""Benchmarks of `assay-runner run` against the bare command and its peers.

Not tests: nothing here asserts on time. `python -m bench.run` measures, in
one interleaved session, what the runner adds to a command's own time (the
time the command measures itself, so runner start-up is reported apart), next
to `strace -f` and bpftrace programs with the same hooks, and prints a table
of ratios against the project's targets. See docs/benchmarks.md.
"""
