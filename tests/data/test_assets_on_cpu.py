"""The bundled data files are byte-identical to the upstream copies listed in assets/SOURCES.md."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

ASSETS = Path(__file__).resolve().parents[2] / "assets"


def _listed() -> dict[str, str]:
    text = (ASSETS / "SOURCES.md").read_text()
    return {m.group(2): m.group(1) for m in re.finditer(r"^([0-9a-f]{64})\s+(\S+)$", text, flags=re.MULTILINE)}


def test_every_listed_asset_matches_its_sha256():
    listed = _listed()
    assert len(listed) == 10
    for rel, expected in listed.items():
        got = hashlib.sha256((ASSETS / rel).read_bytes()).hexdigest()
        assert got == expected, f"assets/{rel}: sha256 {got} != SOURCES.md {expected}"


def test_every_asset_file_is_listed():
    listed = set(_listed())
    files = {str(p.relative_to(ASSETS)) for p in ASSETS.rglob("*") if p.is_file() and p.name != "SOURCES.md"}
    assert files == listed
