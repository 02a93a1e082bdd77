#!/bin/sh
# A shell pipeline: four processes started together, reading and writing files.
# sorted.txt is a first-run-only cache (like __pycache__): without the workdir
# restore between runs, run 1 would write it and runs 2-3 only read it.
[ -e sorted.txt ] || tr ' ' '\n' < words.txt | sort > sorted.txt
tr ' ' '\n' < words.txt | sort | uniq -c | sort -rn > counts.txt
wc -l < counts.txt > lines.txt
cat counts.txt lines.txt sorted.txt > report.txt
