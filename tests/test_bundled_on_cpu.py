"""``gta_verl.bundled``: every bundled path is a package file, and a missing one fails in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

import gta_verl
from gta_verl import bundled

PACKAGE = Path(gta_verl.__file__).resolve().parent
REPO = Path(__file__).resolve().parents[1]


BUNDLED = ("MUSIQUE_CORPUS", "MUSIQUE_QA", "MUSIQUE_OPENIE", "SOURCES_MD", "CPU_RUN_SH", "CONFIG_DIR")


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_paths_are_package_files(name):
    path = getattr(bundled, name)
    assert path.exists() and path.resolve().is_relative_to(PACKAGE), path


def test_checkout_recipe_script_is_the_bundled_one():
    """``bash recipes/cpu/run.sh`` (the documented command) runs the script the wheel ships."""
    assert (REPO / "recipes" / "cpu" / "run.sh").resolve() == bundled.CPU_RUN_SH.resolve()


def test_missing_bundled_file_is_one_clear_line(tmp_path):
    with pytest.raises(FileNotFoundError) as exc:
        bundled.require(tmp_path / "run.sh", "the CPU recipe script")
    message = str(exc.value)
    assert "\n" not in message and "the CPU recipe script not found at" in message and "reinstall" in message
