"""Kernel side of assay-runner: the BCC program and its thin loader.

Nothing outside this package imports BCC.
"""
