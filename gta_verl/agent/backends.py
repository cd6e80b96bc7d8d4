"""Local generation backends with the interface verl's agent loops call.

verl 0.9.1 agent loops call ``await server_manager.generate(request_id=...,
prompt_ids=..., sampling_params=..., image_data=None, **kw) -> TokenOutput``
(``verl/workers/rollout/llm_server.py``); the vLLM server honours ``stop``,
``include_stop_str_in_output`` and ``max_tokens`` in ``sampling_params``. The backends
here implement that call once (:class:`TurnServerManager`), each its own ``turn``, without a GPU server:

* :class:`ScriptedServerManager` returns the token ids of scripted text (tests,
  evaluation of known trajectories);
* :class:`HFServerManager` runs ``transformers`` generation (CPU or GPU) with stop
  strings, ``max_tokens``, temperature/top-k/top-p, returning each token's log-prob
  under the model (temperature 1, like vLLM's default ``raw_logprobs``). Its
  optional *guided* mode teacher-forces scripted action text after a few free
  tokens; every forced token is still scored by the model, so the log-probs of
  the whole response are the model's (a random model never writes an action by itself).

Both offer ``for_rollout(row_index, sample_index)``: the out-of-trainer runner
(:mod:`gta_verl.agent.runner`) asks for a per-rollout view, so scripts and guides
attach to rollouts deterministically however their coroutines interleave.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from typing import Any

from gta_verl.verl_compat import TokenOutput

#: (row_index, sample_index) → forced action texts, one per generate call (None = free).
GuidePlan = Sequence[str | None]
GuideFn = Callable[[int, int], GuidePlan]


def cut_at_stop(text: str, stops: Sequence[str]) -> str:
    """Return ``text`` up to and including the first stop string (vLLM semantics)."""
    hits = [(text.find(s), s) for s in stops if s and text.find(s) >= 0]
    if not hits:
        return text
    pos, stop = min(hits)
    return text[: pos + len(stop)]


class TurnServerManager:
    """verl's server-manager call, written once: :meth:`generate` hands :meth:`turn` copies of the
    prompt ids and sampling parameters (``image_data`` and other keywords are not used)."""

    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data: Any = None,
        **kw: Any,
    ) -> TokenOutput:
        """The next turn of rollout ``request_id`` (verl 0.9.1's ``generate``)."""
        return await self.turn(request_id, list(prompt_ids), dict(sampling_params))

    async def turn(
        self, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any]
    ) -> TokenOutput:
        """One turn's tokens for ``prompt_ids`` under ``sampling_params`` (both the caller's copies)."""
        raise NotImplementedError


class ScriptedServerManager(TurnServerManager):
    """Server manager returning scripted text, one script (list of turns) per rollout.

    A plain class on purpose: ``hydra.utils.instantiate`` (how verl builds agent
    loops) would turn a dataclass argument into a config node.

    Args:
        tokenizer: Tokenizer used to turn scripted text into token ids.
        scripts: ``scripts[i][c]`` = text returned for the c-th generate call of the
            i-th rollout. Rollouts map to scripts by ``for_rollout`` (runner) or by
            first-seen ``request_id`` (inside verl), cycling when there are fewer
            scripts than rollouts. Calls past the end of a script return "".
        honor_stop: Cut the text after the first stop string like vLLM; False
            returns the whole scripted text (a backend ignoring stops, verl #935).
        logprob: Log-prob reported for every token (None → report none).
        calls: Shared call log (``for_rollout`` views append to their parent's).
    """

    def __init__(
        self,
        tokenizer: Any,
        scripts: Sequence[Sequence[str]],
        honor_stop: bool = True,
        logprob: float | None = -0.5,
        calls: list[dict[str, Any]] | None = None,
    ) -> None:
        if not scripts:
            raise ValueError("ScriptedServerManager needs at least one script")
        self.tokenizer = tokenizer
        self.scripts = scripts
        self.honor_stop = honor_stop
        self.logprob = logprob
        self.calls: list[dict[str, Any]] = [] if calls is None else calls
        self._script_of: dict[str, int] = {}
        self._count: dict[str, int] = {}
        self._bound: int | None = None
        self._lock = threading.Lock()

    def for_rollout(self, row_index: int, sample_index: int, n_samples: int = 1) -> ScriptedServerManager:
        """A view bound to script ``row_index * n_samples + sample_index`` (shares ``calls``)."""
        view = ScriptedServerManager(self.tokenizer, self.scripts, self.honor_stop, self.logprob, self.calls)
        view._bound = (row_index * n_samples + sample_index) % len(self.scripts)
        return view

    async def turn(
        self, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any]
    ) -> TokenOutput:
        """Return the next scripted turn of this rollout as a :class:`TokenOutput`."""
        with self._lock:
            if request_id not in self._script_of:
                self._script_of[request_id] = (
                    self._bound if self._bound is not None else len(self._script_of) % len(self.scripts)
                )
            script = self.scripts[self._script_of[request_id]]
            call = self._count.get(request_id, 0)
            self._count[request_id] = call + 1
            self.calls.append(
                {
                    "request_id": request_id,
                    "prompt_ids": list(prompt_ids),
                    "sampling_params": dict(sampling_params),
                }
            )
        text = script[call] if call < len(script) else ""
        if self.honor_stop:
            text = cut_at_stop(text, sampling_params.get("stop") or ())
        ids = list(self.tokenizer.encode(text, add_special_tokens=False))
        ids = ids[: int(sampling_params.get("max_tokens", len(ids)))]
        logprobs = None if self.logprob is None else [float(self.logprob)] * len(ids)
        return TokenOutput(token_ids=ids, log_probs=logprobs, stop_reason="completed")


class HFServerManager(TurnServerManager):
    """Generation with a ``transformers`` causal LM behind verl's server-manager call.

    Args:
        model: A causal LM (e.g. :func:`gta_verl.agent.tokenizer.tiny_qwen2`).
        tokenizer: Its tokenizer (stop strings are checked on decoded text).
        guide: Optional ``(row, sample) -> plan`` for guided rollouts: plan[c] is the
            action text forced at the c-th call of that rollout after ``free_tokens``
            sampled tokens (None or past the end → ordinary free generation).
        free_tokens: Tokens the model samples freely before forced text (its "reasoning").
        seed: Base seed; each rollout view draws from its own generator.
        max_tokens_per_call: Optional cap on the tokens of one free (unguided) call,
            below the loop's ``max_tokens`` (a stand-in for the EOS a random model never emits).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        guide: GuideFn | None = None,
        free_tokens: int = 8,
        seed: int = 0,
        max_tokens_per_call: int | None = None,
    ) -> None:
        import torch

        self.model = model
        self.tokenizer = tokenizer
        self.guide = guide
        self.free_tokens = int(free_tokens)
        self.seed = int(seed)
        self.max_tokens_per_call = None if max_tokens_per_call is None else int(max_tokens_per_call)
        self.device = next(model.parameters()).device
        self._plan: GuidePlan = ()
        self._calls: dict[str, int] = {}
        self._gen = torch.Generator(device="cpu").manual_seed(self.seed)
        self._stop_ids = {i for i in (tokenizer.eos_token_id, tokenizer.pad_token_id) if i is not None}
        self._lock = threading.Lock()  # one forward at a time per model (executor threads)

    def for_rollout(self, row_index: int, sample_index: int, n_samples: int = 1) -> HFServerManager:
        """A view with this rollout's guide plan and its own seeded sampler."""
        view = HFServerManager.__new__(HFServerManager)
        view.__dict__.update(self.__dict__)
        view._plan = tuple(self.guide(row_index, sample_index)) if self.guide else ()
        view._calls = {}
        import torch

        view._gen = torch.Generator(device="cpu").manual_seed(
            self.seed * 1_000_003 + row_index * 1009 + sample_index
        )
        return view

    async def turn(
        self, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any]
    ) -> TokenOutput:
        """Generate up to ``max_tokens`` tokens; see the class docstring."""
        call = self._calls.get(request_id, 0)
        self._calls[request_id] = call + 1
        forced = self._plan[call] if call < len(self._plan) else None
        ids, logprobs = await asyncio.get_running_loop().run_in_executor(
            None, self._generate_sync, list(prompt_ids), dict(sampling_params), forced
        )
        return TokenOutput(token_ids=ids, log_probs=logprobs, stop_reason="completed")

    def _generate_sync(
        self, prompt_ids: list[int], params: dict[str, Any], forced: str | None
    ) -> tuple[list[int], list[float]]:
        import torch

        max_tokens = max(1, int(params.get("max_tokens", 256)))
        if self.max_tokens_per_call is not None and forced is None:
            max_tokens = min(max_tokens, self.max_tokens_per_call)
        stops = tuple(params.get("stop") or ())
        free = min(self.free_tokens, max_tokens) if forced is not None else max_tokens
        with self._lock, torch.no_grad():
            ids, logprobs, past, next_logits = self._sample(prompt_ids, free, params, stops, forced is None)
            if forced is not None:
                forced_ids = list(self.tokenizer.encode(forced, add_special_tokens=False))
                forced_ids = forced_ids[: max_tokens - len(ids)]
                logprobs += self._score(forced_ids, past, next_logits)
                ids += forced_ids
        return ids, logprobs

    def _forward(self, ids: list[int], past: Any, keep: int = 1) -> tuple[Any, Any]:
        """Extend the KV cache by ``ids``; return it and the logits of the last ``keep`` positions."""
        import torch

        out = self.model(
            input_ids=torch.tensor([ids], device=self.device),
            past_key_values=past,
            use_cache=True,
            logits_to_keep=keep,  # the 151k-way head only where it is needed
        )
        return out.past_key_values, out.logits[0].float()

    def _sample(
        self, prompt_ids: list[int], n: int, params: dict[str, Any], stops: Sequence[str], check_stop: bool
    ) -> tuple[list[int], list[float], Any, Any]:
        import torch

        past, logits = self._forward(prompt_ids, None)
        logits = logits[-1]
        ids: list[int] = []
        logprobs: list[float] = []
        for _ in range(n):
            token = self._pick(logits, params)
            logprobs.append(float(torch.log_softmax(logits, -1)[token]))
            ids.append(token)
            if check_stop and (token in self._stop_ids or self._hit_stop(ids, stops)):
                break
            past, logits = self._forward([token], past)
            logits = logits[-1]
        return ids, logprobs, past, logits

    def _score(self, forced_ids: list[int], past: Any, logits: Any) -> list[float]:
        """Teacher-force ``forced_ids`` in one pass and return the model's log-prob of each."""
        import torch

        if not forced_ids:
            return []
        _, forced_logits = self._forward(forced_ids, past, keep=len(forced_ids))
        # position j's distribution predicts token j+1; the first forced token uses ``logits``
        dists = torch.cat([logits[None], forced_logits[:-1]], 0)
        lp = torch.log_softmax(dists, -1).gather(-1, torch.tensor(forced_ids, device=dists.device)[:, None])
        return [float(x) for x in lp[:, 0]]

    def _hit_stop(self, ids: list[int], stops: Sequence[str]) -> bool:
        if not stops:
            return False
        tail = self.tokenizer.decode(ids[-16:], skip_special_tokens=False)
        return any(s in tail for s in stops)

    def _pick(self, logits: Any, params: dict[str, Any]) -> int:
        import torch

        temperature = float(params.get("temperature", 1.0) or 0.0)
        if temperature <= 0:
            return int(torch.argmax(logits))
        scaled = logits / temperature
        top_k = int(params.get("top_k", -1) or -1)
        if 0 < top_k < scaled.numel():
            kth = torch.topk(scaled, top_k).values[-1]
            scaled = scaled.masked_fill(scaled < kth, float("-inf"))
        probs = torch.softmax(scaled, -1)
        top_p = float(params.get("top_p", 1.0) or 1.0)
        if top_p < 1.0:
            sorted_p, order = torch.sort(probs, descending=True)
            drop = torch.cumsum(sorted_p, -1) - sorted_p > top_p
            probs = probs.clone()
            probs[order[drop]] = 0.0
            probs = probs / probs.sum()
        return int(torch.multinomial(probs.cpu(), 1, generator=self._gen))


class BatchedHFServerManager(TurnServerManager):
    """A ``transformers`` causal LM behind the server-manager call, concurrent turns batched.

    The evaluation's free-generation backend: the rollouts in flight queue their turns at one
    :class:`gta_verl.llm.hf_batch_generate.GenerationBatcher` (the ``hf_cpu`` training server's
    batcher), so a greedy evaluation equals the one-by-one result in a fraction of the time.
    Guided rollouts and seeded requests use :class:`HFServerManager`.

    Args:
        model: A causal LM in eval mode.
        tokenizer: Its tokenizer.
        response_length: Budget of a turn that names no ``max_tokens``.
        max_batch: Most turns per model call.
    """

    def __init__(self, model: Any, tokenizer: Any, response_length: int = 256, max_batch: int = 64) -> None:
        self._batcher_args = (model, tokenizer, int(response_length), int(max_batch))
        self._batchers: dict[int, Any] = {}  # one per event loop: asyncio queues are loop-bound

    def for_rollout(self, row_index: int, sample_index: int, n_samples: int = 1) -> BatchedHFServerManager:
        return self

    async def turn(
        self, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any]
    ) -> TokenOutput:
        """Queue this turn with the other rollouts' and return its :class:`TokenOutput`."""
        from gta_verl.llm.hf_batch_generate import GenerationBatcher

        loop = id(asyncio.get_running_loop())
        if loop not in self._batchers:
            self._batchers[loop] = GenerationBatcher(*self._batcher_args)
        out = await self._batchers[loop].generate(list(prompt_ids), dict(sampling_params))
        return TokenOutput(token_ids=out.token_ids, log_probs=out.log_probs, stop_reason=out.stop_reason)
