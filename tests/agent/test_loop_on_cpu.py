"""The gta_search_agent loop driven by scripted generations (real Qwen2.5 tokenizer).

Scripts play the policy; the retriever is the real graph retriever on the bundled
MuSiQue KB (``musique_retriever_client``) or a failing client for the failure modes.
"""

from __future__ import annotations

import asyncio
import itertools

import pytest

from gta_verl.agent.backends import ScriptedServerManager
from gta_verl.agent.loop import EF_PLACE_TURN_REWARDS, EF_TRAILING_DROPPED
from gta_verl.agent.runner import make_trainer_config, run_agent_rollouts
from gta_verl.agent.spans import response_mask_from_spans
from gta_verl.data import schema
from gta_verl.data.schema import make_verl_row
from gta_verl.data.types import QAExample
from gta_verl.protocol import INVALID_ACTION_MESSAGE, format_observation

from .conftest import ErrorResultRetriever, HangingRetriever, RaisingRetriever

QUESTION = QAExample("q1", "Who directed the film that won?", ("Nolan",), ("dA", "dB"), 2, "toy")


def rollout(tokenizer, client, scripts, response_length=1024, gta=None, **manager_kw):
    manager = ScriptedServerManager(tokenizer, scripts, **manager_kw)
    cfg = make_trainer_config(prompt_length=1024, response_length=response_length, gta=gta)
    rows = [make_verl_row(QUESTION, 0)]
    (out,) = run_agent_rollouts(rows, manager, tokenizer, client, cfg, n_samples=1)
    return out, manager


def spans_of(out, kind):
    return [(s, e) for k, s, e in out.extra_fields[schema.EF_TURN_SPANS] if k == kind]


def check_invariants(out, response_length):
    n = len(out.response_ids)
    assert n <= response_length
    assert len(out.response_mask) == n and (out.response_logprobs is None or len(out.response_logprobs) == n)
    spans = out.extra_fields[schema.EF_TURN_SPANS]
    assert spans and spans[0][1] == 0 and spans[-1][2] == n  # spans tile the response
    assert all(a[2] == b[1] for a, b in itertools.pairwise(spans))
    assert out.response_mask == response_mask_from_spans(n, spans)
    if out.response_logprobs is not None:
        for k, s, e in spans:
            if k in ("observation", "invalid"):
                assert out.response_logprobs[s:e] == [0.0] * (e - s)
            else:
                assert out.response_logprobs[s:e] == [-0.5] * (e - s)


def test_search_then_answer_masks_spans_doc_ids(qwen_tokenizer, musique_retriever_client, musique_qa) -> None:
    tok, client = qwen_tokenizer, musique_retriever_client
    ex = next(q for q in musique_qa if len(q.supporting_texts) >= 2)
    titles = [t.split("\n", 1)[0] for t in ex.supporting_texts[:2]]
    script = [
        f"First find the first entity. <search> {titles[0]} </search>",
        f"Next hop.\n<search>{titles[1]}</search>",
        f"So the answer is <answer> {ex.answers[0]} </answer>",
    ]
    # room for two uncapped observations of K_g + K_d = 6 MuSiQue paragraphs each
    out, manager = rollout(
        tok, client, [script], response_length=4096, gta={"agent": {"max_obs_tokens": 2048}}
    )
    check_invariants(out, 4096)
    ef = out.extra_fields
    assert ef[schema.EF_TURN_QUERIES] == titles
    assert ef[schema.EF_NUM_SEARCHES] == 2 and ef[schema.EF_ANSWER] == ex.answers[0]
    assert ef[schema.EF_INVALID_ACTIONS] == 0 and ef[schema.EF_RETRIEVAL_ERRORS] == 0
    assert not ef[schema.EF_BUDGET_EXHAUSTED] and not ef[schema.EF_TRUNCATED]
    kinds = [k for k, _, _ in ef[schema.EF_TURN_SPANS]]
    assert kinds == [
        "reasoning",
        "query",
        "observation",
        "reasoning",
        "query",
        "observation",
        "reasoning",
        "answer",
    ]
    expected = asyncio.run(client.aretrieve(titles))
    assert ef[schema.EF_TURN_DOC_IDS] == [r.doc_ids for r in expected]
    assert ef[schema.EF_TURN_TEXTS][0] == [f"{h.title}\n{h.text}" for h in expected[0].hits]
    # the observation tokens decode to exactly the formatted R(q_t)
    for (s, e), res in zip(spans_of(out, "observation"), expected, strict=True):
        assert tok.decode(out.response_ids[s:e]) == format_observation(res.hits)
    for (s, e), title in zip(spans_of(out, "query"), titles, strict=True):
        assert tok.decode(out.response_ids[s:e]).strip().replace(
            " ", ""
        ) == f"<search>{title}</search>".replace(" ", "")
    ((a_s, a_e),) = spans_of(out, "answer")
    assert tok.decode(out.response_ids[a_s:a_e]).strip() == f"<answer> {ex.answers[0]} </answer>"
    # a gold document is retrieved by its own title
    assert any(d in ex.supporting_doc_ids for d in ef[schema.EF_TURN_DOC_IDS][0])
    # every call: one request id, stop strings, prompt = prompt + response so far, shrinking max_tokens
    calls = manager.calls
    assert len({c["request_id"] for c in calls}) == 1
    for c in calls:
        sp = c["sampling_params"]
        assert sp["stop"] == ["</search>", "</answer>"] and sp["include_stop_str_in_output"] is True
        grown = len(c["prompt_ids"]) - len(out.prompt_ids)
        assert c["prompt_ids"] == out.prompt_ids + out.response_ids[:grown]
        assert sp["max_tokens"] == 4096 - grown


def test_invalid_action_message_is_masked(qwen_tokenizer, fake_retriever) -> None:
    out, _ = rollout(qwen_tokenizer, fake_retriever, [["I am not sure what to do.", "<answer> x </answer>"]])
    check_invariants(out, 1024)
    ((s, e),) = spans_of(out, "invalid")
    assert qwen_tokenizer.decode(out.response_ids[s:e]) == INVALID_ACTION_MESSAGE
    assert out.response_mask[s:e] == [0] * (e - s)
    assert out.extra_fields[schema.EF_INVALID_ACTIONS] == 1
    assert [k for k, _, _ in out.extra_fields[schema.EF_TURN_SPANS]] == ["reasoning", "invalid", "answer"]


def test_budget_exhaustion(qwen_tokenizer, fake_retriever) -> None:
    script = [f"<search> q{i} </search>" for i in range(10)]
    out, manager = rollout(qwen_tokenizer, fake_retriever, [script], gta={"agent": {"max_actions": 3}})
    check_invariants(out, 1024)
    ef = out.extra_fields
    assert len(manager.calls) == 3 and ef[schema.EF_NUM_SEARCHES] == 3
    assert ef[schema.EF_BUDGET_EXHAUSTED] is True and ef[schema.EF_ANSWER] is None
    assert ef[schema.EF_TURN_QUERIES] == ["q0", "q1", "q2"]
    assert ef[schema.EF_TURN_DOC_IDS] == [["d:q0"], ["d:q1"], ["d:q2"]]


def test_answer_on_last_allowed_action_is_not_budget_exhausted(qwen_tokenizer, fake_retriever) -> None:
    out, _ = rollout(
        qwen_tokenizer,
        fake_retriever,
        [["<search> a </search>", "<answer> b </answer>"]],
        gta={"agent": {"max_actions": 2}},
    )
    assert out.extra_fields[schema.EF_ANSWER] == "b" and not out.extra_fields[schema.EF_BUDGET_EXHAUSTED]


def test_truncation_at_response_length(qwen_tokenizer, fake_retriever) -> None:
    script = ["<search> first query </search>", "<search> second </search>", "<answer> z </answer>"]
    full, _ = rollout(qwen_tokenizer, fake_retriever, [script])
    obs_start = spans_of(full, "observation")[0][0]
    limit = obs_start + 5  # room for 5 observation tokens: no passage fits
    out, _ = rollout(qwen_tokenizer, fake_retriever, [script], response_length=limit)
    check_invariants(out, limit)
    assert len(out.response_ids) == limit and out.response_ids[:obs_start] == full.response_ids[:obs_start]
    assert out.response_mask == full.response_mask[:limit]
    assert out.extra_fields[schema.EF_TRUNCATED] is True and out.extra_fields[schema.EF_ANSWER] is None
    assert out.extra_fields[schema.EF_TURN_SPANS][-1] == ["observation", limit - 5, limit]
    # the observation was fitted to the 5 tokens left: its passage was not shown, so the
    # search records no document (recording ["d:first query"] would credit an unseen passage)
    assert qwen_tokenizer.decode(out.response_ids[obs_start:]).endswith("</info>\n\n")
    assert out.extra_fields[schema.EF_TURN_DOC_IDS] == [[]] and out.extra_fields[schema.EF_TURN_TEXTS] == [[]]


def test_generation_capped_by_remaining_length(qwen_tokenizer, fake_retriever) -> None:
    out, manager = rollout(qwen_tokenizer, fake_retriever, [["word " * 100]], response_length=40)
    check_invariants(out, 40)
    assert manager.calls[0]["sampling_params"]["max_tokens"] == 40
    assert out.extra_fields[schema.EF_TRUNCATED] is True


@pytest.mark.parametrize(
    ("client", "gta", "error_text"),
    [
        (RaisingRetriever(), None, "Search failed: ConnectionError: retriever actor died"),
        (HangingRetriever(), {"retriever": {"timeout_s": 0.2}}, "Search failed: timeout after 0.2s"),
        (ErrorResultRetriever(), None, "Search failed: timeout after 30s"),
    ],
)
def test_retriever_failure_is_an_observation(qwen_tokenizer, client, gta, error_text) -> None:
    script = ["<search> q </search>", "<answer> a </answer>"]
    out, manager = rollout(qwen_tokenizer, client, [script], gta=gta)
    check_invariants(out, 1024)
    ef = out.extra_fields
    assert ef[schema.EF_RETRIEVAL_ERRORS] == 1 and ef[schema.EF_NUM_SEARCHES] == 1
    assert ef[schema.EF_TURN_DOC_IDS] == [[]] and ef[schema.EF_ANSWER] == "a"  # the rollout continued
    ((s, e),) = spans_of(out, "observation")
    assert error_text in qwen_tokenizer.decode(out.response_ids[s:e])
    assert len(manager.calls) == 2


def test_text_past_the_stop_string_is_dropped(qwen_tokenizer, fake_retriever) -> None:
    # A backend ignoring the stop strings (verl #935): only the first action counts.
    script = [
        "<search> q </search> <info> hallucinated </info>",
        "<answer> A </answer> trailing <answer> B </answer>",
    ]
    out, _ = rollout(qwen_tokenizer, fake_retriever, [script], honor_stop=False)
    check_invariants(out, 1024)
    assert out.extra_fields[EF_TRAILING_DROPPED] == 2
    assert out.extra_fields[schema.EF_ANSWER] == "A"
    assert qwen_tokenizer.decode(out.response_ids).endswith("<answer> A </answer>")
    assert "hallucinated" not in qwen_tokenizer.decode(out.response_ids)


def test_no_logprobs_from_backend(qwen_tokenizer, fake_retriever) -> None:
    out, _ = rollout(qwen_tokenizer, fake_retriever, [["<answer> a </answer>"]], logprob=None)
    assert out.response_logprobs is None and out.output.as_dict().get("rollout_log_probs") is None


def test_observation_cap(qwen_tokenizer, fake_retriever) -> None:
    long_q = "very long query " * 40
    out, _ = rollout(
        qwen_tokenizer,
        fake_retriever,
        [[f"<search> {long_q} </search>", "<answer> a </answer>"]],
        gta={"agent": {"max_obs_tokens": 20}},
    )
    ((s, e),) = spans_of(out, "observation")
    assert e - s == 20 and qwen_tokenizer.decode(out.response_ids[s:e]).endswith("</info>\n\n")
    # the one passage's ~120-token title cannot be shown in 20 tokens: nothing is recorded
    assert out.extra_fields[schema.EF_TURN_DOC_IDS] == [[]]


def test_default_cap_on_long_real_passages_records_only_what_was_shown(
    qwen_tokenizer, musique_retriever_client, musique_qa
) -> None:
    """Default max_obs_tokens = 512 on real MuSiQue retrievals whose full observation is longer:
    every passage is shortened, all are shown, and the recorded texts are exactly the shown ones."""
    tok, client = qwen_tokenizer, musique_retriever_client
    long_q = None
    for ex in musique_qa:  # first question whose 6-passage observation exceeds 512 tokens
        (res,) = asyncio.run(client.aretrieve([ex.question]))
        if len(tok.encode(format_observation(res.hits), add_special_tokens=False)) > 600:
            long_q, hits = ex.question, res.hits
            break
    assert long_q is not None, "no MuSiQue retrieval longer than 600 tokens"
    out, _ = rollout(tok, client, [[f"<search> {long_q} </search>", "<answer> x </answer>"]])
    ((s, e),) = spans_of(out, "observation")
    shown = tok.decode(out.response_ids[s:e])
    assert e - s <= 512
    ef = out.extra_fields
    # all retrieved passages are shown (each shortened, the list is not cut)
    assert ef[schema.EF_TURN_DOC_IDS] == [[h.doc_id for h in hits]]
    texts = ef[schema.EF_TURN_TEXTS][0]
    assert len(texts) == len(hits)
    for i, (text, hit) in enumerate(zip(texts, hits, strict=True)):
        title, body = text.split("\n", 1)
        assert title == hit.title and hit.text.startswith(body)
        # what the reward reads is literally in the observation the policy saw
        assert f"Doc {i + 1}(Title: {title}) {body}" in shown
    assert sum(len(t) for t in texts) < sum(len(h.title) + 1 + len(h.text) for h in hits)  # shortened


def test_as_dict_places_turn_rewards_and_distill_mask(qwen_tokenizer, fake_retriever) -> None:
    script = ["a <search> q1 </search>", "b <search> q2 </search>", "c <answer> x </answer>"]
    out, _ = rollout(qwen_tokenizer, fake_retriever, [script], gta={"agent": {"place_turn_rewards": True}})
    assert out.extra_fields[EF_PLACE_TURN_REWARDS] is True
    n = len(out.response_ids)
    q_ends = [e - 1 for s, e in spans_of(out, "query")]
    # what verl does before as_dict(): _compute_score sets reward_score and reward_extra_info
    out.output.reward_score = 2.15
    out.extra_fields["reward_extra_info"] = {"turn_rewards_json": "[0.25, -0.1]", "acc": 1.0}
    d = out.output.as_dict()
    rm = d["rm_scores"].tolist()
    assert len(rm) == n
    assert rm[q_ends[0]] == pytest.approx(0.25) and rm[q_ends[1]] == pytest.approx(-0.1)
    assert rm[-1] == pytest.approx(2.0) and sum(rm) == pytest.approx(2.15)
    assert sum(1 for v in rm if v != 0) == 3
    # A trajectory_guided manager writes no distill_select: the one default (0) → never distilled
    assert float(d["distill_mask"].sum()) == 0.0
    # PathRouter's manager selects it: the mask covers exactly the policy's reasoning + query
    # tokens "a <search> q1 </search>", "b <search> q2 </search>", "c" — not the observations,
    # not " <answer> x </answer>"
    out.extra_fields["reward_extra_info"]["distill_select"] = 1.0
    mask = out.output.as_dict()["distill_mask"].tolist()
    kept = [t for t, m in zip(out.response_ids, mask, strict=True) if m == 1.0]
    assert qwen_tokenizer.decode(kept) == "a <search> q1 </search>b <search> q2 </search>c"
    assert set(mask) == {0.0, 1.0} and mask[q_ends[0]] == 1.0 and mask[-1] == 0.0
    out.extra_fields["reward_extra_info"]["distill_select"] = 0.0  # evidence-rich
    assert float(out.output.as_dict()["distill_mask"].sum()) == 0.0


def test_as_dict_default_keeps_scalar_reward_on_last_token(qwen_tokenizer, fake_retriever) -> None:
    out, _ = rollout(qwen_tokenizer, fake_retriever, [["<search> q </search>", "<answer> x </answer>"]])
    out.output.reward_score = 1.25
    out.extra_fields["reward_extra_info"] = {"turn_rewards_json": "[0.25]"}
    rm = out.output.as_dict()["rm_scores"].tolist()
    assert rm[-1] == 1.25 and sum(v != 0 for v in rm) == 1


def test_registered_and_selectable_by_name() -> None:
    from gta_verl.verl_compat import AGENT_LOOP_REGISTRY

    assert AGENT_LOOP_REGISTRY["gta_search_agent"]["_target_"] == "gta_verl.agent.loop.GTASearchAgentLoop"


def test_built_by_hydra_like_verl_and_stored_in_transfer_queue_layout(qwen_tokenizer, fake_retriever) -> None:
    """verl's worker path: hydra.instantiate from the registry → run → as_dict → TQ tensordict."""
    import hydra
    from verl.experimental.agent_loop.agent_loop import ToolListWrap
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    from gta_verl.agent.runner import row_to_kwargs, sampling_params_from_config
    from gta_verl.verl_compat import AGENT_LOOP_REGISTRY, DictConfigWrap, RLHFDataset

    cfg = make_trainer_config(gta={"agent": {"place_turn_rewards": True}})

    async def one(script):
        loop = hydra.utils.instantiate(
            config=AGENT_LOOP_REGISTRY["gta_search_agent"],
            trainer_config=DictConfigWrap(config=cfg),
            server_manager=ScriptedServerManager(qwen_tokenizer, [script]),
            tokenizer=qwen_tokenizer,
            processor=None,
            hf_model_type="qwen2",
            dataset_cls=RLHFDataset,
            data_config=DictConfigWrap(cfg.data),
            tools=ToolListWrap([]),
            retriever_client=fake_retriever,
        )
        kwargs = {**row_to_kwargs(make_verl_row(QUESTION, 0)), "uid": "u", "session_id": 0, "global_steps": 1}
        return await loop.run(sampling_params_from_config(cfg), **kwargs), kwargs

    fields = []
    for script in (["<search> q </search>", "<answer> a </answer>"], ["<answer> b </answer>"]):
        out, kwargs = asyncio.run(one(script))
        out.reward_score = 1.0  # what _compute_score sets before as_dict()
        out.extra_fields["reward_extra_info"] = {"turn_rewards_json": "[0.25]", "acc": 1.0}
        field = out.as_dict()
        field.update(kwargs)
        field["loss_mask"] = field["response_mask"]
        fields.append(field)
    td = list_of_dict_to_tensordict(fields)
    for key in ("responses", "response_mask", "rollout_log_probs", "rm_scores", "distill_mask"):
        assert td[key].is_nested and td[key].size(0) == 2
    assert [float(t.sum()) for t in td["rm_scores"].unbind()] == pytest.approx([1.0, 1.0])


@pytest.mark.parametrize(
    "script",
    [
        # stray opener in reasoning, then a search: the turn's first closer is </search>
        [
            "I think <answer> might be Paris, let me check <search> capital </search>",
            "<answer> Lyon </answer>",
        ],
        # stray opener in a turn without closer: invalid, then the answer
        ["maybe <answer> Paris", "<answer> Lyon </answer>"],
    ],
)
def test_reward_parser_reads_the_answer_the_loop_recorded(qwen_tokenizer, fake_retriever, script) -> None:
    from gta_verl.protocol import final_answer

    out, _ = rollout(qwen_tokenizer, fake_retriever, [script])
    assert out.extra_fields[schema.EF_ANSWER] == "Lyon"
    # what a reward manager decodes (special tokens skipped) parses to the same answer;
    # a regex over the whole text would read "might be Paris, let me check … <answer> Lyon" here
    text = qwen_tokenizer.decode(out.response_ids, skip_special_tokens=True)
    assert final_answer(text) == "Lyon"
