#!/bin/sh
# npm install of a local tarball with a local cache, offline (npm's cacache
# writes through random tmp/ names). No log file (its name holds the time)
# and no update check. One libuv worker thread: with the default four, npm's
# lockfile probes (package-lock.json, npm-shrinkwrap.json, yarn.lock) race each
# other and a loaded machine sees a different set of opens from run to run
# (strace, 6 runs on a loaded machine: 5 distinct open sets with four threads, 1 with one).
# npm's script run by node itself with V8's short builtin calls off: with them on, V8 opens
# /usr/bin/node to remap its builtins next to the code range only when the randomly placed
# range allows it (v8::internal::CodeRange::RemapEmbeddedBuiltins), so one run in a few
# lacked that open. The flag is not allowed in NODE_OPTIONS.
set -e
mkdir -p proj
cd proj
printf '{"name": "proj", "version": "1.0.0", "private": true}\n' > package.json
HOME="$PWD" UV_THREADPOOL_SIZE=1 node --no-short-builtin-calls "$(readlink -f "$(command -v npm)")" install --offline --no-audit --no-fund --no-update-notifier --logs-max=0 \
  --cache ../npm-cache --loglevel=error ../demo-lib-1.0.0.tgz
