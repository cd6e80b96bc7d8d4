"""A plain ``pip install`` of the wheel runs the main job outside the repository.

The wheel is built from a copy of the package sources (nothing is written into the checkout) and
installed, not editable, into a fresh venv whose only other ``sys.path`` entry is this interpreter's
site-packages (a ``.pth`` line: the dependencies without reinstalling them; ``.pth`` files in that
directory, such as an editable install's import hook, are not executed from there). From a directory
outside the checkout, ``gta-verl quickstart`` then runs every stage that needs no verl training
(``prep,kb,retrieval,synth``; ``verl`` and ``eval`` need the warm start, which verl's SFT trainer
builds). ``gta_verl.__file__`` proves which copy ran; the README's numbers are checked against the
run's ``summary.json``. The source tree itself installs both ways too, ``pip install .`` and
``pip install -e .`` (the ``setup.py`` shim beside ``pyproject.toml``), each into its own venv.

No network: ``pip wheel --no-build-isolation --no-index`` uses this interpreter's setuptools.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.support import readme_numbers

REPO = Path(__file__).resolve().parents[1]
#: What the build reads: pyproject.toml names the readme and the license file; setup.py is the shim.
BUILD_INPUTS = ("pyproject.toml", "setup.py", "README.md", "LICENSE", "gta_verl")
FAST_STAGES = "prep,kb,retrieval,synth"

pytestmark = pytest.mark.slow


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    tail = f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}\n{tail}"
    return proc.stdout


def _copy_sources(tmp: Path) -> Path:
    """What the build reads, copied, so that no install writes into the checkout."""
    from importlib.metadata import version

    setuptools = version("setuptools")
    assert int(setuptools.split(".")[0]) >= 77, f"setuptools {setuptools}: pyproject.toml's build needs >= 77"
    src = tmp / "src"
    src.mkdir()
    for name in BUILD_INPUTS:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, src / name)
    return src


def _build_wheel(tmp: Path) -> Path:
    src = _copy_sources(tmp)
    dist = tmp / "dist"
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            str(dist),
            str(src),
        ],
        cwd=tmp,
    )
    (wheel,) = dist.glob("gta_verl-*.whl")
    return wheel


def _venv_with(tmp: Path, *install: str) -> tuple[Path, Path]:
    """``(venv, its site-packages)`` after ``pip install <install>``, with this interpreter's
    packages on the path."""
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp)
    python = venv / "bin" / "python"
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(_run([str(python), "-c", purelib], tmp).strip())
    deps = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    (site / "_gta_verl_test_deps.pth").write_text("".join(f"{p}\n" for p in deps))
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q"]
    _run([*pip, "--no-build-isolation", *install], cwd=tmp)
    return venv, site


#: Run by the venv's python: which gta_verl, bundled files and distribution metadata it sees.
PROBE = """
import json
from importlib.metadata import distribution, entry_points
import gta_verl, gta_verl.bundled as b
(plugin,) = entry_points(group="verl.plugins", name="gta_verl")
files = [b.MUSIQUE_QA, b.MUSIQUE_OPENIE, b.CPU_RUN_SH, b.CONFIG_DIR / "gta_grpo.yaml", b.SOURCES_MD]
print(json.dumps({"init": gta_verl.__file__, "dist": str(distribution("gta-verl").locate_file("")),
                  "plugin": plugin.value, "files": [str(f) for f in files]}))
"""


def test_wheel_runs_the_main_jobs_fast_stages_outside_the_checkout(tmp_path: Path) -> None:
    venv, site = _venv_with(tmp_path, str(_build_wheel(tmp_path)))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")

    seen = json.loads(_run([str(venv / "bin" / "python"), "-c", PROBE], elsewhere, env))
    assert Path(seen["init"]) == site / "gta_verl" / "__init__.py", f"imported {seen['init']}, not the wheel"
    assert Path(seen["dist"]) == site and seen["plugin"] == "gta_verl.verl_plugins"
    for name in seen["files"]:
        assert Path(name).is_file() and Path(name).is_relative_to(site), name

    out = elsewhere / "qs"
    log = _run(
        [str(venv / "bin" / "gta-verl"), "quickstart", "--out", str(out), "--stages", FAST_STAGES],
        elsewhere,
        env,
        timeout=600,
    )
    assert f"Done. Summary: {out / 'summary.md'}" in log
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert len(summary) == 4, list(summary)
    assert readme_numbers.mismatches(summary) == []


@pytest.mark.parametrize("editable", [False, True], ids=["pip install .", "pip install -e ."])
def test_source_tree_installs_plain_and_editable(tmp_path: Path, editable: bool) -> None:
    """``pip install .`` and ``pip install -e .`` from a source tree (pyproject.toml beside the
    setup.py shim) give an importable package, its console script and its verl plugin."""
    src = _copy_sources(tmp_path)
    venv, site = _venv_with(tmp_path, *(["-e"] if editable else []), str(src))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    seen = json.loads(_run([str(venv / "bin" / "python"), "-c", PROBE], elsewhere, env))
    home = src if editable else site
    assert Path(seen["init"]) == home / "gta_verl" / "__init__.py", f"imported {seen['init']}, not {home}"
    assert seen["plugin"] == "gta_verl.verl_plugins"
    assert all(Path(f).is_file() and Path(f).is_relative_to(home) for f in seen["files"]), seen["files"]
    assert "quickstart" in _run([str(venv / "bin" / "gta-verl"), "--help"], elsewhere, env)
