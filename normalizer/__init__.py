"""Pure normalizer stages: raw kernel records in, v0 archive members out.

No BCC, no root, and no I/O but the spool and file objects it is handed, and
anonymous temporary files where the evidence outgrows memory (`buckets.py`,
`surface.py`, `layer_digest.py`): no path is opened, so every stage can be
tested on recorded raw events.
"""
