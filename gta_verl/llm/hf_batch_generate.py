"""Batched ``generate()`` for the ``hf_cpu`` server and the evaluation: concurrent turns in one forward pass.

verl's agent loop runs every rollout of a step concurrently, so while one turn generates, the other
rollouts' next turns queue at the server. Generating them one by one spends most of a CPU step in
per-token Python overhead of a batch of one (a 4 M-parameter model: 4.6 ms per token alone, 0.8 ms
per token in a batch of 16 — ``experiments/learning/results/README.md``, Step cost).
:func:`hf_generate_batch` runs
requests that share sampling parameters as one left-padded ``model.generate`` call and cuts each
row where that request alone would have stopped:

* EOS, a stop string in the row's *generated* text (vLLM semantics, as
  :class:`gta_verl.llm.hf_generate._StopOnGeneratedText`), or the row's own ``max_tokens``;
* log-probs ``log_softmax(z_t / T)[y_t]`` from the row's own logits, as in the single path.

Left padding is exact for causal attention with an attention mask (HF derives position ids from it),
so a greedy batched row equals the single-request result up to floating-point summation order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from gta_verl.llm.hf_generate import (
    KNOWN_SAMPLING_PARAMS,
    Generation,
    generate_kwargs,
    stop_strings,
    token_log_probs,
)

#: Sampling parameters that must agree for two requests to share a ``generate`` call.
_SHARED = ("temperature", "top_p", "top_k", "repetition_penalty", "stop", "logprobs")


def batch_key(params: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """Key grouping requests that can be generated together; ``None`` for requests served alone.

    Teacher requests (``prompt_logprobs``) and seeded requests stay single: they need a forward
    pass of their own or a reproducible random stream of their own.
    """
    unknown = set(params) - KNOWN_SAMPLING_PARAMS
    if unknown:
        raise ValueError(f"hf_cpu rollout: unsupported sampling params {sorted(unknown)}")
    if params.get("prompt_logprobs") is not None or params.get("seed") is not None:
        return None
    key = []
    for name in _SHARED:
        value = params.get(name)
        key.append(tuple(value) if isinstance(value, list) else value)
    return tuple(key)


class _RowStops:
    """Per-row stopping: EOS, a stop string in the row's generated text, or the row's budget.

    Row i's context ends with the ``prev[i]`` tokens it generated in earlier chunks, so its
    generated text is the last ``prev[i]`` context tokens plus the new ones and its budget counts
    both. Records each row's new-token count and reason the first time it stops; rows already
    finished are padded by ``generate`` and keep their record.
    """

    def __init__(
        self,
        tokenizer: Any,
        stops: Sequence[str],
        prompt_len: int,
        budgets: Sequence[int],
        prev: Sequence[int],
    ) -> None:
        self.tokenizer, self.stops, self.start = tokenizer, list(stops), prompt_len
        self.budgets, self.prev = list(budgets), list(prev)
        self.lengths: list[int | None] = [None] * len(budgets)
        self.reasons: list[str] = ["chunk"] * len(budgets)

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        n_new = input_ids.shape[1] - self.start
        done = []
        for i, budget in enumerate(self.budgets):
            if self.lengths[i] is None:
                reason = None
                if int(input_ids[i, -1]) == self.tokenizer.eos_token_id:
                    reason = "completed"
                elif self.stops and any(
                    s
                    in self.tokenizer.decode(
                        input_ids[i, self.start - self.prev[i] :], skip_special_tokens=False
                    )
                    for s in self.stops
                ):
                    reason = "completed"
                if n_new + self.prev[i] >= budget and int(input_ids[i, -1]) != self.tokenizer.eos_token_id:
                    reason = "length"  # as the single path: a spent budget is "length" unless EOS ended it
                if reason is not None:
                    self.lengths[i], self.reasons[i] = n_new, reason
            done.append(self.lengths[i] is not None)
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


def request_budget(params: Mapping[str, Any]) -> int | None:
    """A request's ``max_tokens`` (vLLM) or ``max_new_tokens`` (HF), None when it names neither."""
    max_new = params.get("max_tokens", params.get("max_new_tokens"))
    return None if max_new is None else int(max_new)


def shared_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` without the per-row budget (what a batch has in common)."""
    return {k: v for k, v in params.items() if k not in ("max_tokens", "max_new_tokens")}


def _left_padded(prompts: Sequence[Sequence[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``[B, width]`` ids and attention mask of ``prompts``, each right-aligned behind ``pad``."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        p = list(prompt)
        ids[row, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        mask[row, width - len(p) :] = 1
    return ids, mask


@torch.no_grad()
def hf_generate_batch(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[Sequence[int]],
    sampling_params: Mapping[str, Any],
    budgets: Sequence[int | None],
    default_max_tokens: int,
    prev: Sequence[int] | None = None,
    chunk: int | None = None,
) -> list[Generation]:
    """Generate one continuation per prompt in a single left-padded ``model.generate`` call.

    Args:
        model: A causal LM in eval mode.
        tokenizer: Its tokenizer (EOS id; stop strings matched on each row's decoded generation).
        prompts: B token-id contexts, lengths P_i (each ending with its ``prev[i]`` earlier tokens).
        sampling_params: Parameters shared by all rows (:func:`batch_key` equal).
        budgets: Each row's total ``max_tokens`` (None: ``default_max_tokens``).
        default_max_tokens: The rollout's response length.
        prev: Tokens each row generated in earlier chunks (default 0).
        chunk: Most new tokens in this call; a row still running after it ends ``"chunk"``.

    Returns:
        B :class:`Generation` objects with the *new* tokens, row i R_i ≤ budget_i − prev_i of them,
        log-probs ``log_softmax(z_t / T)[y_t]`` if ``logprobs`` was asked, and stop reason
        ``"completed"`` (EOS or stop string), ``"length"`` (budget spent) or ``"chunk"``.
    """
    params = dict(sampling_params)
    prev = [0] * len(prompts) if prev is None else [int(x) for x in prev]
    caps = [int(default_max_tokens if b is None else b) for b in budgets]
    live = [i for i, cap in enumerate(caps) if cap - prev[i] > 0]
    results: list[Generation | None] = [None] * len(prompts)
    for i in set(range(len(prompts))) - set(live):
        results[i] = Generation([], [] if params.get("logprobs") else None, "length")
    if not live:
        return [r for r in results if r is not None]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    ids, mask = _left_padded([prompts[i] for i in live], pad)
    width = ids.shape[1]
    from transformers import StoppingCriteriaList

    stops = _RowStops(
        tokenizer, stop_strings(params), width, [caps[i] for i in live], [prev[i] for i in live]
    )
    max_new = max(caps[i] - prev[i] for i in live)
    max_new = max_new if chunk is None else min(max_new, int(chunk))
    device = getattr(model, "device", None)  # the batch is built on the host; the model may sit on cuda
    out = model.generate(
        input_ids=ids.to(device),
        attention_mask=mask.to(device),
        stopping_criteria=StoppingCriteriaList([stops]),
        **generate_kwargs(params, max_new, tokenizer),
    )
    for i, generation in zip(live, _generations(out, width, stops, params), strict=True):
        results[i] = generation
    return [r for r in results if r is not None]


def _generations(out: Any, width: int, stops: _RowStops, params: Mapping[str, Any]) -> list[Generation]:
    """Each row's new tokens of ``model.generate``'s output, cut where its stop criterion ended it."""
    new = out.sequences[:, width:]
    logits = torch.stack(out.logits, dim=1)  # [B, steps, V]
    temperature = float(params.get("temperature", 1.0) or 0.0)
    gens = []
    for row in range(new.shape[0]):
        n = stops.lengths[row]
        n = new.shape[1] if n is None else n
        tokens = new[row, :n]
        log_probs = (
            token_log_probs(logits[row, :n], tokens, temperature).tolist() if params.get("logprobs") else None
        )
        gens.append(Generation(tokens.tolist(), log_probs, stops.reasons[row]))
    return gens


@dataclass
class _Pending:
    """A queued request and the future its agent-loop turn awaits."""

    prompt_ids: list[int]
    params: dict[str, Any]
    future: asyncio.Future
    tokens: list[int] = field(default_factory=list)  # generated in earlier chunks
    log_probs: list[float] = field(default_factory=list)


class GenerationBatcher:
    """Queue concurrent ``generate`` requests and serve them as batched calls (one event loop).

    Whatever queued while a batch ran forms the next batch (no waiting window: a lone request
    starts at once); requests whose :func:`batch_key` differs go in separate calls. A call runs
    at most ``chunk`` tokens; rows still running go back in the queue with what they generated
    appended to their context, so a long row never holds finished ones back and newly arrived turns
    join at the next chunk (continuous batching at chunk granularity; the continuation's
    distribution is the same, its prefix is re-encoded once per chunk).

    :meth:`abort_all` is verl's partial-rollout abort: every queued request, and every row of the
    call in flight once its chunk ends, is answered with the tokens it has and stop reason
    ``"aborted"`` (verl's async client re-sends prompt + those tokens after the weight update).

    Args:
        model, tokenizer: The causal LM and its tokenizer.
        response_length: Budget of a request that names no ``max_tokens``.
        max_batch: Most rows per call.
        chunk: Most new tokens per call.
        lock: Held around each model call (shared with whatever else touches the model).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        response_length: int,
        max_batch: int = 64,
        lock: asyncio.Lock | None = None,
        chunk: int = 32,
    ) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.response_length, self.max_batch = int(response_length), max(1, int(max_batch))
        self.chunk = max(1, int(chunk))
        self.lock = lock or asyncio.Lock()
        self._pending: list[_Pending] = []
        self._worker: asyncio.Task | None = None
        self._aborting = False
        self.batches: list[int] = []  # rows per model call (tests and the step-cost table)

    def abort_all(self) -> int:
        """Answer every queued request "aborted" now, rows in flight after their chunk; return the count."""
        self._aborting = True
        aborted = [g for g in self._pending if not g.future.done()]
        self._pending = []
        for g in aborted:
            self._finish(g, "aborted")
        return len(aborted)

    def resume(self) -> None:
        """Serve requests again after :meth:`abort_all`."""
        self._aborting = False

    @staticmethod
    def _finish(g: _Pending, reason: str) -> None:
        if not g.future.done():
            lp = g.log_probs if g.params.get("logprobs") else None
            g.future.set_result(Generation(g.tokens, lp, reason))

    async def generate(self, prompt_ids: list[int], params: dict[str, Any]) -> Generation:
        """Queue one request and await its result; a request :func:`batch_key` keeps alone is served alone."""
        if self.max_batch <= 1 or batch_key(params) is None:
            from gta_verl.llm.hf_generate import hf_generate

            async with self.lock:
                return await asyncio.to_thread(
                    hf_generate,
                    self.model,
                    self.tokenizer,
                    list(prompt_ids),
                    dict(params),
                    self.response_length,
                )
        item = _Pending(list(prompt_ids), dict(params), asyncio.get_running_loop().create_future())
        self._pending.append(item)
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._drain())
        return await item.future

    async def _drain(self) -> None:
        await asyncio.sleep(0)  # let the other turns released by the same event queue up
        while self._pending:
            key = batch_key(self._pending[0].params)
            group = [p for p in self._pending if batch_key(p.params) == key][: self.max_batch]
            self._pending = [p for p in self._pending if all(p is not g for g in group)]
            self.batches.append(len(group))
            try:
                async with self.lock:
                    outs = await asyncio.to_thread(
                        hf_generate_batch,
                        self.model,
                        self.tokenizer,
                        [g.prompt_ids + g.tokens for g in group],
                        shared_params(group[0].params),
                        [request_budget(g.params) for g in group],
                        self.response_length,
                        [len(g.tokens) for g in group],
                        self.chunk,
                    )
            except Exception as exc:  # every waiting turn sees the failure, none hangs
                for g in group:
                    if not g.future.done():
                        g.future.set_exception(exc)
                continue
            for g, out in zip(group, outs, strict=True):
                g.tokens += out.token_ids
                if out.log_probs is not None:
                    g.log_probs += out.log_probs
                if out.stop_reason == "chunk" and self._aborting:
                    self._finish(g, "aborted")
                elif out.stop_reason == "chunk":
                    self._pending.append(g)
                else:
                    self._finish(g, out.stop_reason)
