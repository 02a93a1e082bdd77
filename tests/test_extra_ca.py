"""scripts/extra_ca.py: which CA certificates an image build gets (pure; recorded PEM text).

The smoke test (tests/test_image.py) uses the real host store; here the
selection rules are checked on small made-up bundles.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.support import ROOT

_spec = importlib.util.spec_from_file_location("extra_ca", ROOT / "scripts" / "extra_ca.py")
assert _spec and _spec.loader
extra_ca = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(extra_ca)

STOCK_A = "QUFBQQ" * 20
STOCK_B = "QkJCQg" * 20
PROXY = "UFJPWFk" * 20


def pem(*bodies: str) -> str:
    return "".join(extra_ca.to_pem(b) for b in bodies)


def test_pem_round_trip_and_line_length() -> None:
    text = pem(STOCK_A, PROXY)
    assert extra_ca.certificates(text) == [STOCK_A, PROXY]
    assert max(len(line) for line in text.splitlines()) <= 64


def test_host_mode_keeps_only_what_stock_lacks(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    stock = tmp_path / "mozilla"
    stock.mkdir()
    (stock / "A.crt").write_text(pem(STOCK_A))
    (stock / "B.crt").write_text(pem(STOCK_B))
    bundle = tmp_path / "ca-certificates.crt"
    bundle.write_text(pem(STOCK_A, PROXY, STOCK_B))
    monkeypatch.setattr(extra_ca, "STOCK_DIR", stock)
    monkeypatch.setattr(extra_ca, "HOST_BUNDLE", bundle)
    out = tmp_path / "out"
    assert extra_ca.main(["host", str(out)]) == 0
    written = sorted(out.iterdir())
    assert [p.name for p in written] == ["build-extra-0.crt"]
    assert extra_ca.certificates(written[0].read_text()) == [PROXY]
    assert written[0].stat().st_mtime == 0  # stable metadata keeps docker's layer cache


def test_file_mode_splits_one_certificate_per_file(tmp_path: Path) -> None:
    source = tmp_path / "bundle.pem"
    source.write_text(pem(STOCK_A, PROXY))
    out = tmp_path / "out"
    assert extra_ca.main([str(source), str(out)]) == 0
    assert [extra_ca.certificates(p.read_text()) for p in sorted(out.iterdir())] == [
        [STOCK_A], [PROXY]]


def test_file_without_certificates_is_an_error(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "empty.pem"
    source.write_text("not a certificate\n")
    assert extra_ca.main([str(source), str(tmp_path / "out")]) == 1
    assert capsys.readouterr().err == f"extra_ca: no PEM certificate in {source}\n"
    assert not (tmp_path / "out").exists()
