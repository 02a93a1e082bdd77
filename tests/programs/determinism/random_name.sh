#!/bin/sh
# Deliberately nondeterministic: mktemp picks a random file name every run.
f=$(mktemp -p "$PWD" out.XXXXXX)
echo data > "$f"
cat "$f"
