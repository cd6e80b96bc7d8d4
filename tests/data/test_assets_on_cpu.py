"""The bundled data files are byte-identical to the upstream copies listed in both SOURCES.md files.

``assets/`` (repository only) and ``gta_verl/assets/`` (shipped in the wheel) each list their files'
sha256; every file under either folder is listed exactly once.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from gta_verl.bundled import SOURCES_MD

REPO_ASSETS = Path(__file__).resolve().parents[2] / "assets"
ROOTS = {"assets": (REPO_ASSETS, 7), "gta_verl/assets": (SOURCES_MD.parent, 3)}


def _listed(root: Path) -> dict[str, str]:
    text = (root / "SOURCES.md").read_text()
    return {
        m.group(2): m.group(1) for m in re.finditer(r"^([0-9a-f]{64})\s+(\S+)$", text, flags=re.MULTILINE)
    }


@pytest.mark.parametrize("name", sorted(ROOTS))
def test_every_listed_asset_matches_its_sha256(name):
    root, n_files = ROOTS[name]
    listed = _listed(root)
    assert len(listed) == n_files
    for rel, expected in listed.items():
        got = hashlib.sha256((root / rel).read_bytes()).hexdigest()
        assert got == expected, f"{name}/{rel}: sha256 {got} != SOURCES.md {expected}"


@pytest.mark.parametrize("name", sorted(ROOTS))
def test_every_asset_file_is_listed(name):
    root, _ = ROOTS[name]
    files = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name != "SOURCES.md"}
    assert files == set(_listed(root))
