"""Offline template generator: hand-checked phrasing on the tiny KB, validated output on MuSiQue."""

from __future__ import annotations

import pytest

from gta_verl.synth.generators.base import Generator
from gta_verl.synth.generators.template import TemplateConfig, TemplateGenerator
from gta_verl.synth.paths import build_path, build_path_index


@pytest.fixture()
def tiny(tiny_kb):
    index = build_path_index(tiny_kb)
    titles = [p.title for p in tiny_kb.passages]
    return index, titles.index


def test_two_hop_question_chains_the_bridge_triples(tiny_kb, tiny):
    index, doc = tiny
    path = build_path(index, [doc("Barack Obama"), doc("Honolulu")], [["honolulu"]])
    traj = TemplateGenerator().compose(path, tiny_kb)
    # hop 1 = (barack obama, born in, honolulu); hop 2 = one of Honolulu's two triples
    assert traj.answer in ("Hawaii", "Oahu")
    rel = {"Hawaii": "capital of", "Oahu": "located on"}[traj.answer]
    assert traj.question == f"What is the entity that (the entity that Barack Obama born in) {rel}?"
    assert [t.query for t in traj.turns] == ["Barack Obama born in", f"Honolulu {rel}"]
    assert [t.target_doc_id for t in traj.turns] == list(path.doc_ids)
    assert "Honolulu" not in traj.question  # the bridge is what the agent must find
    assert "Honolulu" not in traj.turns[0].reasoning  # turn 1 reasons from the question only
    assert "Honolulu" in traj.turns[1].reasoning
    assert traj.final_reasoning.endswith(f"So the answer is {traj.answer}.")
    assert traj.generator == "template" and traj.bridge_entities == (("honolulu",),)


def test_synonym_link_and_backward_triple(tiny_kb, tiny):
    index, doc = tiny
    path = build_path(
        index, [doc("Michelle Obama"), doc("Barack Obama"), doc("Honolulu")], [["barack obama"], ["honolulu"]]
    )
    traj = TemplateGenerator(TemplateConfig(seed=3)).compose(path, tiny_kb)
    assert (
        traj.turns[0].query == "married to Barack Obama" or traj.turns[0].query == "Michelle Obama married to"
    )
    assert traj.turns[1].query == "Barack Obama born in"
    assert traj.hops == 3 and len(traj.turns) == 3


def test_failures_have_reasons(tiny_kb, tiny):
    index, doc = tiny
    path = build_path(index, [doc("Barack Obama"), doc("Honolulu")], [["honolulu"]])
    # the only triple of hop 1 is (barack obama, born in, honolulu); forbid its relation
    (out,) = TemplateGenerator(TemplateConfig(skip_relations=("born in",))).generate([path], tiny_kb)
    assert out.trajectory is None and out.stage == "generate" and out.reason == "template:no_start_triple"
    # an answer that overlaps a bridge ("obama" ~ "barack obama") is not used
    path = build_path(index, [doc("Michelle Obama"), doc("Obama Presidential Center")], [["chicago"]])
    outs = [TemplateGenerator(TemplateConfig(seed=s)).generate([path], tiny_kb)[0] for s in range(5)]
    assert all(o.trajectory is None or o.trajectory.answer != "Obama" for o in outs)


def test_deterministic_per_path(tiny_kb):
    index = build_path_index(tiny_kb)
    from gta_verl.synth.paths import sample_paths

    paths = sample_paths(index, 20, seed=0)
    gen = TemplateGenerator(TemplateConfig(seed=5))
    a = gen.generate(paths, tiny_kb)
    b = gen.generate(list(reversed(paths)), tiny_kb)[::-1]
    assert [o.trajectory for o in a] == [o.trajectory for o in b]
    assert isinstance(gen, Generator)


def test_template_end_to_end_on_musique_yields_validated_trajectories(musique_kb, musique_synthesis):
    res = musique_synthesis
    assert len(res.validated) == 12
    f = res.funnel.to_dict()
    assert f["validated"] >= 12 and f["sampled"] >= f["generated"] >= f["parsed"] >= f["validated"]
    assert res.stats["validated_trajectories"] == 12
    assert sum(res.stats[f"{h}_hop_trajectories"] for h in (2, 3, 4)) == 12
    passages = {p.doc_id: p for p in musique_kb.passages}
    for traj in res.validated:
        assert len(traj.turns) == traj.hops >= 2
        assert traj.answer.lower() in passages[traj.path_doc_ids[-1]].contents.lower()
        assert traj.answer.lower() not in traj.question.lower()
