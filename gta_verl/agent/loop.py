"""``gta_search_agent``: the GTA-RAG multi-turn search agent loop on stock verl 0.9.1.

Algorithm 1 of GTA-RAG (the rollout; docs/agent.md): the context starts as the
chat-templated question; each turn the policy writes reasoning and one action.

* ``<search> q </search>`` → R(q) from the retriever; ``<info> … </info>``
  observation tokens are appended with ``response_mask`` 0 and log-prob 0.0;
* ``<answer> ŷ </answer>`` → stop;
* anything else → :data:`INVALID_ACTION_MESSAGE` appended with mask 0.

The rollout stops at an answer, after B = ``gta.agent.max_actions`` actions,
or at ``rollout.response_length`` (ids, mask and log-probs truncated together).
A retrieval failure becomes an observation the policy sees plus a counted
``gta/retrieval_errors``; the rollout continues.

Selected with ``actor_rollout_ref.rollout.agent.default_agent_loop=gta_search_agent``
or the parquet column ``agent_name``. verl names come only from
:mod:`gta_verl.verl_compat`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any
from uuid import uuid4

import torch

from gta_verl.agent.config import AgentConfig, agent_config_from_trainer_config
from gta_verl.agent.observation import fit_observation_per_query
from gta_verl.agent.parser import token_index_for_char
from gta_verl.agent.retriever_access import aretrieve_guarded, get_retriever_client
from gta_verl.agent.spans import clip_spans, distill_mask_from_spans
from gta_verl.data import schema
from gta_verl.data.types import RetrievalHit, RetrievalResult
from gta_verl.protocol import (
    INVALID_ACTION_MESSAGE,
    QUERY_SEPARATOR,
    STOP_STRINGS,
    has_trailing,
    parse_action,
)
from gta_verl.retrieval.base import AsyncRetriever
from gta_verl.verl_compat import AgentLoopBase, AgentLoopOutput, register_agent_loop

logger = logging.getLogger(__name__)

AGENT_NAME = schema.DEFAULT_AGENT_NAME  # "gta_search_agent"
#: extra_fields key: whether ``as_dict`` places per-turn rewards (gta.agent.place_turn_rewards).
EF_PLACE_TURN_REWARDS = schema.EF_PLACE_TURN_REWARDS
#: extra_fields key: turns whose generation ran past the closing tag (text dropped; verl #935).
EF_TRAILING_DROPPED = schema.EF_TRAILING_DROPPED
#: Weight versions verl's ``LLMServerClient.generate`` stamps on every generation; the V1
#: worker copies them into per-sample TQ tags and ``PPOTrainer._compute_metrics`` builds an
#: int array from them (staleness metrics), so every output must carry both as ints.
MIN_GLOBAL_STEPS, MAX_GLOBAL_STEPS = "min_global_steps", "max_global_steps"


def merge_global_steps(
    current: tuple[int | None, int | None], extra_fields: Any
) -> tuple[int | None, int | None]:
    """Fold one generation's weight versions into the trajectory's (min, max).

    As verl's stock loops do (``tool_agent_loop.py`` keeps the first turn's
    ``min_global_steps`` and updates ``max_global_steps``), but as a true min/max over all
    turns. A generation without stamps (a backend outside verl) leaves the pair unchanged.
    """
    extra = extra_fields or {}
    lo = extra.get(MIN_GLOBAL_STEPS, extra.get("global_steps"))
    hi = extra.get(MAX_GLOBAL_STEPS, extra.get("global_steps"))
    cur_lo, cur_hi = current
    if lo is not None:
        cur_lo = int(lo) if cur_lo is None else min(cur_lo, int(lo))
    if hi is not None:
        cur_hi = int(hi) if cur_hi is None else max(cur_hi, int(hi))
    return cur_lo, cur_hi


def _retrieval_timeout(config: Any) -> float:
    """``gta.retriever.timeout_s`` (validated by :class:`gta_verl.retrieval.section.RetrieverSection`),
    default 30 s."""
    gta = config.get("gta") if hasattr(config, "get") else None
    node = gta.get("retriever") if gta is not None and hasattr(gta, "get") else None
    value = node.get("timeout_s") if node is not None and hasattr(node, "get") else None
    return float(value) if value is not None else 30.0


def union_of_results(results: Sequence[RetrievalResult]) -> tuple[list[RetrievalHit], str | None, int]:
    """One turn's observation from its queries' results: (hits, error, failed queries).

    The hits are the union over the queries, each document once, in query order then rank
    order. The observation is an error only when every query failed; a turn where some
    queries failed shows the others' passages and counts the failures.

    >>> a = RetrievalResult("a", hits=(RetrievalHit("d1", "T1", "x", 1.0, "graph"),))
    >>> b = RetrievalResult("b", hits=(RetrievalHit("d1", "T1", "x", 0.9, "dense"),
    ...                                RetrievalHit("d2", "T2", "y", 0.8, "dense")))
    >>> hits, error, failed = union_of_results([a, b, RetrievalResult("c", error="timeout")])
    >>> [h.doc_id for h in hits], error, failed
    (['d1', 'd2'], None, 1)
    """
    failed = sum(1 for r in results if r.error is not None)
    ok = [r for r in results if r.error is None]
    if not ok:
        return [], (results[0].error if results else "no query"), failed
    if len(ok) == 1:  # one query: its ranking as returned
        return list(ok[0].hits), None, failed
    seen: set[str] = set()
    hits = []
    for result in ok:
        for hit in result.hits:
            if hit.doc_id not in seen:
                seen.add(hit.doc_id)
                hits.append(hit)
    return hits, None, failed


def query_groups(results: Sequence[RetrievalResult]) -> list[list[RetrievalHit]]:
    """Each query's passages in rank order, a document already returned for an earlier query left out.

    A failed query has an empty group. The concatenation is :func:`union_of_results`'s hits.

    >>> a = RetrievalResult("a", hits=(RetrievalHit("d1", "T1", "x", 1.0, "graph"),))
    >>> b = RetrievalResult("b", hits=(RetrievalHit("d1", "T1", "x", 0.9, "dense"),
    ...                                RetrievalHit("d2", "T2", "y", 0.8, "dense")))
    >>> [[h.doc_id for h in g] for g in query_groups([a, b, RetrievalResult("c", error="timeout")])]
    [['d1'], ['d2'], []]
    """
    single = sum(1 for r in results if r.error is None) == 1  # one ranking: as returned, as the union
    seen: set[str] = set()
    groups: list[list[RetrievalHit]] = []
    for result in results:
        group: list[RetrievalHit] = []
        for hit in result.hits if result.error is None else ():
            if single or hit.doc_id not in seen:
                seen.add(hit.doc_id)
                group.append(hit)
        groups.append(group)
    return groups


class GTAAgentLoopOutput(AgentLoopOutput):
    """``AgentLoopOutput`` whose ``as_dict`` (V1 trainer path) adds gta's token tensors.

    verl runs ``_compute_score`` before ``as_dict`` (``agent_loop_tq.py``), so the reward
    manager's ``reward_extra_info`` is already in ``extra_fields`` here.
    """

    def as_dict(self) -> dict[str, Any]:
        """verl's dict plus (1) per-turn ``rm_scores`` when enabled, (2) ``distill_mask``.

        Returns:
            verl's fields (``prompts``, ``responses`` [L], ``response_mask`` [L],
            ``rm_scores`` [L] …) and ``distill_mask``: float32 [L] = spans mask (1 on
            reasoning and query tokens) × :func:`gta_verl.data.schema.distill_select` of
            ``reward_extra_info`` (0 unless a reward manager selected the trajectory).
        """
        out = super().as_dict()
        length = int(out["responses"].size(0))
        fields = out.get("extra_fields") or self.extra_fields
        info = fields.get(schema.EF_REWARD_EXTRA_INFO) or {}
        place = schema.parse_flag(fields.get(EF_PLACE_TURN_REWARDS), EF_PLACE_TURN_REWARDS)
        if place and self.reward_score is not None and length > 0:
            from gta_verl.rewards.placement import place_from_extra_fields

            placed = place_from_extra_fields(length, float(self.reward_score), fields)
            out["rm_scores"] = torch.tensor(placed, dtype=torch.float32)
        select = schema.distill_select(info)
        mask = distill_mask_from_spans(length, fields.get(schema.EF_TURN_SPANS, []))
        out["distill_mask"] = torch.tensor(mask, dtype=torch.float32) * select
        return out


class _Rollout:
    """Mutable per-trajectory state: response tokens, mask, log-probs, spans, records."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.mask: list[int] = []
        self.logprobs: list[float] = []
        self.have_logprobs = True
        self.spans: list[list[Any]] = []
        self.queries: list[str] = []
        self.doc_ids: list[list[str]] = []
        self.query_doc_ids: list[list[list[str]]] = []
        self.texts: list[list[str]] = []
        self.errors = 0
        self.invalid = 0
        self.trailing = 0
        self.answer: str | None = None
        self.actions = 0
        self.turns = 1  # the user message
        self.global_steps: tuple[int | None, int | None] = (None, None)  # (min, max) weight version

    def add(self, ids: list[int], kind: str, mask: int, logprobs: list[float] | None = None) -> None:
        if not ids:
            return
        start = len(self.ids)
        self.ids.extend(ids)
        self.mask.extend([mask] * len(ids))
        if logprobs is None or len(logprobs) != len(ids):
            if mask == 1:
                self.have_logprobs = False  # a backend without log-probs: report none at all
            logprobs = [0.0] * len(ids)
        self.logprobs.extend(float(x) for x in logprobs)
        self.spans.append([kind, start, len(self.ids)])


@register_agent_loop(AGENT_NAME)
class GTASearchAgentLoop(AgentLoopBase):
    """Multi-turn ``<search>``/``<answer>`` agent over the GTA retrieval environment.

    Args:
        *args, **kwargs: :class:`AgentLoopBase` arguments (``trainer_config``,
            ``server_manager``, ``tokenizer``, ``processor``, ``dataset_cls``,
            ``data_config`` …) as verl's worker passes them.
        retriever_client: Optional client to use instead of the process-wide one.
    """

    def __init__(self, *args: Any, retriever_client: AsyncRetriever | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.agent_config: AgentConfig = agent_config_from_trainer_config(self.config)
        self.response_length = int(self.rollout_config.response_length)
        self.retrieval_timeout_s = _retrieval_timeout(self.config)
        self._client = retriever_client

    async def _retriever(self) -> AsyncRetriever:
        if self._client is None:
            self._client = await self.loop.run_in_executor(
                None, get_retriever_client, self.config, self.agent_config
            )
        return self._client

    def _decode(self, ids: Any) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """Roll out one trajectory (Algorithm 1). ``kwargs`` are the dataset columns."""
        prompt_ids = await self.ct_build_initial_tokens(list(kwargs["raw_prompt"]))
        state, timing = _Rollout(), {"generate_sequences": 0.0, "tool_calls": 0.0}
        request_id = uuid4().hex  # one per trajectory: sticky server + prefix cache
        truncated = False
        while state.actions < self.agent_config.max_actions and state.answer is None:
            remaining = self.response_length - len(state.ids)
            if remaining <= 0:
                truncated = True
                break
            params = {
                **dict(sampling_params),  # a fresh dict per call: the server pops keys
                "stop": list(STOP_STRINGS),
                "include_stop_str_in_output": True,
                "max_tokens": remaining,
            }
            tic = time.perf_counter()
            out = await self.server_manager.generate(
                request_id=request_id, prompt_ids=prompt_ids + state.ids, sampling_params=params
            )
            timing["generate_sequences"] += time.perf_counter() - tic
            state.actions += 1
            state.global_steps = merge_global_steps(state.global_steps, getattr(out, "extra_fields", None))
            tic = time.perf_counter()
            truncated = await self._take_turn(state, list(out.token_ids)[:remaining], out.log_probs)
            timing["tool_calls"] += time.perf_counter() - tic
            if truncated:
                break
        return self._output(prompt_ids, state, truncated, timing)

    async def _take_turn(self, state: _Rollout, gen_ids: list[int], logprobs: list[float] | None) -> bool:
        """Append one generated turn and its environment response; return True if truncated."""
        text = self._decode(gen_ids)
        action = parse_action(text, self.agent_config.max_queries_per_turn)
        if has_trailing(text, action):  # backend ran past the stop string: drop the excess
            state.trailing += 1
            keep = token_index_for_char(gen_ids, action.end, self._decode)
            gen_ids = gen_ids[:keep]
        logprobs = list(logprobs)[: len(gen_ids)] if logprobs is not None else None
        split = token_index_for_char(gen_ids, action.action_start, self._decode, straddler="after")
        action_kind = {"search": "query", "answer": "answer"}.get(action.kind, "reasoning")
        state.add(gen_ids[:split], "reasoning", 1, logprobs[:split] if logprobs is not None else None)
        state.add(gen_ids[split:], action_kind, 1, logprobs[split:] if logprobs is not None else None)
        state.turns += 1
        if action.kind == "answer":
            state.answer = action.content
            return False
        if action.kind == "search":
            obs_ids = await self._search(state, action.queries)
            kind = "observation"
        else:
            state.invalid += 1
            obs_ids, kind = self._encode(INVALID_ACTION_MESSAGE), "invalid"
        state.add(obs_ids, kind, 0)
        state.turns += 1
        # Generation is capped at the remaining budget, so only an appended observation or
        # invalid message can overflow; an exact fill is caught by ``run``'s next iteration.
        return len(state.ids) > self.response_length

    async def _search(self, state: _Rollout, queries: tuple[str, ...]) -> list[int]:
        """Call R on the turn's queries (one batched call); return the observation ids.

        Several queries (``gta.agent.max_queries_per_turn`` > 1) are one observation: the
        union of their passages (:func:`union_of_results`), recorded as the turn's R(q_t), and
        each query's share of it as ``gta/turn_query_doc_ids``. The observation is fitted to
        ``min(max_obs_tokens, remaining response budget)`` by shortening passages
        (:func:`gta_verl.agent.observation.fit_observation_per_query`: each query's best
        passage budgeted first), and only the passages shown, with their text as shown, are
        recorded: rewards and metrics count exactly what the policy saw.
        """
        results = await self._call_retriever(queries)
        _, error, failed = union_of_results(results)
        groups = query_groups(results)
        cap = min(self.agent_config.max_obs_tokens, self.response_length - len(state.ids))
        fitted = fit_observation_per_query(groups, error, max(cap, 0), self._encode, self._decode)
        shown = {h.doc_id for h in fitted.shown}
        state.queries.append(f" {QUERY_SEPARATOR} ".join(queries))
        state.doc_ids.append([h.doc_id for h in fitted.shown])
        state.query_doc_ids.append([[h.doc_id for h in g if h.doc_id in shown] for g in groups])
        state.texts.append([f"{h.title}\n{h.text}" for h in fitted.shown])
        state.errors += failed
        return fitted.ids

    async def _call_retriever(self, queries: Sequence[str]) -> list[RetrievalResult]:
        """R(q) for the turn's queries; a failure (even of the client itself) is a result per query."""
        try:
            client = await self._retriever()
        except Exception as exc:  # becomes an observation + metric
            logger.warning("gta agent loop: no retriever client for %r: %r", list(queries), exc)
            return [RetrievalResult(query=q, error=f"{type(exc).__name__}: {exc}") for q in queries]
        return await aretrieve_guarded(client, queries, self.retrieval_timeout_s)

    def _output(
        self, prompt_ids: list[int], state: _Rollout, truncated: bool, timing: dict[str, float]
    ) -> GTAAgentLoopOutput:
        n = self.response_length
        truncated = truncated or len(state.ids) > n
        spans = clip_spans(state.spans, n)
        fields: dict[str, Any] = {
            schema.EF_TURN_QUERIES: state.queries,
            schema.EF_TURN_DOC_IDS: state.doc_ids,
            schema.EF_TURN_TEXTS: state.texts,
            schema.EF_RETRIEVAL_ERRORS: state.errors,
            schema.EF_NUM_SEARCHES: len(state.queries),
            schema.EF_INVALID_ACTIONS: state.invalid,
            schema.EF_ANSWER: state.answer,
            schema.EF_TURN_SPANS: [list(s) for s in spans],
            schema.EF_BUDGET_EXHAUSTED: state.answer is None
            and state.actions >= self.agent_config.max_actions,
            schema.EF_TRUNCATED: bool(truncated),
            EF_PLACE_TURN_REWARDS: bool(self.agent_config.place_turn_rewards),
            EF_TRAILING_DROPPED: state.trailing,
            **(
                {schema.EF_TURN_QUERY_DOC_IDS: state.query_doc_ids}
                if self.agent_config.max_queries_per_turn > 1
                else {}
            ),
            MIN_GLOBAL_STEPS: state.global_steps[0],
            MAX_GLOBAL_STEPS: state.global_steps[1],
        }
        return GTAAgentLoopOutput(
            prompt_ids=list(prompt_ids),
            response_ids=state.ids[:n],
            response_mask=state.mask[:n],
            response_logprobs=state.logprobs[:n] if state.have_logprobs else None,
            num_turns=state.turns,
            metrics=timing,
            extra_fields=fields,
        )
