#!/bin/sh
# A job any coding agent runs: a repository, ten files, a commit with pinned
# dates and identity, then a JSON file written by python. git picks random
# temporary names (.git/objects/xx/tmp_obj_XXXXXX, .git/tXXXXXX) and removes them.
set -e
export GIT_AUTHOR_NAME=agent GIT_AUTHOR_EMAIL=agent@example.invalid
export GIT_COMMITTER_NAME=agent GIT_COMMITTER_EMAIL=agent@example.invalid
export GIT_AUTHOR_DATE=2026-01-01T00:00:00Z GIT_COMMITTER_DATE=2026-01-01T00:00:00Z
export HOME="$PWD" GIT_CONFIG_NOSYSTEM=1 PYTHONDONTWRITEBYTECODE=1
git init -q -b main repo
cd repo
for i in 0 1 2 3 4 5 6 7 8 9; do echo "file $i" > "f$i.txt"; done
# Pinned mtimes: git re-reads ("racily clean") files modified in the same second as
# its index, so with fresh mtimes whether those reads happen depends on the clock.
touch -d @1767225600 f*.txt
git add -A
git commit -q -m init
/usr/bin/python3 -c 'import json; json.dump({"ok": 1}, open("out.json", "w"))'
