"""The ``path_router`` verl reward manager on hand-built DataProtos (real Qwen2.5 tokenizer)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from gta_verl.data.schema import (
    EF_BUDGET_EXHAUSTED,
    EF_NUM_SEARCHES,
    EF_TURN_DOC_IDS,
    EF_TURN_QUERIES,
    EF_TURN_TEXTS,
    make_ground_truth,
)
from gta_verl.protocol import build_messages
from gta_verl.verl_compat import DataProto, get_reward_manager_cls

PR_KEYS = {
    "acc",
    "f1",
    "C",
    "P",
    "route",
    "route_weight",
    "distill_select",
    "num_searches",
    "has_gold_evidence",
}
GOLD = ("Alpha Corp\nAlpha Corp was founded by Jane Roe", "Jane Roe\nJane Roe was born in Lyon")
# Normalized token bags (SQuAD: lower-case, no punctuation/articles):
#   gold1 = alpha×2 corp×2 was founded by jane roe            → 9 tokens
#   gold2 = jane×2 roe×2 was born in lyon                     → 8 tokens
# OTHERS share no token with either gold passage, 7 tokens each.
OTHERS = (
    "Gamma Mill\nGamma Mill makes steel pipes",
    "Delta Farm\nDelta Farm grows red apples",
    "Omega Club\nOmega Club plays chess weekly",
    "Sigma Lab\nSigma Lab studies ocean tides",
)


def make_data(tok, response, turns, answers=("Lyon",), gold=GOLD, budget_exhausted=False, as_numpy=False):
    prompt = tok.encode(
        tok.apply_chat_template(
            build_messages("Where was Alpha Corp's founder born?"), add_generation_prompt=True, tokenize=False
        ),
        add_special_tokens=False,
    )
    resp = tok.encode(response + "<|im_end|>", add_special_tokens=False)
    gt = make_ground_truth(list(answers), [f"d{i}" for i in range(len(gold))], list(gold))
    if as_numpy:
        gt = {k: np.array(v, dtype=object) for k, v in gt.items()}
    fields = {
        EF_TURN_QUERIES: [q for q, _ in turns],
        EF_TURN_TEXTS: [list(texts) for _, texts in turns],
        EF_TURN_DOC_IDS: [[f"x{i}" for i, _ in enumerate(texts)] for _, texts in turns],
        EF_NUM_SEARCHES: len(turns),
        EF_BUDGET_EXHAUSTED: budget_exhausted,
    }
    return DataProto.from_single_dict(
        {
            "prompts": torch.tensor([prompt]),
            "responses": torch.tensor([resp]),
            "attention_mask": torch.ones(1, len(prompt) + len(resp), dtype=torch.long),
            "data_source": np.array(["musique"], dtype=object),
            "reward_model": np.array([{"style": "rule", "ground_truth": gt}], dtype=object),
            "extra_info": np.array([{"index": 0}], dtype=object),
            "tool_extra_fields": np.array([fields], dtype=object),
        }
    )


def make_manager(tok, path_router=None):
    cfg = OmegaConf.create({"gta": {"path_router": path_router or {}}, "reward": {}})
    cls = get_reward_manager_cls("path_router")
    return cls(
        config=cfg, tokenizer=tok, compute_score=None, reward_router_address=None, reward_model_tokenizer=None
    )


def run(manager, data):
    return asyncio.run(manager.run_single(data))


def test_registered_and_faithful_success(tok):
    mgr = make_manager(tok)
    data = make_data(
        tok, "<search> founder </search>\n\n<info>...</info>\n\n<answer> Lyon </answer>", [("founder", GOLD)]
    )
    out = run(mgr, data)
    info = out["reward_extra_info"]
    assert PR_KEYS <= set(info)
    assert all(isinstance(v, (int, float)) for v in info.values())
    # both gold passages retrieved → best_passage P = (1 + 1)/2 = 1; C=1 → C+P+
    assert (
        info["C"] == 1
        and info["route"] == 0
        and info["route_weight"] == 1.0
        and info["distill_select"] == 0.0
    )
    # R = r_a + α·P + r_e = 1 + 1·1 + 0.1
    assert info["P"] == pytest.approx(1.0) and out["reward_score"] == pytest.approx(2.1)


RESPONSE = "<search> founder </search>\n\n<info>...</info>\n\n<answer> Lyon </answer>"


@pytest.mark.parametrize(
    ("retrieved", "overlap", "p", "route"),
    [
        # gold only. best: (1 + 1)/2 = 1.
        (GOLD, "best_passage", 1.0, 0),
        # bag of 17 tokens: gold1 9/17 precision, recall 1 → F1 = 2·(9/17)/(26/17) = 9/13;
        # gold2 → 2·(8/17)/(25/17) = 16/25; P = (9/13 + 16/25)/2 = 433/650 ≈ 0.666.
        (GOLD, "bag", 433 / 650, 0),
        # gold + 4 others. best: still (1 + 1)/2 = 1.
        (GOLD + OTHERS, "best_passage", 1.0, 0),
        # bag of 17 + 28 = 45 tokens: gold1 → 2·(9/45)/(54/45) = 1/3; gold2 → 2·(8/45)/(53/45)
        # = 16/53; P = (1/3 + 16/53)/2 = 101/318 ≈ 0.318 < θ_P 0.4 → C+P- although both gold
        # passages were found: the bag reading punishes the 4 extra passages.
        (GOLD + OTHERS, "bag", 101 / 318, 1),
        # gold1 + others. best: gold1 ← itself 1; gold2 ← gold1 shares was, jane, roe:
        # P=3/9, R=3/8 → F1 = 2·(1/3)(3/8)/(1/3 + 3/8) = 6/17; P = (1 + 6/17)/2 = 23/34.
        (GOLD[:1] + OTHERS, "best_passage", 23 / 34, 0),
        # others only: no shared token with either gold passage → P = 0 < θ_P → C+P- (shortcut).
        (OTHERS, "best_passage", 0.0, 1),
        (OTHERS, "bag", 0.0, 1),
    ],
)
def test_hand_computed_p_gold_only_gold_plus_others_others_only(tok, retrieved, overlap, p, route):
    out = run(make_manager(tok, {"overlap": overlap}), make_data(tok, RESPONSE, [("founder", retrieved)]))
    info = out["reward_extra_info"]
    assert info["P"] == pytest.approx(p)
    assert info["route"] == route and info["distill_select"] == float(route == 1)
    # R = r_a + α·P + r_e with r_a = 1 (F1("Lyon", "Lyon")), α = 1, r_e = 0.1
    assert out["reward_score"] == pytest.approx(1.0 + p + 0.1)


def test_lazy_correct_answer_is_shortcut_route(tok):
    out = run(make_manager(tok), make_data(tok, "<answer> Lyon </answer>", [], as_numpy=True))
    info = out["reward_extra_info"]
    assert info["route"] == 1 and info["route_weight"] == 0.5 and info["distill_select"] == 1.0
    assert info["P"] == 0.0 and out["reward_score"] == pytest.approx(1.0 - 0.2)


def test_timeout_wrong_and_ablation_knobs(tok):
    data = make_data(
        tok, "<search> q </search>", [("q", ("Other\nnothing relevant here",))], budget_exhausted=True
    )
    info = run(make_manager(tok), data)["reward_extra_info"]
    assert info["route"] == 3 and info["C"] == 0 and info["distill_select"] == 1.0
    flat = run(make_manager(tok, {"route_scaling": False}), make_data(tok, "<answer> Lyon </answer>", []))
    assert flat["reward_extra_info"]["route_weight"] == 1.0
    no_kl = run(make_manager(tok, {"kl": {"enabled": False}}), data)
    assert no_kl["reward_extra_info"]["distill_select"] == 0.0


def test_combination_uses_trajectory_guided_reward(tok):
    mgr = make_manager(tok, {"base_reward": "trajectory_guided"})
    data = make_data(
        tok,
        "<search> founder </search>\n\n<info>...</info>\n\n<answer> Paris </answer>",
        [("founder", GOLD[:1])],
    )
    out = run(mgr, data)
    info = out["reward_extra_info"]
    assert PR_KEYS <= set(info) and "turn_rewards_json" in info and "target_doc_cov" in info
    # R_traj: the turn retrieved x0 (not a target d0/d1) → miss −0.10; wrong answer −1
    assert out["reward_score"] == pytest.approx(-1.1)
    assert info["C"] == 0 and info["route"] in (2, 3)


def test_bad_config_fails_at_construction(tok):
    with pytest.raises(ValueError, match="unknown gta.path_router keys"):
        make_manager(tok, {"theta": 0.1})
