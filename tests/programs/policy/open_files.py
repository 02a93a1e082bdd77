"""Open each path for reading; print one JSON object {path: errno or 0}.

For the DAC-versus-Landlock test: the same unprivileged run reads a root-only
file and a world-readable file outside the policy's read trees, and a
root-only file inside them.
"""

import json
import sys

result: dict[str, int | None] = {}
for path in sys.argv[1:]:
    try:
        with open(path, "rb") as f:
            f.read(1)
        result[path] = 0
    except OSError as exc:
        result[path] = exc.errno
print(json.dumps(result, sort_keys=True))
