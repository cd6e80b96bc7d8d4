"""synthesize() accounting and the ``gta-verl synth`` command on the real MuSiQue KB."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from gta_verl.cli import main
from gta_verl.synth.generators.template import TemplateGenerator
from gta_verl.synth.pipeline import SynthesisConfig, synthesize
from gta_verl.synth.validate import ValidationConfig


def test_funnel_accounts_for_every_path(tiny_kb, lexical_retriever):
    res = synthesize(
        tiny_kb,
        lexical_retriever,
        TemplateGenerator(),
        n=5,
        seed=0,
        progress=False,
        config=SynthesisConfig(batch_size=8),
    )
    f = res.funnel.to_dict()
    stages = {s["name"]: s for s in f["stages"]}
    for prev, cur in zip(
        ["sampled", "generated", "parsed", "rules_passed"],
        ["generated", "parsed", "rules_passed", "validated"],
        strict=True,
    ):
        assert f[prev] == f[cur] + stages[cur]["rejected"]
        assert sum(stages[cur]["reasons"].values()) == stages[cur]["rejected"]
    assert len(res.validated) == min(5, f["validated"])
    assert f["surplus"] == max(0, f["validated"] - 5)
    assert len(res.unvalidated) == f["rules_passed"]
    s = f["sampling"]
    assert s["attempts"] == s["paths"] + s["dead_ends"] + s["duplicates"] and s["paths"] == f["sampled"]


def test_reproducible_with_seed(tiny_kb, lexical_retriever):
    a = synthesize(tiny_kb, lexical_retriever, TemplateGenerator(), n=4, seed=3, progress=False)
    b = synthesize(tiny_kb, lexical_retriever, TemplateGenerator(), n=4, seed=3, progress=False)
    assert a.validated == b.validated


def test_without_validation_is_one_flag(tiny_kb):
    cfg = SynthesisConfig(validation=ValidationConfig(check_retrieval=False))
    res = synthesize(tiny_kb, None, TemplateGenerator(), n=3, seed=0, progress=False, config=cfg)
    assert len(res.validated) == 3
    with pytest.raises(ValueError, match="retriever"):
        synthesize(tiny_kb, None, TemplateGenerator(), n=3, progress=False)


def test_cli_writes_stage1_parquet_and_prints_funnel(musique_kb_dir, tmp_path, capsys):
    out, unval = tmp_path / "stage1.parquet", tmp_path / "unvalidated.parquet"
    rc = main(
        [
            "synth",
            "--kb",
            str(musique_kb_dir),
            "--out",
            str(out),
            "--generator",
            "template",
            "--n",
            "4",
            "--batch-size",
            "8",
            "--json",
            "--no-progress",
            "--keep-unvalidated",
            str(unval),
        ]
    )
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    assert report["stats"]["validated_trajectories"] == 4
    assert report["funnel"]["validated"] >= 4 and report["funnel"]["sampled"] >= 4
    assert [s["name"] for s in report["funnel"]["stages"]] == [
        "sampled",
        "generated",
        "parsed",
        "rules_passed",
        "validated",
    ]
    assert pq.read_table(out).num_rows == 4
    assert pq.read_table(unval).num_rows == report["funnel"]["rules_passed"]


def _stub_llm(request: dict) -> str:
    """A stand-in LLM: asks for the last chain document's title, one query per document title."""
    import re

    user = request["messages"][-1]["content"]
    titles = re.findall(r"^\[P\d+\] (.+)$", user, flags=re.MULTILINE)
    turns = [
        {"reasoning": f"look up {t}", "search_query": t, "target_document": f"P{i + 1}"}
        for i, t in enumerate(titles)
    ]
    return json.dumps(
        {"question": "Which article ends this chain?", "answer": titles[-1], "trajectory": turns}
    )


def test_openai_generator_end_to_end_on_musique(musique_kb, musique_retriever):
    from gta_verl.llm.openai_chat import ChatClient
    from gta_verl.synth.generators.openai_gen import LLMSamplingConfig, OpenAIGenerator
    from tests.support.openai_server import openai_stub_server

    with openai_stub_server(_stub_llm) as (base_url, requests):
        gen = OpenAIGenerator(ChatClient(base_url, "stub"), LLMSamplingConfig(concurrency=4))
        res = synthesize(
            musique_kb,
            musique_retriever,
            gen,
            n=3,
            seed=1,
            progress=False,
            config=SynthesisConfig(batch_size=6),
        )
    f = res.funnel.to_dict()
    assert len(requests) == f["sampled"] and f["generated"] == f["sampled"]
    assert len(res.validated) >= 1 and all(t.generator == "openai" for t in res.validated)
