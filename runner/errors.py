"""Errors the runner reports as one line, and the exit codes it owns.

The runner exits with the command's own exit code (128+N when a signal N
ended it). Codes it uses for itself follow `env(1)` and `docker run`:
125 when the runner fails, 126 when the command cannot be executed,
127 when it cannot be found. `validate`, `diff` and `determinism` use
0 (pass), 1 (the check found problems) and 2 (unusable input).
"""

from __future__ import annotations

EXIT_RUNNER_ERROR = 125
EXIT_NOT_EXECUTABLE = 126
EXIT_NOT_FOUND = 127
EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE: the reader of stdout left early (`show | head`), as a shell's own tools report it."""
"""128 + SIGINT: Ctrl-C ended a run (`determinism`, `acceptance`)."""


class RunnerError(Exception):
    """A failure the user can act on: printed as one line, no traceback."""

    def __init__(self, message: str, exit_code: int = EXIT_RUNNER_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code
