"""Did a GRPO update move the policy the way its advantages say? (the learning regression check)

For the rollouts of one step, with verl's advantages A_i and response masks m_i (1 = a token the policy
generated, 0 = a retriever observation), the update from π₀ to π₁ is scored by the advantage-weighted
mean change of the log-probability of each rollout's tokens:

    S_policy = (1/N) Σ_i A_i · mean_{t: m_it = 1} [log π₁(y_it | ·) − log π₀(y_it | ·)]
    S_obs    = (1/N) Σ_i A_i · mean_{t: m_it = 0} [log π₁(y_it | ·) − log π₀(y_it | ·)]

A_i is GRPO's group-normalized advantage of the reward *re-scored* from each rollout's text, ground
truth and turn records (:func:`rescored_rewards`), so a sign flipped anywhere between the reward function and
the loss shows. A correct policy-gradient step raises the log-probability of above-average rollouts' own
tokens and lowers that of below-average ones, so S_policy > 0; a flipped reward or advantage sign makes it
negative. Rollouts without an observation token are left out of S_obs's mean. S_obs is reported, not
judged: observation tokens move through the weights they share with the policy's tokens, and the retrieved
passages are the same corpus text the policy writes its queries in, so S_obs reached 0.73 · S_policy with the
mask intact on one machine. Whether the loss saw observations is checked exactly instead
(:func:`unmasked_observation_tokens`).

Which tokens are observations is read from the protocol, not from the dumped response mask (the very
thing a dropped-mask bug corrupts): every token from an ``<info>`` tag through its ``</info>``
(:func:`observation_positions`; the corpus tokenizer writes each tag as one token).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ProbeResult:
    """Advantage-weighted log-probability shifts of one step's rollouts (module docstring)."""

    policy_shift: float
    obs_shift: float
    n_rollouts: int
    n_positive: int
    n_negative: int


def sequence_advantage(advantages: Sequence[float], mask: Sequence[int]) -> float:
    """GRPO's per-rollout advantage: the value at the first policy token (verl broadcasts it over them)."""
    for a, m in zip(advantages, mask, strict=True):
        if m:
            return float(a)
    return 0.0


def _mean_shift(
    before: Sequence[float], after: Sequence[float], mask: Sequence[int], want: int
) -> float | None:
    diffs = [b1 - b0 for b0, b1, m in zip(before, after, mask, strict=True) if int(m) == want]
    return sum(diffs) / len(diffs) if diffs else None


def probe(
    advantages: Sequence[float],
    before: Sequence[Sequence[float]],
    after: Sequence[Sequence[float]],
    masks: Sequence[Sequence[int]],
) -> ProbeResult:
    """S_policy and S_obs of the module docstring.

    Args:
        advantages: A_i per rollout, [N].
        before: log π₀ of each response token, N rows of [R_i].
        after: log π₁ of the same tokens, N rows of [R_i].
        masks: response masks, N rows of [R_i] (1 = policy token).
    """
    if not (len(advantages) == len(before) == len(after) == len(masks)):
        raise ValueError("advantages, before, after and masks must have one row per rollout")
    pol, obs = 0.0, 0.0
    n_obs = 0
    for a, b0, b1, m in zip(advantages, before, after, masks, strict=True):
        p = _mean_shift(b0, b1, m, 1)
        o = _mean_shift(b0, b1, m, 0)
        pol += a * (p or 0.0)
        if o is not None:
            obs += a * o
            n_obs += 1
    n = len(advantages)
    return ProbeResult(
        pol / n if n else 0.0,
        obs / n_obs if n_obs else 0.0,
        n,
        sum(a > 0 for a in advantages),
        sum(a < 0 for a in advantages),
    )


def response_logprobs(model: Any, prompt_ids: Sequence[int], response_ids: Sequence[int]) -> list[float]:
    """``log_softmax(z_t)[y_t]`` of every response token given the prompt and the tokens before it, [R]."""
    import torch

    ids = torch.tensor([list(prompt_ids) + list(response_ids)], dtype=torch.long)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float()  # [R, V]
    logp = torch.log_softmax(logits, dim=-1)
    return logp.gather(-1, torch.tensor(list(response_ids))[:, None]).squeeze(-1).tolist()


def observation_positions(
    response_ids: Sequence[int],
    open_id: int,
    close_id: int,
    search_close_id: int | None = None,
    space_ids: frozenset[int] = frozenset(),
) -> list[int]:
    """Protocol mask of a response: 0 from an ``<info>`` token through its ``</info>``, else 1, [R].

    An ``<info>`` block cut by the response budget runs to the end. With ``search_close_id``, only an
    ``<info>`` that follows a ``</search>`` with nothing but ``space_ids`` between opens a block: the loop
    appends its observation right after the search that asked for it, while an ``<info>`` the policy wrote
    itself in a turn (a sampled tag, no search before it) is the policy's own token.
    """
    mask, inside, after_search = [], False, search_close_id is None
    for t in response_ids:
        t = int(t)
        if t == open_id and not inside and after_search:
            inside = True
        mask.append(0 if inside else 1)
        if t == close_id and inside:
            inside = False
        if search_close_id is not None and not inside:
            after_search = t == search_close_id or (after_search and t in space_ids)
    return mask


def _info_tag_ids(tokenizer: Any) -> tuple[int, int]:
    """Token ids of ``<info>`` and ``</info>`` (the corpus tokenizer writes each tag as one token)."""
    from gta_verl.protocol import INFO_CLOSE, INFO_OPEN

    return tokenizer.convert_tokens_to_ids(INFO_OPEN), tokenizer.convert_tokens_to_ids(INFO_CLOSE)


def _search_close_and_spaces(tokenizer: Any) -> tuple[int | None, frozenset[int]]:
    """``</search>``'s id and the ids that decode to whitespace only (the loop's newlines); (None, ∅) when
    the tokenizer does not write ``</search>`` as one token (then every ``<info>`` opens a block)."""
    from gta_verl.protocol import SEARCH_CLOSE

    try:
        close = tokenizer.convert_tokens_to_ids(SEARCH_CLOSE)
    except KeyError:
        return None, frozenset()
    if close is None or tokenizer.convert_ids_to_tokens(close) != SEARCH_CLOSE:
        return None, frozenset()
    return close, frozenset(i for i in range(len(tokenizer)) if not tokenizer.decode([i]).strip())


def unmasked_observation_tokens(dump: Mapping[str, Any], tokenizer: Any) -> list[tuple[int, int]]:
    """(rollout, position) of every token inside an ``<info>`` block whose dumped response mask is 1.

    The dumped mask is the one verl's loss multiplies by, so an empty list means no retriever token was
    trained on; a dropped observation mask lists every observation token. The loop's newlines around a
    block are masked too but are not in the protocol's block, so they are not checked.
    """
    open_id, close_id = _info_tag_ids(tokenizer)
    search_close, spaces = _search_close_and_spaces(tokenizer)
    out = []
    for i, (ids, mask) in enumerate(zip(dump["responses"], dump["response_mask"], strict=True)):
        protocol = observation_positions(ids, open_id, close_id, search_close, spaces)
        out.extend(
            (i, t) for t, (m, p) in enumerate(zip(mask, protocol, strict=True)) if p == 0 and int(m) == 1
        )
    return out


def misplaced_advantages(
    advantages: Sequence[Sequence[float]], masks: Sequence[Sequence[int]], constant: bool = True
) -> list[tuple[int, int]]:
    """(rollout, position) of every dumped advantage off the policy's tokens, [N rows of R_i] in.

    A token with response mask 0 must carry advantage 0 (verl multiplies the advantage by the mask);
    with ``constant`` (GRPO: verl broadcasts one value A_i over the rollout's mask-1 tokens) every
    mask-1 token must carry A_i, the value at the first mask-1 token (:func:`sequence_advantage`).
    An advantage written to the wrong positions (shifted, on observations, on padding) is listed;
    with the observation-mask check (:func:`unmasked_observation_tokens`) this says the loss weighs
    exactly the policy's own tokens, each by its rollout's advantage. Neither S_policy nor the sign
    check sees placement.
    """
    out = []
    for i, (adv, mask) in enumerate(zip(advantages, masks, strict=True)):
        a_i = sequence_advantage(adv, mask)
        for t, (a, m) in enumerate(zip(adv, mask, strict=True)):
            want = (a_i if constant else float(a)) if int(m) else 0.0
            if abs(float(a) - want) > 1e-6 * max(1.0, abs(want)):
                out.append((i, t))
    return out


def grpo_advantages(rewards: Sequence[float], groups: Sequence[Any], eps: float = 1e-6) -> list[float]:
    """GRPO's Â_i = (r_i − mean_g) / (std_g + ε) over each group g (unbiased std; a group of one gets 0)."""
    import statistics

    by: dict[Any, list[float]] = {}
    for r, g in zip(rewards, groups, strict=True):
        by.setdefault(g, []).append(float(r))
    out = []
    for r, g in zip(rewards, groups, strict=True):
        vals = by[g]
        if len(vals) < 2:
            out.append(0.0)
            continue
        out.append((float(r) - statistics.mean(vals)) / (statistics.stdev(vals) + eps))
    return out


def rescored_rewards(dump: Mapping[str, Any], tokenizer: Any) -> list[float]:
    """R_traj (eq 18) of each dumped rollout, recomputed from its text, ground truth and turn records.

    Independent of the trainer's reward wiring (manager, verl's reward loop, the advantage estimator):
    the pure :func:`gta_verl.rewards.scoring.score_trajectory_guided` on what the policy said and saw. The
    request is built by the reward managers' own builder (:func:`gta_verl.rewards.scoring.scoring_request`),
    so a search whose tool response verl never appended (``gta/turn_obs_start`` at or past the response's
    end, verl's ``tool_agent``) shows nothing here either, exactly as in the reward the run was paid.
    """
    from gta_verl.rewards.scoring import score_trajectory_guided, scoring_request

    out = []
    for ids, rm, extra in zip(dump["responses"], dump["reward_model"], dump["extra_fields"], strict=True):
        out.append(score_trajectory_guided(scoring_request(ids, rm, extra, tokenizer))[0])
    return out


def probe_step(dump: Mapping[str, Any], model_before: Any, model_after: Any, tokenizer: Any) -> ProbeResult:
    """:func:`probe` over a ``<step>.tokens.pt`` dump of ``gta_sync`` (``trainer.rollout_data_dir``).

    Advantages are GRPO's over rewards re-scored from the rollouts (:func:`rescored_rewards`), not the
    trainer's; observation positions come from the protocol, not the dumped mask.
    """
    open_id, close_id = _info_tag_ids(tokenizer)
    search_close, spaces = _search_close_and_spaces(tokenizer)
    adv = grpo_advantages(rescored_rewards(dump, tokenizer), dump["uid"])
    before = [
        response_logprobs(model_before, p, r) for p, r in zip(dump["prompts"], dump["responses"], strict=True)
    ]
    after = [
        response_logprobs(model_after, p, r) for p, r in zip(dump["prompts"], dump["responses"], strict=True)
    ]
    protocol = [observation_positions(r, open_id, close_id, search_close, spaces) for r in dump["responses"]]
    return probe(adv, before, after, protocol)


def probe_run(dump_dir: Any, checkpoints: Sequence[Any]) -> dict[int, ProbeResult]:
    """:func:`probe_step` of every step of a run: step s's dump scored from π_{s−1} to π_s.

    Args:
        dump_dir: The run's ``trainer.rollout_data_dir``, holding ``<s>.tokens.pt`` for s = 1 … S.
        checkpoints: HF model directories π₀ (the starting policy) … π_S (the checkpoint after step S),
            so the run must save one every step; the tokenizer is read from π₀'s directory.

    Returns:
        ``{s: ProbeResult}`` for s = 1 … S.
    """
    from pathlib import Path

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    def load(path: Any) -> Any:
        return AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()

    tokenizer = AutoTokenizer.from_pretrained(str(checkpoints[0]))
    out: dict[int, ProbeResult] = {}
    before = load(checkpoints[0])
    for step, path in enumerate(checkpoints[1:], start=1):
        after = load(path)
        # Our own dump (ids, masks, plain dicts), written by gta_sync.
        dump = torch.load(Path(dump_dir) / f"{step}.tokens.pt", weights_only=False)
        out[step] = probe_step(dump, before, after, tokenizer)
        before = after
    return out
