"""Conformance with Assay, the reader of our archives: its published rules, applied in full.

Assay (github.com/Rul1an/assay) publishes one machine-readable file for our
members, the kernel line schema; everything else it enforces lives in Rust
types and validators and in its CI scripts. These modules apply every such
rule to every line of every member, each citing its upstream `file:line` at
base.UPSTREAM (vendored files: normalizer/upstream/README.md):

- `kernel`: the line schema, kinds, open metadata, loader telemetry;
  coverage and surface versus the kernel lines;
- `documents`: health, surface and correlation rules inside one document;
- `layers`: policy, SDK and run-event lines, and how they bind health,
  surface and correlation;
- `secrets`: the fail-closed secret sweep;
- `capdiff`: the capability-diff rule for a pair of archives.

Strict decoding with the Structs of normalizer/artifacts.py (which mirror
upstream's types, unknown fields refused) and the manifest rules run first,
in runner/evidence/validate.py, which calls these for the rest.
`tests/test_conformance.py` cross-checks real archives with the independent
`../shared/tools/assay-compat/assay_compat.py`.
"""
