"""The verl reward managers on hand-built DataProtos with the real Qwen2.5 tokenizer."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from gta_verl.data.schema import EF_INVALID_ACTIONS, EF_TURN_DOC_IDS
from gta_verl.protocol import build_messages
from gta_verl.rewards.scoring import scoring_request_from_data
from gta_verl.testing.reward_data import make_reward_data, make_reward_manager
from gta_verl.verl_compat import DataProto
from tests.rewards.cases import CASES

EXTRA_KEYS = {
    "acc",
    "f1",
    "num_searches",
    "target_doc_cov",
    "complete_chain",
    "zero_target_turns",
    "zero_target_queries",
    "search_reward_sum",
    "answer_reward",
    "traj_reward",
    "has_targets",
    "has_answer",
    "invalid_actions",
    "retrieval_errors",
    "turn_rewards_json",
    "reward_error",
}


@pytest.fixture(scope="module")
def prompt_ids(tok):
    # The real prompt, whose instructions contain the "<answer> Beijing </answer>" example.
    text = tok.apply_chat_template(build_messages("Which city?"), add_generation_prompt=True, tokenize=False)
    return tok.encode(text, add_special_tokens=False)


def _check_extra(info):
    assert set(info) == EXTRA_KEYS
    for key, value in info.items():
        assert isinstance(value, str if key == "turn_rewards_json" else (int, float)), key


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
async def test_trajectory_guided_table(tok, prompt_ids, case):
    out = await make_reward_manager("trajectory_guided", tok).run_single(
        make_reward_data(tok, prompt_ids, case)
    )
    assert isinstance(out["reward_score"], float)
    assert out["reward_score"] == pytest.approx(case.total)
    info = out["reward_extra_info"]
    _check_extra(info)
    assert info["acc"] == case.em
    assert info["complete_chain"] == float(case.complete)
    assert info["target_doc_cov"] == pytest.approx(case.cov)
    assert info["zero_target_turns"] == case.zero_turns
    assert info["num_searches"] == len(case.turn_doc_ids)
    assert json.loads(info["turn_rewards_json"]) == pytest.approx(list(case.search_rewards))
    assert info["search_reward_sum"] == pytest.approx(sum(case.search_rewards))
    assert info["answer_reward"] == case.answer_reward
    assert info["traj_reward"] == pytest.approx(case.total)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
async def test_exact_match_table(tok, prompt_ids, case):
    out = await make_reward_manager("exact_match", tok).run_single(make_reward_data(tok, prompt_ids, case))
    assert out["reward_score"] == case.em
    info = out["reward_extra_info"]
    _check_extra(info)
    assert info["acc"] == case.em
    # Evidence metrics are logged in Stage II too; the reward has no search term.
    assert info["target_doc_cov"] == pytest.approx(case.cov)
    assert info["search_reward_sum"] == 0.0
    assert info["answer_reward"] == case.em
    assert info["traj_reward"] == pytest.approx(case.total)
    assert json.loads(info["turn_rewards_json"]) == [0.0] * len(case.turn_doc_ids)


async def test_padding_numpy_and_special_tokens(tok, prompt_ids):
    case = next(c for c in CASES if c.name == "repeated_doc")
    data = make_reward_data(tok, prompt_ids, case, pad=7, as_numpy=True)
    request = scoring_request_from_data(data, tok)
    assert not request.response_text.endswith("<|im_end|>")  # special tokens skipped
    assert "<|endoftext|>" not in request.response_text  # padding cut by the attention mask
    assert request.target_doc_ids == ("d1", "d2")
    assert request.turn_doc_ids == [["d1"], ["d1"], ["d2"]]
    out = await make_reward_manager("trajectory_guided", tok).run_single(data)
    assert out["reward_score"] == pytest.approx(2.4)


async def test_multi_output_scores_last(tok, prompt_ids):
    wrong = next(c for c in CASES if c.name == "shortcut_wrong")
    right = next(c for c in CASES if c.name == "shortcut_correct")
    a, b = make_reward_data(tok, prompt_ids, wrong, pad=40), make_reward_data(tok, prompt_ids, right)
    b.batch["responses"] = torch.nn.functional.pad(
        b.batch["responses"], (0, a.batch["responses"].shape[1] - b.batch["responses"].shape[1])
    )
    width = a.batch["attention_mask"].shape[1]
    b.batch["attention_mask"] = torch.nn.functional.pad(
        b.batch["attention_mask"], (0, width - b.batch["attention_mask"].shape[1])
    )
    b.batch["input_ids"] = torch.nn.functional.pad(
        b.batch["input_ids"], (0, width - b.batch["input_ids"].shape[1])
    )
    data = DataProto.concat([a, b])
    out = await make_reward_manager("trajectory_guided", tok).run_single(data)
    assert out["reward_score"] == 1.0


async def test_reward_values_from_config(tok, prompt_ids):
    case = next(c for c in CASES if c.name == "partial_chain")  # one hit, one miss, correct+incomplete
    mgr = make_reward_manager(
        "trajectory_guided",
        tok,
        gta={"reward": {"miss": -0.2, "correct_incomplete": 0.5}},
        reward={"reward_kwargs": {"hit_per_doc": 1.0, "overlong_buffer_cfg": None}},  # foreign key ignored
    )
    out = await mgr.run_single(make_reward_data(tok, prompt_ids, case))
    assert out["reward_score"] == pytest.approx(1.0 - 0.2 + 0.5)


def test_bad_reward_config_fails_at_construction(tok):
    with pytest.raises(ValueError, match="unknown key"):
        make_reward_manager("trajectory_guided", tok, gta={"reward": {"mis": -0.2}})


def test_missing_ground_truth(tok, prompt_ids):
    data = make_reward_data(tok, prompt_ids, CASES[0])
    data.non_tensor_batch["reward_model"] = np.array([{"style": "rule"}], dtype=object)
    with pytest.raises(KeyError, match="make_verl_row"):
        scoring_request_from_data(data, tok)


async def test_recorded_answer_is_what_is_scored(tok, prompt_ids):
    # The stray-opener case: the loop recorded "Paris" (turn 2's answer action). Scored from the
    # record: 0.25·2 + 2 = 2.5; a record of None (never answered) scores −1 + 0.5 = −0.5 even
    # though the text holds an answer tag, because the record is what the loop did.
    case = next(c for c in CASES if c.name == "stray_answer_opener_then_right")
    mgr = make_reward_manager("trajectory_guided", tok)
    out = await mgr.run_single(make_reward_data(tok, prompt_ids, case, recorded="Paris"))
    assert out["reward_score"] == pytest.approx(2.5)
    none = await mgr.run_single(make_reward_data(tok, prompt_ids, case, recorded=None))
    assert none["reward_score"] == pytest.approx(-0.5) and none["reward_extra_info"]["has_answer"] == 0.0


async def test_without_gta_agent_loop_fields(tok, prompt_ids):
    # A third-party loop (no gta/ extra fields) still scores: no searches recorded.
    data = make_reward_data(tok, prompt_ids, CASES[0])
    data.non_tensor_batch.pop("tool_extra_fields")
    out = await make_reward_manager("trajectory_guided", tok).run_single(data)
    assert out["reward_score"] == 1.0 and out["reward_extra_info"]["num_searches"] == 0


# --- one malformed row never fails the batch ----------------------------------------------------------------
def _with_gt(tok, prompt_ids, gt, fields_patch=None):
    data = make_reward_data(tok, prompt_ids, CASES[0])
    data.non_tensor_batch["reward_model"] = np.array([{"style": "rule", "ground_truth": gt}], dtype=object)
    if fields_patch:
        data.non_tensor_batch["tool_extra_fields"][0].update(fields_patch)
    return data


@pytest.mark.parametrize("name", ["trajectory_guided", "exact_match", "path_router"])
@pytest.mark.parametrize(
    "gt, fields",
    [
        ({"target": float("nan"), "target_doc_ids": ["d1"]}, None),  # NaN gold would be the answer "nan"
        ({"target": ["x"], "target_doc_ids": "d1"}, None),  # a string where a list belongs
        ({"target": ["x"], "support_texts": "some text"}, None),
        ({"target": ["x"]}, {EF_INVALID_ACTIONS: float("nan")}),  # NaN counter from a broken loop
        ({"target": {"nested": "dict"}}, None),  # an answer that is not a string/number
    ],
)
async def test_a_malformed_row_scores_zero_as_a_counted_error(tok, prompt_ids, name, gt, fields) -> None:
    if name == "path_router" and fields and EF_INVALID_ACTIONS in fields:
        pytest.skip("PathRouter's reward does not read gta/invalid_actions")
    good = await make_reward_manager(name, tok).run_single(make_reward_data(tok, prompt_ids, CASES[0]))
    out = await make_reward_manager(name, tok).run_single(_with_gt(tok, prompt_ids, gt, fields))
    assert out["reward_score"] == 0.0
    assert (
        out["reward_extra_info"]["reward_error"] == 1.0 and good["reward_extra_info"]["reward_error"] == 0.0
    )
    assert set(out["reward_extra_info"]) == set(good["reward_extra_info"])  # verl takes keys from row 0


async def test_a_scalar_gold_answer_is_scored_not_raised(tok, prompt_ids) -> None:
    mgr = make_reward_manager("exact_match", tok)
    num = await mgr.run_single(_with_gt(tok, prompt_ids, {"target": 1990}))
    assert num["reward_extra_info"]["reward_error"] == 0.0  # was a TypeError out of run_single


@pytest.mark.parametrize("name", ["trajectory_guided", "exact_match", "path_router"])
@pytest.mark.parametrize(
    "turns",
    [
        "d1d2",  # was 4 one-character turns 'd' '1' 'd' '2': 4 misses −0.4 + correct-incomplete +1 = 0.6
        ["d1", "d2"],  # a flat list: each id read as a turn of characters
        {"d1": 1, "d2": 1},  # a dict: its keys
        [[["d1"]], [["d2"]]],  # three deep: the id "['d1']"
        [[b"d1"], [b"d2"]],  # bytes ids: "b'd1'"
    ],
    ids=["string", "flat-list", "dict", "three-deep", "bytes"],
)
async def test_malformed_turn_doc_ids_score_zero_as_a_counted_error(tok, prompt_ids, name, turns) -> None:
    case = next(c for c in CASES if c.name == "full_chain")
    good = await make_reward_manager(name, tok).run_single(make_reward_data(tok, prompt_ids, case))
    data = make_reward_data(tok, prompt_ids, case)
    data.non_tensor_batch["tool_extra_fields"][0][EF_TURN_DOC_IDS] = turns
    out = await make_reward_manager(name, tok).run_single(data)
    assert good["reward_extra_info"]["reward_error"] == 0.0
    if name == "trajectory_guided":
        # [["d1", "x"], ["d2", "y"]]: two new targets 0.25 + 0.25, correct and complete +2 = 2.5.
        assert good["reward_score"] == pytest.approx(0.25 + 0.25 + 2)
    assert out["reward_score"] == 0.0 and out["reward_extra_info"]["reward_error"] == 1.0
    assert set(out["reward_extra_info"]) == set(good["reward_extra_info"])
