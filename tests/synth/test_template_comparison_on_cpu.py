"""Template comparison questions: two independent sub-questions looked up in one search action."""

from __future__ import annotations

import numpy as np
import pytest

from gta_verl.data.types import Triple
from gta_verl.eval.replay import reference_script
from gta_verl.synth.generators.template import TemplateConfig, TemplateGenerator, compose_comparison
from gta_verl.synth.validate import check_rules
from gta_verl.synth.writer import trajectory_to_dict, trajectory_to_row


def test_yes_comparison_from_the_shared_entity(tiny_kb, obama_honolulu):
    traj = TemplateGenerator(TemplateConfig(comparison_share=1.0)).compose(obama_honolulu, tiny_kb)
    # d_1: (barack obama, born in, honolulu) phrases b = Honolulu from Barack Obama;
    # d_2: one of Honolulu's triples phrases Honolulu from its other end; every d_2 triple
    # mentions Honolulu, so there is no "no" side: the answer is yes.
    second = {
        "capital of Hawaii": "the entity that capital of Hawaii",
        "located on Oahu": "the entity that located on Oahu",
    }
    assert traj.answer == "yes"
    assert traj.turns[0].query == "Barack Obama born in" and traj.turns[1].query in second
    assert (
        traj.question == f"Is the entity that Barack Obama born in the same as {second[traj.turns[1].query]}?"
    )
    assert [t.target_doc_id for t in traj.turns] == list(obama_honolulu.doc_ids)
    assert [t.with_previous for t in traj.turns] == [False, True]
    assert "Honolulu" not in traj.question
    assert traj.final_reasoning.endswith("So the answer is yes.")
    # the synthesis rules keep it (a yes/no verdict need not appear in the last document)
    assert check_rules(traj, {p.doc_id: p for p in tiny_kb.passages}) is None
    # τ* replays as ONE search action carrying both queries, then the answer
    row = trajectory_to_row(traj, 0, {p.doc_id: p for p in tiny_kb.passages})
    script = reference_script(row)
    assert len(script) == 2
    assert script[0].endswith(f"<search> Barack Obama born in ## {traj.turns[1].query} </search>")
    assert script[1].endswith("<answer> yes </answer>")


def test_no_comparison_from_another_triple(tiny_kb, obama_honolulu):
    # d_2 gets one triple that mentions neither Honolulu nor Barack Obama, and the Honolulu
    # triples are filtered out: the only phrasing left is the "no" side.
    honolulu = obama_honolulu.doc_ids[1]
    extra = Triple("duke kahanamoku", "surfed at", "waikiki", honolulu)

    def usable(triples):
        return [t for t in triples if t.relation not in ("capital of", "located on")]

    traj = compose_comparison(obama_honolulu, tiny_kb, [extra], usable, np.random.default_rng(0))
    assert traj.answer == "no"
    assert [t.query for t in traj.turns] == ["Barack Obama born in", "duke kahanamoku surfed at"]
    assert (
        traj.question
        == "Is the entity that Barack Obama born in the same as the entity that duke kahanamoku surfed at?"
    )


def test_default_is_chains_only_and_one_query_rows_are_unchanged(tiny_kb, obama_honolulu):
    chain = TemplateGenerator().compose(obama_honolulu, tiny_kb)
    assert chain.question.startswith("What is") and not any(t.with_previous for t in chain.turns)
    assert all("with_previous" not in t for t in trajectory_to_dict(chain)["turns"])
    with pytest.raises(ValueError, match="comparison_share"):
        TemplateConfig(comparison_share=1.5)


def test_comparison_row_runs_as_one_multi_query_turn(tiny_kb, obama_honolulu):
    """τ* of a comparison row, replayed through the real loop with K = 2, scores as the hand sum."""
    from gta_verl.agent.backends import ScriptedServerManager
    from gta_verl.agent.runner import make_trainer_config, run_agent_rollouts
    from gta_verl.agent.tokenizer import load_qwen_tokenizer
    from gta_verl.data import schema
    from gta_verl.data.types import RetrievalHit, RetrievalResult
    from gta_verl.rewards.scoring import ScoringRequest, score_trajectory_guided

    traj = TemplateGenerator(TemplateConfig(comparison_share=1.0)).compose(obama_honolulu, tiny_kb)
    passages = {p.doc_id: p for p in tiny_kb.passages}
    row = trajectory_to_row(traj, 0, passages, max_queries_per_turn=2)
    assert "separated by ##" in row["prompt"][0]["content"]
    target = {t.query: t.target_doc_id for t in traj.turns}

    class ByQuery:
        def __init__(self) -> None:
            self.calls: list[list[str]] = []

        async def aretrieve(self, queries):
            self.calls.append(list(queries))
            return [
                RetrievalResult(
                    q, hits=(RetrievalHit(target[q], passages[target[q]].title, "x", 1.0, "graph"),)
                )
                for q in queries
            ]

    tok, client = load_qwen_tokenizer(), ByQuery()
    manager = ScriptedServerManager(tok, [reference_script(row)])
    cfg = make_trainer_config(response_length=2048, gta={"agent": {"max_queries_per_turn": 2}})
    (out,) = run_agent_rollouts([row], manager, tok, client, cfg, n_samples=1)
    assert client.calls == [[t.query for t in traj.turns]]  # one batched call
    assert out.extra_fields[schema.EF_TURN_DOC_IDS] == [list(obama_honolulu.doc_ids)]
    request = ScoringRequest("", ("yes",), tuple(obama_honolulu.doc_ids), extra_fields=out.extra_fields)
    # one turn finding both targets: 0.25·2; "yes" correct with C_T ⊇ S: +2 → 2.5
    assert score_trajectory_guided(request)[0] == 2.5
