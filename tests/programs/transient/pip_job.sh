#!/bin/sh
# A venv and a pip install of a local wheel, offline (pip's temp directories
# and CPython's .pyc.<id> files have random names).
set -e
/usr/bin/python3 -m venv --without-pip venv
PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 \
  "$PIP" --python venv/bin/python install -q demo_pkg-1.0-py3-none-any.whl
venv/bin/python -c 'import demo_pkg; assert demo_pkg.VALUE == 1'
