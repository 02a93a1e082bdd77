"""Delegated acceptance: named gates, each run three times, and a proof pack.

gates.py is the registry, expect.py the expectations files, execute.py runs
one gate, pack.py writes the proof pack and verify.py re-checks one offline.
Runs go through the `determinism` command in a child process (the same code
a user runs), so this package never imports the capture side.
"""
