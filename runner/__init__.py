"""assay-runner: run a command under eBPF observation and write v0 evidence."""

__version__ = "0.1.0"
