"""Token-in/token-out generation with HF ``generate()``, in vLLM's sampling-parameter dialect.

The pure half of the ``hf_cpu`` rollout server (:mod:`gta_verl.cpu.server`) and of the evaluation's
HF backends (:mod:`gta_verl.agent.backends`): no Ray, no verl.
verl's agent loops send vLLM-style ``sampling_params`` (``temperature``, ``top_p``, ``top_k`` with
−1 = off, ``repetition_penalty``, ``logprobs``, ``max_tokens``, ``stop``,
``include_stop_str_in_output``; the teacher sends ``prompt_logprobs``); this module maps them onto
``model.generate`` and returns what verl's ``TokenOutput`` carries.

Log-probs (paper-free bookkeeping, the same quantity the actor recomputes):
``log π(y_t | x, y_<t) = log_softmax(z_t / T)[y_t]`` with the raw logits ``z_t`` of step ``t`` and
the rollout temperature ``T`` (``T = 1`` for greedy decoding), which is what verl's FSDP engine
computes for ``old_log_probs`` (logits divided by ``rollout.temperature``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

#: ``sampling_params`` keys we read; anything else (e.g. ``detokenize``) is ignored like vLLM's defaults.
KNOWN_SAMPLING_PARAMS = {
    "temperature",
    "top_p",
    "top_k",
    "repetition_penalty",
    "logprobs",
    "max_tokens",
    "max_new_tokens",
    "stop",
    "include_stop_str_in_output",
    "prompt_logprobs",
    "detokenize",
    "seed",
}


@dataclass(frozen=True)
class Generation:
    """One request's result.

    Attributes:
        token_ids: Generated ids, [R].
        log_probs: ``log_softmax(z_t / T)[y_t]`` per generated token, [R], or None if not asked.
        stop_reason: ``"completed"`` (EOS or a stop string) or ``"length"`` (``max_tokens`` reached).
        extra: ``prompt_ids`` / ``prompt_logprobs`` rows [S, max(K, 1)] when ``prompt_logprobs`` was asked.
    """

    token_ids: list[int]
    log_probs: list[float] | None
    stop_reason: str
    extra: dict[str, Any] = field(default_factory=dict)


def stop_strings(params: Mapping[str, Any]) -> list[str]:
    stop = params.get("stop") or []
    return [stop] if isinstance(stop, str) else [s for s in stop if s]


def generate_kwargs(params: Mapping[str, Any], max_new_tokens: int, tokenizer: Any) -> dict[str, Any]:
    temperature = float(params.get("temperature", 1.0) or 0.0)
    top_k = int(params.get("top_k", -1) or -1)
    kwargs: dict[str, Any] = {
        "max_new_tokens": max_new_tokens,
        "do_sample": temperature > 0,
        "return_dict_in_generate": True,
        "output_logits": True,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id
        if tokenizer.pad_token_id is not None
        else tokenizer.eos_token_id,
        "repetition_penalty": float(params.get("repetition_penalty", 1.0) or 1.0),
    }
    if temperature > 0:
        kwargs.update(
            temperature=temperature,
            top_p=float(params.get("top_p", 1.0) or 1.0),
            top_k=top_k if top_k > 0 else 0,
        )
    else:  # greedy: leave the model's sampling defaults out of it
        kwargs.update(temperature=None, top_p=None, top_k=None)
    return kwargs


class _StopOnGeneratedText:
    """Stop once a stop string occurs in the *generated* text (vLLM's semantics).

    HF's ``stop_strings`` criterion matches the end of prompt + generation, so a stop string that
    straddles the prompt boundary would end generation; this one decodes only the new tokens.
    """

    def __init__(self, tokenizer: Any, stops: Sequence[str], prompt_len: int) -> None:
        self.tokenizer, self.stops, self.start = tokenizer, list(stops), prompt_len

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        text = self.tokenizer.decode(input_ids[0, self.start :], skip_special_tokens=False)
        return torch.tensor([any(s in text for s in self.stops)], dtype=torch.bool, device=input_ids.device)


def token_log_probs(logits: torch.Tensor, token_ids: torch.Tensor, temperature: float) -> torch.Tensor:
    """``log_softmax(logits / T)`` at ``token_ids``.

    Args:
        logits: [R, V] raw logits, row t scoring token t.
        token_ids: [R] the chosen tokens.
        temperature: T; values ≤ 0 (greedy) use T = 1.

    Returns:
        [R] float32 log-probs.
    """
    scale = temperature if temperature > 0 else 1.0
    logp = torch.log_softmax(logits.float() / scale, dim=-1)
    return logp.gather(-1, token_ids.long().unsqueeze(-1)).squeeze(-1)


@torch.no_grad()
def prompt_logprob_rows(model: Any, prompt_ids: Sequence[int], k: int) -> dict[str, list[list[Any]]]:
    """vLLM ``prompt_logprobs`` rows as verl's teacher reads them (``vllm_rollout/utils.py``).

    Row j (0 ≤ j < S−1) scores position j+1: the top-``k`` ids and log-probs of
    ``log_softmax(z_j)`` (``k = 0``: the actual token j+1 and its log-prob); row S−1 is padding.

    Returns:
        ``{"prompt_ids": [S][max(k,1)], "prompt_logprobs": [S][max(k,1)]}``.
    """
    ids = torch.tensor([list(prompt_ids)], dtype=torch.long, device=getattr(model, "device", None))
    logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)  # [S, V]
    width = max(k, 1)
    if k > 0:
        vals, idx = logp[:-1].topk(k, dim=-1)
    else:
        idx = ids[0, 1:].unsqueeze(-1)
        vals = logp[:-1].gather(-1, idx)
    rows_ids = idx.tolist() + [[0] * width]
    rows_lp = vals.tolist() + [[0.0] * width]
    return {"prompt_ids": rows_ids, "prompt_logprobs": rows_lp}


@torch.no_grad()
def hf_generate(
    model: Any,
    tokenizer: Any,
    prompt_ids: Sequence[int],
    sampling_params: Mapping[str, Any],
    default_max_tokens: int,
) -> Generation:
    """Generate one continuation of ``prompt_ids`` with ``model.generate``.

    Args:
        model: A causal LM in eval mode.
        tokenizer: Its tokenizer (stop strings are matched on the decoded generated text).
        prompt_ids: The full context, [P].
        sampling_params: vLLM-style parameters (module docstring).
        default_max_tokens: Budget when the request names none (the rollout's response length).

    Returns:
        The :class:`Generation`. Stop strings stay in the output (``include_stop_str_in_output``
        is the only behaviour verl's agent loops use).
    """
    params = dict(sampling_params)
    unknown = set(params) - KNOWN_SAMPLING_PARAMS
    if unknown:
        raise ValueError(f"hf_cpu rollout: unsupported sampling params {sorted(unknown)}")
    extra: dict[str, Any] = {}
    if params.get("prompt_logprobs") is not None:
        extra = prompt_logprob_rows(model, prompt_ids, int(params["prompt_logprobs"]))
    max_new = params.get("max_tokens", params.get("max_new_tokens"))
    max_new = int(default_max_tokens if max_new is None else max_new)
    if max_new <= 0:
        return Generation([], [] if params.get("logprobs") else None, "length", extra)
    if "seed" in params and params["seed"] is not None:
        torch.manual_seed(int(params["seed"]))
    input_ids = torch.tensor([list(prompt_ids)], dtype=torch.long, device=getattr(model, "device", None))
    stops = stop_strings(params)
    criteria = None
    if stops:
        from transformers import StoppingCriteriaList

        criteria = StoppingCriteriaList([_StopOnGeneratedText(tokenizer, stops, input_ids.shape[1])])
    out = model.generate(
        input_ids=input_ids,
        attention_mask=torch.ones_like(input_ids),
        stopping_criteria=criteria,
        **generate_kwargs(params, max_new, tokenizer),
    )
    new = out.sequences[0, input_ids.shape[1] :]
    logits = torch.stack([step[0] for step in out.logits])[: new.numel()]  # [R, V]
    log_probs = None
    if params.get("logprobs"):
        temperature = float(params.get("temperature", 1.0) or 0.0)
        log_probs = token_log_probs(logits, new, temperature).tolist()
    stopped = new.numel() < max_new or (new.numel() > 0 and int(new[-1]) == tokenizer.eos_token_id)
    return Generation(new.tolist(), log_probs, "completed" if stopped else "length", extra)
