"""Reviewing one run: the terminal summary (`show`) and the HTML report (`report`).

Both render one `RunView` (view.py), built from an archive's members and,
when given, its raw spool (runner-clock times, the process tree's parent
links, tool-call windows). Offline only: never imports the capture side.
"""
