#!/bin/sh
# A pytest run that writes its cache (.pytest_cache through a random
# pytest-cache-files-XXXXXXXX directory renamed into place).
set -e
printf 'def test_add():\n    assert 1 + 1 == 2\n\n\ndef test_str():\n    assert "a".upper() == "A"\n' > test_job.py
exec "$PYTHON" -m pytest -q -p no:randomly -p no:xdist test_job.py
