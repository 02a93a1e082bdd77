#!/usr/bin/env python3
"""Write the extra CA certificates an image build should trust, one PEM per file.

    extra_ca.py host OUTDIR    the certificates the host's system store trusts
                               that Debian's stock ca-certificates does not ship
                               (a TLS-intercepting proxy's CA, a corporate CA)
    extra_ca.py FILE OUTDIR    every certificate in a PEM file

Why: behind a TLS-intercepting proxy a fresh image cannot reach PyPI until it
trusts the proxy's CA. Passing only the difference keeps the image's trust
store the stock one plus what the host deliberately added. One certificate
per file, because update-ca-certificates hashes only a file's first one.
Prints one line per certificate written; stdlib only (runs before any venv).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

HOST_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
STOCK_DIR = Path("/usr/share/ca-certificates/mozilla")
PEM = re.compile(r"-----BEGIN CERTIFICATE-----\s+([A-Za-z0-9+/=\s]+?)-----END CERTIFICATE-----")


def certificates(text: str) -> list[str]:
    """The base64 bodies of the PEM certificates in text, whitespace removed."""
    return ["".join(body.split()) for body in PEM.findall(text)]


def host_extras() -> list[str]:
    """Certificates in the host bundle that no stock Mozilla file holds.

    A host without Debian's bundle (another distro) has no extras to give.
    """
    if not HOST_BUNDLE.exists():
        print(f"extra CA: none ({HOST_BUNDLE} does not exist)")
        return []
    stock = {c for f in STOCK_DIR.glob("*.crt") for c in certificates(f.read_text())}
    return [c for c in certificates(HOST_BUNDLE.read_text()) if c not in stock]


def to_pem(body: str) -> str:
    lines = [body[i:i + 64] for i in range(0, len(body), 64)]
    return "-----BEGIN CERTIFICATE-----\n" + "\n".join(lines) + "\n-----END CERTIFICATE-----\n"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: extra_ca.py host|PEMFILE OUTDIR", file=sys.stderr)
        return 2
    source, outdir = argv[0], Path(argv[1])
    try:
        found = host_extras() if source == "host" else certificates(Path(source).read_text())
    except OSError as exc:
        print(f"extra_ca: cannot read {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 1
    if source != "host" and not found:
        print(f"extra_ca: no PEM certificate in {source}", file=sys.stderr)
        return 1
    outdir.mkdir(parents=True, exist_ok=True)
    for index, body in enumerate(found):
        path = outdir / f"build-extra-{index}.crt"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(to_pem(body))
        os.utime(tmp, (0, 0))  # the same bytes and metadata every build: docker's cache holds
        tmp.replace(path)
        print(f"extra CA: {path.name} ({'host store' if source == 'host' else source})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
