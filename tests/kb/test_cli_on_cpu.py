"""`gta-verl kb build | stats | add` through the real dispatcher."""

from __future__ import annotations

import json
from pathlib import Path

from gta_verl.cli import main
from gta_verl.testing.kb_argv import spacy_build_argv

REPO = Path(__file__).resolve().parents[2]


def test_stats_json_on_musique(musique_kb_dir, capsys):
    assert main(["kb", "stats", str(musique_kb_dir), "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["document_nodes"] == 1890 and obj["entity_nodes"] > 0
    assert obj["doc_entity_edges"] > 0 and obj["relation_edges"] > 0 and obj["synonymy_edges"] > 0
    assert obj["openie"]["n_malformed_triples"] == 185
    assert main(["kb", "stats", str(musique_kb_dir)]) == 0
    assert "| Document nodes | Entity nodes |" in capsys.readouterr().out


def test_build_and_add_with_spacy(tmp_path, capsys):
    corpus = json.loads((REPO / "assets/hipporag_sample/sample_corpus.json").read_text())
    (tmp_path / "a.json").write_text(json.dumps(corpus[:2]))
    (tmp_path / "b.json").write_text(json.dumps(corpus))
    out = tmp_path / "kb"
    assert main(spacy_build_argv(tmp_path / "a.json", out)) == 0
    assert (
        main(
            [
                "kb",
                "add",
                str(out),
                "--corpus",
                str(tmp_path / "b.json"),
                "--no-progress",
                "--no-openie-cache",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["kb", "stats", str(out), "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["document_nodes"] == 3 and obj["entity_nodes"] > 0 and obj["relation_edges"] > 0
