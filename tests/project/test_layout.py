"""Tests follow the house: a test of ``src/loopwise/<folder>/<module>.py`` lives in
``tests/<folder>/test_<module>.py`` (CONTRIBUTING, "Where a test goes"). Checks of the whole
project are in ``tests/project/``, the canonical examples' in ``tests/examples/``."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support import ROOT

TESTS = ROOT / "tests"
PACKAGE = ROOT / "src" / "loopwise"
OWN_FOLDERS = {Path("project"), Path("examples")}
"""Folders of tests that mirror no folder of the package."""


def _test_files() -> list[Path]:
    return sorted(TESTS.rglob("test_*.py"))


def test_no_test_file_sits_flat_in_tests() -> None:
    flat = sorted(p.name for p in TESTS.glob("test_*.py"))
    assert flat == [], (
        f"{', '.join(flat)}: a test goes in tests/<folder>/test_<module>.py beside the tests "
        "of the module it tests (CONTRIBUTING, 'Where a test goes')"
    )


def test_every_test_folder_mirrors_a_folder_of_the_package() -> None:
    stray = sorted(
        str(folder)
        for folder in {p.parent.relative_to(TESTS) for p in _test_files()}
        if folder not in OWN_FOLDERS and not (PACKAGE / folder).is_dir()
    )
    assert stray == [], f"test folders with no src/loopwise/ folder of that name: {stray}"


def test_every_test_folder_is_a_package() -> None:
    # Two folders may hold files of one name (core/test_replay.py, ...): each module is
    # imported by its dotted path from the checkout, so none shadows another.
    folders = {p.parent for p in _test_files()}
    bare = sorted(str(f.relative_to(ROOT)) for f in folders if not (f / "__init__.py").is_file())
    assert bare == [], f"test folders without an __init__.py: {bare}"
    assert (TESTS / "__init__.py").is_file()


def test_tests_find_the_checkout_through_root_not_their_own_depth() -> None:
    counted = re.compile(r"Path\(__file__\)(\.resolve\(\))?\.(parents\[\d\]|parent\.parent)")
    found = [str(p.relative_to(ROOT)) for p in _test_files() if counted.search(p.read_text())]
    assert found == [], f"use tests.support.ROOT, not __file__'s parents: {found}"
