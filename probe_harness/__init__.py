"""The probe harness: tiny probe scripts, each trying one operation inside a
sandbox and emitting one `boundary_event_v1` record (probes/AGENTS.md).

The contracts are files (`schema/boundary_object_schema*.json`,
`catalogs/*.json`); this package loads and enforces them, runs probes in the
run modes (baseline, the runner's sandbox presets, an external wrapper), gates
new probes, and corroborates probe outcomes with the runner's kernel layer.
It talks to the runner only through its command line and reads archives with
`runner.evidence`; it never imports the capture side.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBES_DIR = ROOT / "probes"
CHECKOUT_DATA = ("catalogs", "probes", "schema")
"""What the harness reads from the checkout; a wheel does not carry it (the probes are the checkout's)."""


def checkout_missing(command: str, needs: tuple[str, ...] = CHECKOUT_DATA) -> str | None:
    """One line saying what `command` needs when this is not a checkout (a `pip install .`), else None."""
    missing = [name for name in needs if not (ROOT / name).is_dir()]
    if not missing:
        return None
    return (f"{command} needs an assay-runner checkout: {', '.join(f'{m}/' for m in missing)} not found "
            f"beside the installed package ({ROOT}); run it from a clone after 'make setup'")
