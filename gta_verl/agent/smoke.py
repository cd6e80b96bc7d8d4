"""CPU end-to-end RL smoke: real agent loop → real retriever → real reward → GRPO → one PG step.

What runs for real: the ``gta_search_agent`` loop (:mod:`gta_verl.agent.loop`),
the graph retriever on a KB directory, the ``trajectory_guided`` reward manager,
verl's registered ``grpo`` advantage estimator, verl's ``vanilla`` policy loss
with ``agg_loss`` (token-mean), and a backward pass + SGD step on a tiny random
``Qwen2ForCausalLM`` with the real Qwen2.5 tokenizer.

**This is a smoke of the machinery, not learning.** A random model never writes
``<search>``, so every rollout would get the same reward and every GRPO advantage
would be 0. To make the group diverse the smoke uses a *guided* behaviour
(documented in docs/agent.md): rollout ``g`` of a group of ``G``

* ``g = 0``: free generation (the tiny model's gibberish → invalid actions until
  the length or action budget runs out, no answer);
* ``g ≥ 1``: at each turn the model samples ``free_tokens`` tokens of its own
  "reasoning", then the action text is teacher-forced: the first
  ``k_g = ceil(g·H / (G−1))`` searches of the reference trajectory τ* (its queries
  when the row carries ``extra_info.reference_trajectory``, otherwise the titles of
  the gold supporting documents), then ``<answer> gold </answer>`` for ``g = G−1``
  and a wrong answer otherwise.

Every forced token is scored by the model (its log-prob under the current policy is
returned as the rollout log-prob), so the policy-gradient step is well-defined:
old log-probs = the backend's, new log-probs = a fresh forward pass. The smoke
asserts that the gradient of the loss w.r.t. each response token's log-prob is
exactly 0 on every ``response_mask = 0`` position (observations, invalid-action
messages, padding) and non-zero on generated tokens of samples with a non-zero
advantage.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

WRONG_ANSWER = "I do not know"


@dataclass(frozen=True)
class SmokeReport:
    """Result of :func:`run_smoke`; per-rollout lists are ``[question][sample]``."""

    n_questions: int
    group: int
    seed: int
    rewards: list[list[float]]
    searches: list[list[int]]
    forced_searches: list[list[int]]
    target_doc_cov: list[list[float]]
    complete_chain: list[list[float]]
    acc: list[list[float]]
    advantages: list[list[float]]
    response_tokens: int
    generated_tokens: int
    masked_tokens: int
    loss: float
    grad_norm: float
    max_abs_grad_on_masked: float
    generated_tokens_with_grad: int
    ppo_kl: float
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def markdown(self) -> str:
        """A short markdown report."""
        lines = [
            f"# gta-verl CPU RL smoke ({self.n_questions} questions x {self.group} rollouts, seed {self.seed})",
            "",
            "| q | rollout | forced searches | searches | R_traj | TargetDocCov | complete | EM | advantage |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for q in range(self.n_questions):
            for g in range(self.group):
                lines.append(
                    f"| {q} | {g} | {self.forced_searches[q][g]} | {self.searches[q][g]} | "
                    f"{self.rewards[q][g]:+.2f} | {self.target_doc_cov[q][g]:.2f} | "
                    f"{self.complete_chain[q][g]:.0f} | {self.acc[q][g]:.0f} | {self.advantages[q][g]:+.3f} |"
                )
        lines += [
            "",
            (
                f"- response tokens {self.response_tokens} (generated {self.generated_tokens}, "
                f"masked observation/invalid {self.masked_tokens})"
            ),
            (
                f"- policy loss (verl vanilla, token-mean) {self.loss:+.5f}; grad norm {self.grad_norm:.5f}; "
                f"ppo_kl {self.ppo_kl:.2e}"
            ),
            (
                f"- max |dL/dlogp| on mask-0 tokens = {self.max_abs_grad_on_masked:.1e} (must be 0); "
                f"generated tokens with non-zero gradient: {self.generated_tokens_with_grad}"
            ),
            f"- {self.seconds:.1f} s. Guided rollouts: a smoke of the machinery, not learning.",
        ]
        return "\n".join(lines)


def reference_queries(row: Mapping[str, Any]) -> list[str]:
    """τ*'s search queries of a row, else the titles of its gold supporting documents."""
    from gta_verl.data.schema import parse_ground_truth

    ref = (row.get("extra_info") or {}).get("reference_trajectory") or {}
    queries = [str(t["query"]) for t in _plain(ref.get("turns") or []) if t.get("query")]
    if queries:
        return queries
    _, _, texts = parse_ground_truth(row["reward_model"]["ground_truth"])
    return [t.split("\n", 1)[0] for t in texts]


def guide_plan(row: Mapping[str, Any], g: int, group: int) -> list[str | None]:
    """Forced action texts of rollout ``g`` (see module docstring); ``[]`` = free."""
    from gta_verl.protocol import ANSWER_CLOSE, ANSWER_OPEN, SEARCH_CLOSE, SEARCH_OPEN
    from gta_verl.data.schema import parse_ground_truth

    if g == 0:
        return []
    queries = reference_queries(row)
    k = min(len(queries), math.ceil(g * len(queries) / max(1, group - 1)))
    answers, _, _ = parse_ground_truth(row["reward_model"]["ground_truth"])
    answer = answers[0] if g == group - 1 else WRONG_ANSWER
    plan: list[str | None] = [f" {SEARCH_OPEN} {q} {SEARCH_CLOSE}" for q in queries[:k]]
    return plan + [f" {ANSWER_OPEN} {answer} {ANSWER_CLOSE}"]


def _plain(value: Any) -> Any:
    return value.tolist() if hasattr(value, "tolist") else value


def load_rows(data_parquet: str | Path, n_questions: int) -> list[dict[str, Any]]:
    """First ``n_questions`` rows of a verl parquet that have gold documents (plain dicts)."""
    import pyarrow.parquet as pq

    from gta_verl.data.schema import parse_ground_truth

    path = Path(data_parquet)
    if not path.is_file():
        raise FileNotFoundError(f"smoke data parquet {path} does not exist")
    rows = pq.read_table(path).to_pylist()
    with_docs = [r for r in rows if parse_ground_truth(r["reward_model"]["ground_truth"])[2]]
    chosen = (with_docs or rows)[:n_questions]
    if len(chosen) < n_questions:
        raise ValueError(f"{path} has {len(chosen)} usable rows, fewer than --n-questions {n_questions}")
    return chosen


def _make_retriever_client(kb_dir: str | Path) -> Any:
    from gta_verl.agent.retriever_access import in_process_client
    from gta_verl.retrieval.retriever import GraphRetriever

    return in_process_client(GraphRetriever.from_kb_dir(kb_dir))


def _batch(rollouts: Sequence[Any]) -> dict[str, Any]:
    """Right-pad the rollouts' ``as_dict`` tensors into a [B, L] batch."""
    import torch

    dicts = [r.output.as_dict() for r in rollouts]
    width = max(d["responses"].numel() for d in dicts)

    def pad(key: str, dtype: Any) -> Any:
        out = torch.zeros(len(dicts), width, dtype=dtype)
        for i, d in enumerate(dicts):
            out[i, : d[key].numel()] = d[key].to(dtype)
        return out

    return {
        "responses": pad("responses", torch.int64),
        "response_mask": pad("response_mask", torch.float32),
        "rollout_log_probs": pad("rollout_log_probs", torch.float32),
        "rm_scores": pad("rm_scores", torch.float32),
    }


def _response_logprobs(model: Any, prompt_ids: list[int], response_ids: list[int], mask: Any) -> Any:
    """log π(y_t | x, y_<t) for the response, [L]; differentiable where ``mask`` is 1.

    The 151k-way head is applied only at generated positions (the only ones the
    loss can use): observation positions hold a constant 0.0, the value verl's
    agent loop records for them. Whether the loss really ignores them is what the
    gradient probe in :func:`policy_gradient_step` checks.
    """
    import torch

    ids = torch.tensor([prompt_ids + response_ids])
    hidden = model.model(input_ids=ids).last_hidden_state[0]
    live = torch.nonzero(mask[: len(response_ids)] > 0)[:, 0]
    pred = hidden[len(prompt_ids) - 1 + live]  # the state before token t predicts token t
    logits = model.lm_head(pred).float()
    target = torch.tensor(response_ids)[live]
    lp_live = logits.gather(-1, target[:, None])[:, 0] - torch.logsumexp(logits, -1)
    out = torch.zeros(len(response_ids))
    return out.index_put((live,), lp_live)


def policy_gradient_step(
    model: Any, rollouts: Sequence[Any], batch: Mapping[str, Any], adv: Any, lr: float
) -> dict:
    """One verl ``vanilla`` PG step, micro-batched per rollout with the global token count.

    Args:
        model: The tiny policy (updated in place with SGD).
        rollouts: The rollouts (prompt/response ids).
        batch: :func:`_batch` tensors, [B, L].
        adv: GRPO advantages, [B, L].
        lr: SGD learning rate.

    Returns:
        loss, grad norm, the probe results and ppo_kl.
    """
    import torch
    from omegaconf import OmegaConf

    from gta_verl.verl_compat import get_policy_loss_fn

    mask = batch["response_mask"]
    total_tokens = mask.sum()
    # verl's agg_loss with a global batch_num_tokens makes micro-batch losses sum to
    # the full-batch token-mean loss, exactly as verl's actor micro-batches.
    actor_cfg = OmegaConf.create(
        {
            "clip_ratio": 0.2,
            "clip_ratio_low": 0.2,
            "clip_ratio_high": 0.2,
            "clip_ratio_c": 3.0,
            "global_batch_info": {"dp_size": 1, "batch_num_tokens": float(total_tokens)},
        }
    )
    loss_fn = get_policy_loss_fn("vanilla")
    model.train()
    model.zero_grad(set_to_none=True)
    total_loss, kl, probe_masked, probe_live = 0.0, 0.0, 0.0, 0
    for i, r in enumerate(rollouts):
        n = len(r.response_ids)
        lp = torch.zeros(1, mask.size(1))
        lp[0, :n] = _response_logprobs(model, r.prompt_ids, r.response_ids, mask[i])
        lp.retain_grad()
        loss, metrics = loss_fn(
            old_log_prob=batch["rollout_log_probs"][i : i + 1],
            log_prob=lp,
            advantages=adv[i : i + 1],
            response_mask=mask[i : i + 1],
            loss_agg_mode="token-mean",
            config=actor_cfg,
        )
        loss.backward()
        total_loss += loss.item()
        kl += float(metrics["actor/ppo_kl"]) * float(mask[i].sum() / total_tokens)
        grad = lp.grad[0]
        probe_masked = max(
            probe_masked, float(grad[mask[i] == 0].abs().max()) if (mask[i] == 0).any() else 0.0
        )
        probe_live += int(((grad != 0) & (mask[i] == 1)).sum())
    params = [p for p in model.parameters() if p.grad is not None]
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, float("inf")))
    with torch.no_grad():
        for p in params:
            p -= lr * p.grad
    model.eval()
    return {"loss": total_loss, "grad_norm": grad_norm, "masked": probe_masked, "live": probe_live, "kl": kl}


async def _score_all(rollouts: Sequence[Any], trainer_config: Any, tokenizer: Any) -> None:
    import gta_verl.rewards.managers  # noqa: F401 - registers trajectory_guided
    from gta_verl.agent.runner import ascore_rollout
    from gta_verl.verl_compat import get_reward_manager_cls

    manager = get_reward_manager_cls("trajectory_guided")(
        config=trainer_config, tokenizer=tokenizer, compute_score=None
    )
    for r in rollouts:
        await ascore_rollout(manager, r)


def _rollouts(
    rows: list[dict[str, Any]],
    kb_dir: str | Path,
    group: int,
    seed: int,
    client: Any,
    settings: Mapping[str, int],
) -> tuple[Any, list[Any]]:
    """Guided rollouts of the tiny model through the real loop, scored by ``trajectory_guided``."""
    from gta_verl.agent.backends import HFServerManager
    from gta_verl.agent.runner import make_trainer_config, run_agent_rollouts
    from gta_verl.agent.tokenizer import load_qwen_tokenizer, tiny_qwen2

    tokenizer = load_qwen_tokenizer()
    model = tiny_qwen2(seed)
    backend = HFServerManager(
        model,
        tokenizer,
        guide=lambda i, g: guide_plan(rows[i], g, group),
        free_tokens=settings["free_tokens"],
        seed=seed,
        max_tokens_per_call=settings["free_call_tokens"],
    )
    gta = {"retriever": {"kb_dir": str(kb_dir)}, "agent": {"max_obs_tokens": settings["max_obs_tokens"]}}
    cfg = make_trainer_config(prompt_length=1024, response_length=settings["response_length"], gta=gta)
    rollouts = run_agent_rollouts(rows, backend, tokenizer, client, cfg, n_samples=group, concurrency=group)
    asyncio.run(_score_all(rollouts, cfg, tokenizer))
    return model, rollouts


def _report(
    rows: list[dict[str, Any]],
    rollouts: list[Any],
    batch: Mapping[str, Any],
    seq_adv: list[float],
    step: Mapping[str, Any],
    group: int,
    seed: int,
    seconds: float,
) -> SmokeReport:
    n_questions = len(rows)

    def grid(values: Sequence[Any]) -> list[list[Any]]:
        return [list(values[q * group : (q + 1) * group]) for q in range(n_questions)]

    info = [r.extra_fields["reward_extra_info"] for r in rollouts]
    generated = int(batch["response_mask"].sum())
    total = sum(len(r.response_ids) for r in rollouts)
    forced = [
        sum(1 for a in guide_plan(rows[r.row_index], r.sample_index, group) if a and "<search>" in a)
        for r in rollouts
    ]
    return SmokeReport(
        n_questions=n_questions,
        group=group,
        seed=seed,
        rewards=grid([float(r.reward) for r in rollouts]),
        searches=grid([int(r.extra_fields["gta/num_searches"]) for r in rollouts]),
        forced_searches=grid(forced),
        target_doc_cov=grid([float(i.get("target_doc_cov", 0.0)) for i in info]),
        complete_chain=grid([float(i.get("complete_chain", 0.0)) for i in info]),
        acc=grid([float(i.get("acc", 0.0)) for i in info]),
        advantages=grid(seq_adv),
        response_tokens=total,
        generated_tokens=generated,
        masked_tokens=total - generated,
        loss=step["loss"],
        grad_norm=step["grad_norm"],
        max_abs_grad_on_masked=step["masked"],
        generated_tokens_with_grad=step["live"],
        ppo_kl=step["kl"],
        seconds=seconds,
    )


def run_smoke(
    kb_dir: str | Path,
    data_parquet: str | Path,
    n_questions: int = 4,
    group: int = 4,
    seed: int = 0,
    response_length: int = 1024,
    max_obs_tokens: int = 128,
    free_tokens: int = 6,
    free_call_tokens: int = 24,
    lr: float = 1e-2,
    retriever_client: Any = None,
) -> SmokeReport:
    """Run the CPU RL smoke (module docstring) and return its report.

    Args:
        kb_dir: KB directory for the in-process graph retriever.
        data_parquet: verl parquet; the first ``n_questions`` rows with gold documents are used.
        n_questions, group, seed: N questions × G rollouts; seeds model init and sampling.
        response_length: ``rollout.response_length``.
        max_obs_tokens: ``gta.agent.max_obs_tokens`` (small: keeps the smoke fast).
        free_tokens: Tokens the model samples per guided turn before the forced action.
        free_call_tokens: Cap per free (unguided) call: stands in for the EOS a random model never emits.
        lr: SGD step size of the single update.
        retriever_client: Reuse an ``AsyncRetriever`` instead of loading one from ``kb_dir``.

    Raises:
        AssertionError: if a mask-0 token receives gradient, no generated token does,
            or all advantages are zero (the guided group failed to diversify).
    """
    import numpy as np
    import torch

    from gta_verl.verl_compat import get_adv_estimator_fn

    if group < 2:
        raise ValueError(f"GRPO needs a group of >= 2 rollouts, got --group {group}")
    tic = time.perf_counter()
    torch.manual_seed(seed)
    rows = load_rows(data_parquet, n_questions)
    client = retriever_client or _make_retriever_client(kb_dir)
    settings = {
        "response_length": response_length,
        "max_obs_tokens": max_obs_tokens,
        "free_tokens": free_tokens,
        "free_call_tokens": free_call_tokens,
    }
    model, rollouts = _rollouts(rows, kb_dir, group, seed, client, settings)

    batch = _batch(rollouts)
    uids = np.array([f"q{r.row_index}" for r in rollouts], dtype=object)
    adv, _ = get_adv_estimator_fn("grpo")(
        token_level_rewards=batch["rm_scores"], response_mask=batch["response_mask"], index=uids
    )
    step = policy_gradient_step(model, rollouts, batch, adv, lr)
    mask = batch["response_mask"]
    seq_adv = [float(adv[i][mask[i] > 0][0]) if mask[i].any() else 0.0 for i in range(len(rollouts))]
    assert step["masked"] == 0.0, f"mask-0 tokens received gradient (max {step['masked']})"
    assert step["live"] > 0, "no generated token received gradient"
    assert any(a != 0.0 for a in seq_adv), "all GRPO advantages are zero: the guided group did not diversify"
    return _report(rows, rollouts, batch, seq_adv, step, group, seed, time.perf_counter() - tic)
