"""A KB directory you can trust: the manifest cannot switch off its own checks.

Every corruption gives a :class:`KBLoadError` naming the file, within a bounded time
(the load runs in a thread; a hang is a failure, not a stuck test), and the CLI
prints it as one line.
"""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pytest

from gta_verl.cli import main
from gta_verl.kb.store import KBLoadError
from gta_verl.testing.kb_corruption import KB_CORRUPTIONS, load_kb_bounded, read_manifest, write_manifest
from gta_verl.testing.toy_kb import HashEmbedder, make_toy_kb

# Toy KB (retrieval/testing.py TOY_DOCS): 10 documents; triples 2+2+1+2+1+2+1+1+1 = 13; entities paris,
# france, eiffel tower, europe, emmanuel macron, amiens, somme, berlin, germany, olaf scholz, osnabrueck,
# tokyo, japan, mount fuji = 14; nodes 10 + 14 = 24.
TOY_COUNTS = {"document_nodes": 10, "entity_nodes": 14, "triples": 13}


@pytest.fixture(scope="module")
def toy_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from gta_verl.kb.store import save_kb

    out = tmp_path_factory.mktemp("store") / "kb"
    save_kb(make_toy_kb(HashEmbedder()), out)
    return out


@pytest.fixture
def kb(toy_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "kb"
    shutil.copytree(toy_dir, copy)
    return copy


@pytest.mark.parametrize("case", list(KB_CORRUPTIONS))
def test_corrupted_kb_gives_named_kb_load_error(kb: Path, case: str) -> None:
    corrupt, pattern = KB_CORRUPTIONS[case]
    corrupt(kb)
    with pytest.raises(KBLoadError, match=pattern) as info:
        load_kb_bounded(kb)
    assert str(kb) in str(info.value) and "\n" not in str(info.value)


def test_counts_are_recomputed_not_trusted(kb: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = read_manifest(kb)
    m["counts"] = {**m.get("counts", {}), "document_nodes": 999_999, "entity_nodes": 1, "triples": 0}
    write_manifest(kb, m)  # counts are not covered by any checksum
    loaded = load_kb_bounded(kb)
    assert {k: loaded.manifest["counts"][k] for k in TOY_COUNTS} == TOY_COUNTS
    assert main(["kb", "stats", str(kb), "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert {k: obj[k] for k in TOY_COUNTS} == TOY_COUNTS


def test_intact_kb_still_loads(kb: Path) -> None:
    loaded = load_kb_bounded(kb)
    assert loaded.n_docs == 10 and loaded.problems() == []


@pytest.mark.parametrize(
    "case", ["manifest is a list", "manifest lists /dev/zero", "entity_emb 3 rows short"]
)
def test_cli_prints_one_line_without_traceback(
    kb: Path, case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    KB_CORRUPTIONS[case][0](kb)
    box: dict[str, int] = {}
    t = threading.Thread(target=lambda: box.setdefault("rc", main(["kb", "stats", str(kb)])), daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), "kb stats did not finish"
    err = capsys.readouterr().err
    assert box["rc"] == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("gta-verl: error: ") and str(kb) in lines[0]
    assert "Traceback" not in err
