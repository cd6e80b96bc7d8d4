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


def test_cpu_run_subcommand_runs_the_bundled_script(monkeypatch, capfd):
    """``gta-verl cpu run RECIPE OVERRIDES`` is ``bash <bundled run.sh> RECIPE OVERRIDES`` (dry run here)."""
    import sys

    from gta_verl.cli import main

    monkeypatch.setenv("DRY_RUN", "1")
    monkeypatch.setenv("PYTHON", sys.executable)
    assert main(["cpu", "run", "gta_stage2", "trainer.total_epochs=7"]) == 0
    (argv,) = [block.strip().split("\n") for block in capfd.readouterr().out.split("----") if block.strip()]
    assert argv[:3] == [sys.executable, "-m", "verl.trainer.main_ppo"]
    assert argv[4] == str(bundled.CONFIG_DIR) and argv[-1] == "trainer.total_epochs=7"
