#!/bin/sh
# npm install of a local tarball with a local cache, offline (npm's cacache
# writes through random tmp/ names). No log file (its name holds the time)
# and no update check.
set -e
mkdir -p proj
cd proj
printf '{"name": "proj", "version": "1.0.0", "private": true}\n' > package.json
HOME="$PWD" npm install --offline --no-audit --no-fund --no-update-notifier --logs-max=0 \
  --cache ../npm-cache --loglevel=error ../demo-lib-1.0.0.tgz
