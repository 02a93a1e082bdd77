"""Pure normalizer stages: raw kernel records in, v0 archive members out.

No BCC, no root, no I/O besides reading a spool: every stage can be tested on
recorded raw events.
"""
