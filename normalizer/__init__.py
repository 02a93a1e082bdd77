"""Pure normalizer stages: raw kernel records in, v0 archive members out.

No BCC, no root, and no I/O but reading the spool it is given and writing
anonymous temporary files where the evidence outgrows memory (`buckets.py`,
`surface.py`, `layer_digest.py`): every stage can be tested on recorded raw
events.
"""
