"""Cutting cgroup mounts out of Landlock write trees (runner/enforce/cgroupfs.py), on a scratch tree."""

from __future__ import annotations

from pathlib import Path

from runner.enforce.cgroupfs import without


def _tree(root: Path) -> None:
    for d in ("a/b/c", "a/d", "e"):
        (root / d).mkdir(parents=True)
    (root / "a" / "f.txt").write_text("")
    (root / "a" / "link").symlink_to(root / "a" / "b")


def test_a_tree_containing_the_cut_is_replaced_by_what_is_around_it(tmp_path: Path) -> None:
    _tree(tmp_path)
    got = without((str(tmp_path),), [str(tmp_path / "a" / "b")])
    assert sorted(got) == sorted(str(tmp_path / p) for p in ("a/d", "a/f.txt", "e"))
    # the symlink is not granted: Landlock would follow it into the cut


def test_trees_inside_or_equal_to_the_cut_are_dropped(tmp_path: Path) -> None:
    _tree(tmp_path)
    cut = str(tmp_path / "a")
    assert without((cut, str(tmp_path / "a" / "b" / "c"), str(tmp_path / "e")), [cut]) == (
        str(tmp_path / "e"),)


def test_unrelated_trees_and_several_cuts(tmp_path: Path) -> None:
    _tree(tmp_path)
    got = without((str(tmp_path), "/elsewhere"), [str(tmp_path / "a" / "b"), str(tmp_path / "a" / "d")])
    assert sorted(got) == sorted([str(tmp_path / "a" / "f.txt"), str(tmp_path / "e"), "/elsewhere"])
