"""Five aliases of one file, and the path each open's line names (tests/programs/kernel_paths.py);
and files on an overlayfs, whose real files the kernel opens a second time on a hidden mount.

A /proc/self/root alias, a symlink made before the run, a bind mount in a user namespace, an
io_uring open and a racing thread swapping the path buffer. Where this kernel lets the monitor
run its security_file_open program (ebpf/kpaths.py: fentry; Debian's 5.10, 6.1 and 6.12 in the kernel
matrix's guests), every one of them must name the real file: health says `path_source=kernel`.
Where it does not (our Firecracker host), health must say `path_source=user_memory`, and the lines
are the strings the program passed, aliases included: what the note warns of. Both sides assert
what they see; neither is skipped. `MATRIX_TESTS=tests/test_kernel_path_kernel.py make
kernel-matrix` runs it inside the guests (docs/kernels.md).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from ebpf import kpaths
from tests.support import Archive, assay, run_observed, unique_run_id

pytestmark = pytest.mark.kernel

PY = "/usr/bin/python3"
PROGRAM = Path(__file__).resolve().parent / "programs" / "kernel_paths.py"
KERNEL = kpaths.probe().available
"""This kernel runs the kernel-path program (the runner probes it the same way)."""


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Archive, str, dict[str, int]]:
    out = tmp_path_factory.mktemp("out")
    d = tmp_path_factory.mktemp("aliases").resolve()
    (d / "secret").write_text("S")
    (d / "decoy").write_text("D")
    (d / "src").mkdir()
    (d / "dst").mkdir()
    os.symlink(d / "secret", d / "link")
    run_id = unique_run_id("kpaths")
    proc = run_observed(out, run_id, PY, PROGRAM, d, workdir=d)
    assert proc.returncode == 0, proc.stderr
    return Archive(out / f"{run_id}.tar.gz"), str(d), json.loads(proc.stdout.splitlines()[-1])


def opened(archive: Archive, kind: str = "openat") -> Counter[str]:
    return Counter(e["value"] for e in archive.kernel if e["kind"] == kind)


def test_health_says_where_paths_came_from(observed) -> None:
    archive, _, _ = observed
    [note] = [n for n in archive.health["notes"] if n.startswith("s2_path_source: ")]
    if KERNEL:
        assert note.startswith("s2_path_source: path_source=kernel kernel_named_opens=")
        assert int(note.rsplit("=", 1)[1]) > 0
    else:
        assert note == "s2_path_source: path_source=user_memory"


def test_a_proc_self_root_alias_names_the_file(observed) -> None:
    archive, d, race = observed
    # the alias, the symlink (kernel paths) and every racing open that got secret
    secret = 1 + (1 + race["secret"] if KERNEL else 0)
    if KERNEL:
        assert opened(archive)[f"{d}/secret"] == secret
    else:  # lexically resolved; the racing opens may carry either name
        assert opened(archive)[f"{d}/secret"] >= secret
    assert not [v for v in opened(archive) if v.startswith("/proc/self/root")]
    show = assay("show", "--all", archive.path)  # with the spool beside it: the first string asked for
    assert show.returncode == 0, show.stderr
    assert (f"(raw: /proc/self/root{d}/secret)" in show.stdout) == KERNEL, show.stdout


def test_a_symlink_names_its_target(observed) -> None:
    archive, d, _ = observed
    assert opened(archive)[f"{d}/link"] == (0 if KERNEL else 1)


def test_a_bind_mount_in_a_user_namespace_names_the_file_the_run_wrote(observed) -> None:
    archive, d, _ = observed
    names = opened(archive)
    if KERNEL:
        assert (names[f"{d}/src/f"], names[f"{d}/dst/f"]) == (2, 0)  # the write, and the read by alias
    else:
        assert (names[f"{d}/src/f"], names[f"{d}/dst/f"]) == (1, 1)
        assert any(n.startswith("s3_path_namespace: ") for n in archive.health["notes"])


def test_an_io_uring_open_is_a_line_of_its_own(observed) -> None:
    archive, d, _ = observed
    assert opened(archive, "event_140") == Counter({None: 1})  # the ring's setup, as before
    assert opened(archive, "event_85") == (Counter({f"{d}/secret": 1}) if KERNEL else Counter())


def test_a_racing_thread_cannot_make_a_line_name_the_other_file(observed) -> None:
    archive, d, race = observed
    assert race["fooled"] >= 1, race  # some open returned with the buffer naming the other file
    names = opened(archive)
    if KERNEL:  # each line names the file its open read from (secret: less the two aliases above)
        assert (names[f"{d}/secret"] - 2, names[f"{d}/decoy"]) == (race["secret"], race["decoy"])
    else:  # every open is a line, named by what the buffer held at the syscall's exit
        assert names[f"{d}/secret"] - 1 + names[f"{d}/decoy"] == race["secret"] + race["decoy"]


@pytest.fixture
def overlay(tmp_path: Path) -> Iterator[Path]:
    """An overlayfs (one file in its lower layer), mounted for the test's length."""
    d = tmp_path.resolve()
    for name in ("lower", "upper", "work", "merged"):
        (d / name).mkdir()
    (d / "lower" / "below").write_text("L")
    layers = f"lowerdir={d}/lower,upperdir={d}/upper,workdir={d}/work"
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o", layers, d / "merged"], check=True)
    try:
        yield d / "merged"
    finally:
        subprocess.run(["umount", d / "merged"], check=True)


def test_a_file_on_overlayfs_is_named_by_its_overlay_path(overlay: Path, tmp_path_factory) -> None:
    # Since 6.6 overlayfs opens each file's real file in its layer with security_file_open of its
    # own, on a private clone of the layer's mount: its d_path is `/below`, the path inside the
    # layer (Debian 6.12 named a guest's /etc/hostname `/hostname` so). The open's line must still
    # name the file the command opened: a read from the lower layer, a create and a read in the upper.
    out = tmp_path_factory.mktemp("out")
    run_id = unique_run_id("overlay")
    proc = run_observed(out, run_id, "/bin/sh", "-c", "cat below; echo U > above; cat above", workdir=overlay)
    assert (proc.returncode, proc.stdout) == (0, "LU\n"), proc.stderr
    archive = Archive(out / f"{run_id}.tar.gz")
    names = opened(archive)
    assert (names[f"{overlay}/below"], names[f"{overlay}/above"]) == (1, 2), names
    assert not [v for v in names if v.count("/") == 1 and v.endswith(("/below", "/above"))], names
    assert opened(archive, "event_85") == Counter()  # no open outside a traced call
