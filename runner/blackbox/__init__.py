"""`observe`: the side-effecting half of black-box DecisionEvents (workspace, agent run, events).

The pure half (scenario, evaluation, events writer, validator) is the
top-level `blackbox` package; docs/blackbox.md describes both.
"""
