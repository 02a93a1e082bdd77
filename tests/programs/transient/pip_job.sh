#!/bin/sh
# A venv and a pip install of a local wheel, offline (pip's temp directories
# and CPython's .pyc.<id> files have random names).
set -e
/usr/bin/python3 -m venv --without-pip venv
# SOURCE_DATE_EPOCH: pip byte-compiles what it installs, and a default .pyc
# embeds its source's mtime (the install's time); with it set, CPython writes
# hash-checked .pyc files instead, so the workdir's end state is the same
# every run (the determinism gate compares it: docs/determinism.md).
SOURCE_DATE_EPOCH=1767225600 PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 \
  "$PIP" --python venv/bin/python install -q demo_pkg-1.0-py3-none-any.whl
venv/bin/python -c 'import demo_pkg; assert demo_pkg.VALUE == 1'
