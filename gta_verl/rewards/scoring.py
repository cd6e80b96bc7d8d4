"""Translation from verl's per-sample ``DataProto`` to plain scoring inputs, and the scorers.

Every gta reward manager (trajectory_guided, exact_match, PathRouter's path_router) calls
:func:`scoring_request_from_data` and then scores the :class:`ScoringRequest` with pure
functions (:func:`score_trajectory_guided`, :func:`score_exact_match`), so the verl-facing
code is this one function. The module itself does not import
verl: it only reads the attributes a ``DataProto`` / ``DataProtoItem`` has
(``batch[...]`` tensors, ``non_tensor_batch`` dict).

What ``RewardManagerBase.run_single`` receives on the agent-loop path (verl 0.9.1):
``batch`` = ``prompts``, ``responses``, ``attention_mask`` … (one row per agent-loop output,
unpadded); ``non_tensor_batch`` = every dataset column (``data_source``, ``reward_model``,
``extra_info``, …) plus ``tool_extra_fields`` (the agent loop's ``extra_fields``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from gta_verl.data.schema import (
    EF_ANSWER,
    EF_INVALID_ACTIONS,
    EF_NUM_SEARCHES,
    EF_RETRIEVAL_ERRORS,
    EF_TURN_DOC_IDS,
    EF_TURN_QUERY_DOC_IDS,
    RI_ACC,
    RI_COMPLETE_CHAIN,
    RI_HAS_ANSWER,
    RI_HAS_TARGETS,
    RI_TARGET_DOC_COV,
    drop_unshown_searches,
    parse_answer,
    parse_count,
    parse_ground_truth,
    parse_turn_doc_ids,
    parse_turn_query_doc_ids,
    plain_value,
)
from gta_verl.protocol import final_answer
from gta_verl.rewards.placement import TURN_REWARDS_KEY
from gta_verl.rewards.trajectory import (
    TrajectoryReward,
    TrajectoryRewardConfig,
    em_reward,
    trajectory_reward,
    zero_target_queries,
)
from gta_verl.strict_config import node_at, to_plain

__all__ = [
    "ScoringRequest",
    "decode_response",
    "extra_info_from",
    "reward_config_from_trainer",
    "score_exact_match",
    "score_trajectory_guided",
    "scoring_request",
    "scoring_request_from_data",
]


@dataclass(frozen=True)
class ScoringRequest:
    """Everything a reward needs about one rollout, as plain Python data.

    Treat the mapping fields as read-only.
    """

    response_text: str
    """Decoded response tokens (special tokens skipped); includes ``<info>`` observations."""
    answers: tuple[str, ...]
    """Gold answer and aliases (``reward_model.ground_truth.target``)."""
    target_doc_ids: tuple[str, ...] = ()
    """S(x) (``reward_model.ground_truth.target_doc_ids``; may be empty)."""
    support_texts: tuple[str, ...] = ()
    """Gold evidence texts (``reward_model.ground_truth.support_texts``)."""
    extra_fields: Mapping[str, Any] = field(default_factory=dict)
    """The agent loop's ``extra_fields`` (``gta/...`` keys of :mod:`gta_verl.data.schema`)."""
    data_source: str = ""
    extra_info: Mapping[str, Any] = field(default_factory=dict)
    """The dataset row's ``extra_info`` column."""

    @property
    def prediction(self) -> str | None:
        """ŷ: the answer the agent loop recorded (``gta/answer``), None if it never answered.

        Without the gta agent loop (no ``gta/answer`` key) the response is re-parsed with the
        loop's own parser, :func:`gta_verl.protocol.final_answer`, so both paths give the
        answer of the first ``<answer>`` *action*, never of a stray opener in reasoning.
        """
        if EF_ANSWER in self.extra_fields:
            return parse_answer(self.extra_fields[EF_ANSWER])
        return final_answer(self.response_text)

    @property
    def turn_doc_ids(self) -> list[list[str]]:
        """R(q_t) per search turn from ``gta/turn_doc_ids`` (``[]`` without the gta agent loop).

        Raises:
            ValueError: the record is not a list of lists of string ids
                (:func:`gta_verl.data.schema.parse_turn_doc_ids`).
        """
        return parse_turn_doc_ids(self.extra_fields.get(EF_TURN_DOC_IDS))

    @property
    def query_doc_ids(self) -> list[list[list[str]]]:
        """The ids shown per query, per search turn (``gta/turn_query_doc_ids``, K > 1); without
        that record every turn is one query showing its ``turn_doc_ids``."""
        value = self.extra_fields.get(EF_TURN_QUERY_DOC_IDS)
        if plain_value(value) is None:
            return [[ids] for ids in self.turn_doc_ids]
        return parse_turn_query_doc_ids(value)

    @property
    def num_searches(self) -> int:
        """``gta/num_searches`` when recorded, else the number of recorded search turns."""
        value = self.extra_fields.get(EF_NUM_SEARCHES)
        return parse_count(value, EF_NUM_SEARCHES) if value is not None else len(self.turn_doc_ids)


def _as_mapping(value: Any) -> Mapping[str, Any]:
    value = plain_value(value)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"expected a dict, got {type(value).__name__}: {value!r:.200}")
    return value


def _response_ids(item: Any) -> list[int]:
    """The valid response tokens of one ``DataProtoItem``: ``responses[:L]``.

    L is the attention mask's sum over the response window, as in verl's ``naive`` manager
    (responses are right-padded in padded batches).
    """
    response_ids = item.batch["responses"]
    length = int(response_ids.shape[-1])
    if "attention_mask" in item.batch.keys():  # TensorDict has no `in`
        valid = int(item.batch["attention_mask"][-length:].sum())
    else:
        valid = length
    return list(response_ids[:valid].tolist())


def decode_response(item: Any, tokenizer: Any) -> str:
    """Decode the valid response tokens of one ``DataProtoItem`` (special tokens skipped)."""
    return str(tokenizer.decode(_response_ids(item), skip_special_tokens=True))


def scoring_request_from_data(data: Any, tokenizer: Any) -> ScoringRequest:
    """Build a :class:`ScoringRequest` from the ``DataProto`` given to ``run_single``.

    A multi-output trajectory is scored on its last output (verl's own managers do the
    same); the gta agent loop emits one output per trajectory.

    Searches whose tool response never reached the policy's context (verl's ``tool_agent``
    ran out of response budget) show nothing (:func:`gta_verl.data.schema.drop_unshown_searches`).

    Raises:
        KeyError: when the row has no ``reward_model.ground_truth`` (not a verl RL row).
        ValueError: a malformed ground truth or ``gta/turn_doc_ids`` (the managers score it 0
            as a counted error).
    """
    item = data[len(data) - 1] if _is_batched(data) else data
    ntb = item.non_tensor_batch
    return scoring_request(
        _response_ids(item),
        ntb.get("reward_model"),
        ntb.get("tool_extra_fields"),
        tokenizer,
        data_source=str(plain_value(ntb.get("data_source", "")) or ""),
        extra_info=ntb.get("extra_info"),
    )


def scoring_request(
    response_ids: Any,
    reward_model: Any,
    extra_fields: Any,
    tokenizer: Any,
    data_source: str = "",
    extra_info: Any = None,
) -> ScoringRequest:
    """The :class:`ScoringRequest` of one rollout from plain parts: what every scorer of the package reads.

    The reward managers (through :func:`scoring_request_from_data`) and the learning probe
    (:func:`gta_verl.eval.learning_probe.rescored_rewards`, from a step dump) both build their requests here,
    so both drop the searches the policy never saw (:func:`gta_verl.data.schema.drop_unshown_searches`) and
    refuse the same malformed records.

    Args:
        response_ids: the valid response token ids (no padding).
        reward_model: the row's ``reward_model`` column (``{"ground_truth": ...}``).
        extra_fields: the agent loop's ``extra_fields`` (``gta/...`` keys), or None.
        tokenizer: decodes ``response_ids`` (special tokens skipped).
        data_source: the row's ``data_source``.
        extra_info: the row's ``extra_info`` column.

    Raises:
        KeyError: no ``reward_model.ground_truth``.
        ValueError: a malformed ground truth or ``gta/turn_doc_ids``.
    """
    rm = _as_mapping(reward_model)
    if "ground_truth" not in rm:
        raise KeyError(
            "reward_model.ground_truth missing from the sample; build parquet rows with "
            "gta_verl.data.schema.make_verl_row"
        )
    answers, doc_ids, texts = parse_ground_truth(plain_value(rm["ground_truth"]))
    ids = [int(t) for t in plain_value(response_ids)]
    fields = drop_unshown_searches(_as_mapping(extra_fields), len(ids))
    parse_turn_doc_ids(fields.get(EF_TURN_DOC_IDS))  # refused here, whichever manager scores
    return ScoringRequest(
        response_text=str(tokenizer.decode(ids, skip_special_tokens=True)),
        answers=tuple(answers),
        target_doc_ids=tuple(doc_ids),
        support_texts=tuple(texts),
        extra_fields=fields,
        data_source=data_source,
        extra_info=_as_mapping(extra_info),
    )


def _is_batched(data: Any) -> bool:
    """True for a ``DataProto`` (batch of rows), False for a ``DataProtoItem`` (one row)."""
    batch = getattr(data, "batch", None)
    return batch is not None and len(getattr(batch, "batch_size", ())) > 0


# --------------------------------------------------------------------------- scoring
_DEFAULT_REWARD = TrajectoryRewardConfig()


def extra_info_from(
    result: Any, request: ScoringRequest, turn_rewards: Any, answer_reward: float
) -> dict[str, Any]:
    """``reward_extra_info`` of the gta managers: scalars only, plus one JSON string.

    verl stacks these per sample with ``np.array`` and averages them in validation, so
    every value is a float/int (lists would be ragged) and the key set is the same for
    every sample. ``acc`` feeds verl's ``val-core`` metric. ``search_reward_sum``,
    ``answer_reward`` and ``turn_rewards_json`` describe the reward actually paid;
    ``traj_reward`` is R_traj (eq 18) in both stages, for comparison.

    Args:
        result: the rollout's :class:`TrajectoryReward` (evidence metrics).
        request: the scored rollout.
        turn_rewards: the per-search-turn rewards paid (JSON-encoded for placement).
        answer_reward: the terminal part of the paid reward.
    """
    turn_rewards = [float(r) for r in turn_rewards]
    return {
        RI_ACC: float(result.em),
        "f1": float(result.f1),
        "num_searches": int(result.num_searches),
        RI_TARGET_DOC_COV: float(result.target_doc_cov),
        RI_COMPLETE_CHAIN: float(result.complete_chain),
        "zero_target_turns": int(result.zero_target_turns),
        "zero_target_queries": zero_target_queries(request.query_doc_ids, request.target_doc_ids),
        "search_reward_sum": float(sum(turn_rewards)),
        "answer_reward": float(answer_reward),
        "traj_reward": float(result.total),
        RI_HAS_TARGETS: float(result.has_targets),
        RI_HAS_ANSWER: float(request.prediction is not None),
        "invalid_actions": parse_count(request.extra_fields.get(EF_INVALID_ACTIONS), EF_INVALID_ACTIONS),
        "retrieval_errors": parse_count(request.extra_fields.get(EF_RETRIEVAL_ERRORS), EF_RETRIEVAL_ERRORS),
        TURN_REWARDS_KEY: json.dumps(turn_rewards),
    }


def _trajectory(request: ScoringRequest, config: TrajectoryRewardConfig) -> TrajectoryReward:
    return trajectory_reward(
        request.turn_doc_ids, request.target_doc_ids, request.prediction, request.answers, config
    )


def score_trajectory_guided(
    request: ScoringRequest, config: TrajectoryRewardConfig = _DEFAULT_REWARD
) -> tuple[float, dict[str, Any]]:
    """Stage I: (R_traj of eq 18, reward_extra_info) for one rollout."""
    result = _trajectory(request, config)
    # The terminal part of the paid reward: r_ans plus potential shaping's F_end = −Φ(s_T).
    terminal = result.answer_reward + result.terminal_shaping
    return result.total, extra_info_from(result, request, result.search_rewards, terminal)


def score_exact_match(
    request: ScoringRequest, config: TrajectoryRewardConfig = _DEFAULT_REWARD
) -> tuple[float, dict[str, Any]]:
    """Stage II: (R_EM of eq 19, reward_extra_info).

    The evidence metrics (coverage, zero-target turns, R_traj) are still computed from the
    trajectory for logging; the paid per-turn rewards are all 0 (R_EM has no search term).
    """
    result = _trajectory(request, config)
    reward = em_reward(request.prediction, request.answers)
    return reward, extra_info_from(result, request, [0.0] * result.num_searches, reward)


def reward_config_from_trainer(cfg: Any) -> TrajectoryRewardConfig:
    """Reward values for the reward managers: ``gta.reward``, overridden by any
    ``reward.reward_kwargs`` key that names a :class:`TrajectoryRewardConfig` field.

    ``reward.reward_kwargs`` is verl's free-form manager-settings node, so keys meant for
    other managers are ignored rather than rejected there.
    """
    base = TrajectoryRewardConfig.from_mapping(node_at(cfg, "gta", "reward"))
    kwargs = to_plain(node_at(cfg, "reward", "reward_kwargs")) or {}
    names = {f.name for f in fields(TrajectoryRewardConfig)}
    overrides = {k: v for k, v in dict(kwargs).items() if k in names}
    return replace(base, **overrides) if overrides else base
