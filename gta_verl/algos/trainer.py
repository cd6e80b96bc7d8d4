"""gta's V1 trainers: one mixin over each of verl's trainer modes.

``trainer.v1.trainer_mode`` names ``<family>_<mode>``: family ``gta`` (every recipe) or
``gta_path_router`` (PathRouter), mode one of verl's ``sync``, ``colocate_async``,
``separate_async``. On our recipes verl's plain mode names map to the recipe's trainer in
that mode before Ray starts (:mod:`gta_verl.preflight`), so the one knob a user sets is
verl's own (``trainer.v1.trainer_mode=colocate_async``).

:class:`GTATrainerMixin` (family ``gta``) adds to verl's trainer of the mode:

* the retriever is part of the job: ``init`` creates the named retriever actor before
  verl starts its workers and waits for its ``health`` (KB loaded) before the first
  rollout, so step 1 sees no retrieval errors; a missing ``gta.retriever.kb_dir`` fails
  the job there, with the key named (:func:`gta_verl.agent.retriever_access.start_job_retriever`);
* every step logs gta's evidence metrics ``gta/*`` (TargetDocCov, complete-chain rate,
  retrieval errors, routes, P, KL token ratio; :mod:`gta_verl.algos.step_metrics`),
  which verl 0.9.1 only logs for validation.

:class:`PathRouterMixin` (family ``gta_path_router``, PathRouter §3.2–3.4) adds
route-weighted GRPO advantages and λ(step) for the teacher KL.

verl 0.9.1 gives advantage estimators no per-sample data (only ``uid``), so the route
weight cannot be applied inside a registered estimator. The mixin therefore overrides:

* ``_compute_advantage``: runs the parent (GRPO group normalization → Â), then fetches
  ``advantages`` and ``extra_fields`` from the TransferQueue, multiplies each trajectory
  by ``extra_fields[i]["reward_extra_info"]["route_weight"]`` (written by the
  ``path_router`` reward manager) and writes Ã back; logs the share of each route, the
  mean weight, mean C/P, the KL-eligible share and the unsupported-answer rate. The
  parent recomputes Â from ``rm_scores`` on every call, so each sample's weight is
  applied once, also when an async mode splits a step into several mini-batches.
* ``_update_actor``: puts λ(step) (:func:`gta_verl.algos.schedule.warmup_lambda`) and the
  step's selected-trajectory share into ``batch.extra_info``, which verl hands to the
  actor's loss as non-tensor data (read by ``gta_selective_topk_kl``).

With every weight 1 (``gta.path_router.route_scaling=false``) the advantages are left
untouched, i.e. exactly verl's GRPO.

verl's base trainer tests ``self.trainer_mode`` against "sync" and reads
``trainer.v1.<trainer_mode>`` (replay buffer, refill, TQ checkpointing, warm-up batches);
each class reports its verl mode whatever name selected it, so it behaves exactly like
verl's trainer of that mode.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from tensordict import TensorDict

from gta_verl.algos.advantages import (
    TURN_GRPO_NAME,
    AdvantageContext,
    advantage_context,
    grpo_row_advantages,
    reward_error_flags,
)
from gta_verl.algos.distill_loss import COEF_KEY, LOSS_NAME, SELECT_FRAC_KEY
from gta_verl.algos.route_weights import (
    apply_route_weights,
    checked_route_weights,
    route_metrics,
    unsupported_answer_rate,
)
from gta_verl.algos.schedule import warmup_lambda
from gta_verl.algos.shuffled_control import SHUFFLED_GRPO_NAME
from gta_verl.algos.step_metrics import evidence_step_metrics, kl_token_frac, signal_step_metrics
from gta_verl.data import schema
from gta_verl.data.schema import DISTILL_SELECT_DEFAULT, plain_value
from gta_verl.preflight import trainer_name
from gta_verl.rewards.path_router import path_router_config_from_trainer
from gta_verl.verl_compat import (
    PPOTrainerColocateAsync,
    PPOTrainerSeparateAsync,
    PPOTrainerSync,
    register_trainer,
    response_to_nested,
    tq,
)

logger = logging.getLogger(__name__)

TRAINER_NAME = trainer_name("gta_path_router", "sync")
BASE_TRAINER_NAME = trainer_name("gta", "sync")

__all__ = [
    "BASE_TRAINER_NAME",
    "TRAINER_NAME",
    "GTAPathRouterColocateAsync",
    "GTAPathRouterSeparateAsync",
    "GTAPathRouterTrainer",
    "GTATrainerColocateAsync",
    "GTATrainerMixin",
    "GTATrainerSeparateAsync",
    "GTATrainerSync",
    "PathRouterMixin",
    "route_fields_from_extra",
]


def route_fields_from_extra(extra_fields: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
    """Per-sample route diagnostics from TQ ``extra_fields`` (missing values → neutral).

    Returns float64 tensors ``route_weight`` (1.0 if missing), ``route`` (−1 if missing),
    ``C``, ``P``, ``distill_select`` (:data:`~gta_verl.data.schema.DISTILL_SELECT_DEFAULT`
    if missing), ``has_gold_evidence`` and ``reward_error``.
    """
    keys = {
        schema.RI_ROUTE_WEIGHT: 1.0,
        schema.RI_ROUTE: -1,
        schema.RI_C: 0.0,
        schema.RI_P: 0.0,
        schema.RI_DISTILL_SELECT: DISTILL_SELECT_DEFAULT,
        schema.RI_HAS_GOLD_EVIDENCE: 0.0,
        schema.RI_REWARD_ERROR: 0.0,
    }
    cols: dict[str, list[float]] = {k: [] for k in keys}
    for ef in extra_fields:
        info = (ef or {}).get(schema.EF_REWARD_EXTRA_INFO, {}) or {}
        for k, default in keys.items():
            value = info.get(k, default)
            cols[k].append(float(value if value is not None else default))
    return {k: torch.tensor(v, dtype=torch.float64) for k, v in cols.items()}


def run_seed(config: Any) -> int:
    """The run's seed: ``data.seed`` (the data order's seed, which the learning benchmarks vary), else 0."""
    data = config.get("data") if config is not None and hasattr(config, "get") else None
    seed = data.get("seed") if data is not None else None
    return int(seed) if seed is not None else 0


def _padded(t: torch.Tensor) -> torch.Tensor:
    return t.to_padded_tensor(0.0) if getattr(t, "is_nested", False) else t


def _step_metrics(fields: Mapping[str, torch.Tensor], keep: torch.Tensor, theta_p: float) -> dict[str, float]:
    routes, weights = fields[schema.RI_ROUTE][keep], fields[schema.RI_ROUTE_WEIGHT][keep]
    known = routes >= 0
    out = route_metrics(routes[known].long(), weights[known])
    out["path_router/mean_route_weight"] = float(weights.mean().item()) if weights.numel() else 0.0
    out["path_router/missing_route_frac"] = float((~known).double().mean().item()) if routes.numel() else 0.0
    c, p = fields[schema.RI_C][keep], fields[schema.RI_P][keep]
    gold = fields[schema.RI_HAS_GOLD_EVIDENCE][keep] > 0
    out["path_router/C_mean"] = float(c.mean().item()) if c.numel() else 0.0
    out["path_router/P_mean"] = float(p[gold].mean().item()) if gold.any() else 0.0
    out["path_router/kl_select_frac"] = (
        float(fields[schema.RI_DISTILL_SELECT][keep].mean().item()) if c.numel() else 0.0
    )
    # UAR (paper §4.1) from C and P, not the route: answer_only routing never yields C+P-.
    out["path_router/unsupported_answer_rate"] = unsupported_answer_rate(c, p, gold, theta_p)
    return out


def _padding_keep(batch: Any, n: int) -> list[bool]:
    tags = list(getattr(batch, "tags", None) or [{}] * n)
    return [not (t or {}).get("is_padding", False) for t in tags]


def _distillation_enabled(config: Any) -> bool:
    dist = config.get("distillation", None)
    return bool(dist is not None and dist.get("enabled", False))


def _signal_metrics(data: Mapping[str, Any], keep: list[bool]) -> dict[str, float]:
    """``gta/groups_with_signal`` and ``gta/rollouts_with_signal`` over the kept rows (TQ fields ``uid``,
    ``advantages`` and ``response_mask``, regular or nested tensors)."""
    uids = [u for u, ok in zip(plain_value(data["uid"]), keep, strict=True) if ok]
    rows = zip(data["advantages"].unbind(0), data["response_mask"].unbind(0), keep, strict=True)
    kept = [(a.tolist(), m.tolist()) for a, m, ok in rows if ok]
    return signal_step_metrics(uids, [a for a, _ in kept], [m for _, m in kept])


def _token_sum(t: torch.Tensor, keep: list[bool]) -> float:
    padded = t.to_padded_tensor(0) if getattr(t, "is_nested", False) else t
    return float(padded[torch.tensor(keep, dtype=torch.bool)].float().sum().item())


class GTATrainerMixin:
    """A ready retriever + ``gta/*`` step metrics over verl's trainer of mode :attr:`VERL_MODE`."""

    #: The verl mode this class runs in (what ``self.trainer_mode`` reports to verl's code).
    VERL_MODE = "sync"

    @property
    def trainer_mode(self) -> str:
        """The verl mode, not the registered name: verl branches on ``trainer_mode == "sync"``
        and reads ``trainer.v1.<trainer_mode>``, which the registered name would miss."""
        return self.VERL_MODE

    @trainer_mode.setter
    def trainer_mode(self, value: str) -> None:
        self.registered_trainer_mode = value

    def init(self) -> None:
        """Start the retriever, let verl start its workers (the KB loads meanwhile), then wait."""
        from gta_verl.agent.retriever_access import (
            retriever_section,
            start_job_retriever,
            wait_retriever_ready,
        )

        # Kept for the whole job: the actor is owned by this (TaskRunner) process.
        self.retriever_handle = start_job_retriever(self.config)
        super().init()
        if self.retriever_handle is not None:
            kb_dir = retriever_section(self.config).kb_dir
            health = wait_retriever_ready(self.retriever_handle, kb_dir)
            logger.info("gta-verl: retriever ready before the first rollout (%s): %s", kb_dir, health)

    def _compute_metrics(
        self, batch: Any, metrics: dict, timing_raw: dict, global_steps: int, epoch: int
    ) -> None:
        """verl's step metrics, then ``gta/*`` from the step's ``extra_fields`` (still in TQ)."""
        super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        with_kl = _distillation_enabled(self.config)
        fields = ["extra_fields", "response_mask", "uid", "advantages"]
        fields += ["distill_mask"] if with_kl else []
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
        extra = list(plain_value(data["extra_fields"]))
        keep = _padding_keep(batch, len(extra))
        metrics.update(evidence_step_metrics(extra, keep))
        metrics.update(_signal_metrics(data, keep))
        if with_kl:
            metrics.update(
                kl_token_frac(_token_sum(data["distill_mask"], keep), _token_sum(data["response_mask"], keep))
            )

    def _log_rollout_data(self, batch: Any, timing_raw: dict, rollout_data_dir: str) -> None:
        """verl's text dump (``trainer.rollout_data_dir``), plus the step's token layout next to it.

        ``<dir>/<step>.tokens.pt``: per rollout the prompt and response ids, the response mask
        (1 = policy token, 0 = observation), verl's advantages and old log-probs, the group ``uid``,
        ``reward_model`` (ground truth) and the agent loop's ``extra_fields`` — what the text dump
        cannot carry (it decodes without special tokens and drops the mask), and what the learning
        probe (:mod:`gta_verl.eval.learning_probe`) re-scores and scores a policy change against.
        """
        import os

        super()._log_rollout_data(batch, timing_raw, rollout_data_dir)
        tensors = ["prompts", "responses", "response_mask", "advantages", "old_log_probs"]
        plain = ["uid", "reward_model", "extra_fields"]
        data = tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=tensors + plain
        )
        keep = _padding_keep(batch, len(batch.keys))
        rows = {k: [t.tolist() for t, ok in zip(data[k].unbind(0), keep, strict=True) if ok] for k in tensors}
        for k in plain:
            values = list(plain_value(data[k]))
            rows[k] = [v for v, ok in zip(values, keep, strict=True) if ok]
        os.makedirs(rollout_data_dir, exist_ok=True)
        path = os.path.join(rollout_data_dir, f"{self.global_steps}.tokens.pt")
        torch.save({"step": int(self.global_steps), **rows}, path + ".tmp")
        os.replace(path + ".tmp", path)

    def _compute_advantage(self, batch: Any, metrics: dict) -> Any:
        """verl's advantages, with the run's seed and step in reach of gta's estimators and rows whose reward
        could not be computed out of their groups.

        verl hands a registered estimator only the group ids, so the step's :class:`AdvantageContext` (seed,
        step, the rows whose manager wrote ``reward_error`` = 1) is set around verl's advantage step.
        ``gta_turn_grpo`` and ``gta_shuffled_grpo`` read it; for verl's own ``grpo`` the advantages of a group
        holding such a row are recomputed afterwards, over its other rows (:func:`grpo_row_advantages`); any
        other estimator only has those rows' advantages zeroed (its statistics are verl's own). Logs
        ``gta/reward_error_rows`` (count) and ``gta/reward_error_frac``.
        """
        data = tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"]
        )
        errors = reward_error_flags(list(plain_value(data["extra_fields"])))
        keep = _padding_keep(batch, len(errors))
        counted = [e for e, ok in zip(errors, keep, strict=True) if ok]
        metrics["gta/reward_error_rows"] = float(sum(counted))
        metrics["gta/reward_error_frac"] = float(sum(counted)) / len(counted) if counted else 0.0
        context = AdvantageContext(
            seed=run_seed(self.config),
            step=int(getattr(self, "global_steps", 0) or 0),
            excluded=tuple(errors) if any(errors) else None,
        )
        with advantage_context(context):
            batch = super()._compute_advantage(batch, metrics)
        if any(errors) and str(self.config.algorithm.adv_estimator) not in (
            TURN_GRPO_NAME,
            SHUFFLED_GRPO_NAME,
        ):
            batch = self._drop_error_rows(batch, errors)
        return batch

    def _drop_error_rows(self, batch: Any, errors: list[bool]) -> Any:
        """Rewrite the advantages verl computed with the error rows inside their groups (see above)."""
        algo = self.config.algorithm
        # With a KL penalty in the reward verl writes token_level_rewards back; otherwise they are rm_scores.
        reward_field = "token_level_rewards" if algo.get("use_kl_in_reward", False) else "rm_scores"
        data = tq.kv_batch_get(
            keys=batch.keys,
            partition_id=batch.partition_id,
            select_fields=["uid", "response_mask", "advantages", reward_field],
        )
        response_mask = data["response_mask"]
        mask = _padded(response_mask)
        advantages = _padded(data["advantages"]).clone()
        error = torch.tensor(errors, dtype=torch.bool)
        if str(algo.adv_estimator) == "grpo":
            uids = list(plain_value(data["uid"]))
            scores = _padded(data[reward_field]).to(advantages.dtype).sum(dim=-1)
            row = grpo_row_advantages(
                scores, uids, ~error, bool(algo.get("norm_adv_by_std_in_grpo", True)), epsilon=1e-6
            )
            hit = {u for u, e in zip(uids, errors, strict=True) if e}
            rows = torch.tensor([u in hit for u in uids], dtype=torch.bool)
            advantages[rows] = row[rows].unsqueeze(-1) * mask[rows].to(advantages.dtype)
            fields = {"advantages": advantages, "returns": advantages}
        else:
            logger.warning(
                "%d rows without a reward get advantage 0, but %s's group statistics still include them",
                int(error.sum()),
                algo.adv_estimator,
            )
            advantages[error] = 0.0
            fields = {"advantages": advantages}
        out = TensorDict(
            {k: response_to_nested(v, response_mask) for k, v in fields.items()}, batch_size=len(errors)
        )
        return tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=out)


@register_trainer(BASE_TRAINER_NAME)
class GTATrainerSync(GTATrainerMixin, PPOTrainerSync):
    """``gta_sync``: verl's synchronous V1 trainer + the gta additions."""


@register_trainer(trainer_name("gta", "colocate_async"))
class GTATrainerColocateAsync(GTATrainerMixin, PPOTrainerColocateAsync):
    """``gta_colocate_async``: verl's colocated async trainer (partial rollouts) + the gta additions."""

    VERL_MODE = "colocate_async"


@register_trainer(trainer_name("gta", "separate_async"))
class GTATrainerSeparateAsync(GTATrainerMixin, PPOTrainerSeparateAsync):
    """``gta_separate_async``: verl's separate-pool async trainer + the gta additions."""

    VERL_MODE = "separate_async"


class PathRouterMixin:
    """PathRouter's route weights and KL schedule over a :class:`GTATrainerMixin` trainer."""

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.path_router_cfg = path_router_config_from_trainer(config)
        self._distill_select_frac: float | None = None
        self._check_distillation_config(config)

    def _check_distillation_config(self, config: Any) -> None:
        kl = self.path_router_cfg.kl
        enabled = _distillation_enabled(config)
        if kl.enabled and not enabled:
            logger.warning(
                "gta.path_router.kl.enabled=true but distillation.enabled=false: no teacher KL term"
            )
        if not enabled:
            return
        loss = config.get("distillation").distillation_loss
        if loss.get("loss_mode") != LOSS_NAME:
            logger.warning(
                "distillation.distillation_loss.loss_mode=%s is not %s", loss.get("loss_mode"), LOSS_NAME
            )
            return
        if int(loss.get("topk")) != kl.topk:
            raise ValueError(
                f"distillation.distillation_loss.topk={loss.get('topk')} != "
                f"gta.path_router.kl.topk={kl.topk}; "
                "set one from the other"
            )
        if float(loss.get("distillation_loss_coef", 1.0)) != 1.0:
            logger.warning(
                "distillation_loss_coef=%s multiplies λ(step) again", loss.get("distillation_loss_coef")
            )

    def _compute_advantage(self, batch: Any, metrics: dict) -> Any:
        """GRPO advantages (parent), then Ã_i = w_route(C_i, P_i) · Â_i in the TransferQueue."""
        batch = super()._compute_advantage(batch, metrics)
        data = tq.kv_batch_get(
            keys=batch.keys,
            partition_id=batch.partition_id,
            select_fields=["advantages", "response_mask", "extra_fields"],
        )
        extra = list(plain_value(data["extra_fields"]))
        fields = route_fields_from_extra(extra)
        keep = torch.tensor(_padding_keep(batch, len(extra)), dtype=torch.bool)
        # A row whose reward could not be computed carries placeholder C, P and route (0 = C+P+): not a route.
        keep &= fields[schema.RI_REWARD_ERROR] == 0
        metrics.update(_step_metrics(fields, keep, self.path_router_cfg.theta_p))
        selected = fields[schema.RI_DISTILL_SELECT][keep]
        self._distill_select_frac = float(selected.mean().item()) if selected.numel() else 0.0

        weights = (
            fields[schema.RI_ROUTE_WEIGHT]
            if self.path_router_cfg.route_scaling
            else torch.ones_like(fields[schema.RI_ROUTE_WEIGHT])
        )
        checked_route_weights(weights)  # NaN, inf or negative: refused before any advantage is touched
        if bool((weights == 1.0).all()):
            return batch  # plain GRPO: leave Â bit-for-bit as the parent wrote it
        response_mask = data["response_mask"]
        advantages = data["advantages"]
        padded = advantages.to_padded_tensor(0.0) if advantages.is_nested else advantages
        scaled = apply_route_weights(padded, weights.to(padded.dtype))
        out = TensorDict({"advantages": response_to_nested(scaled, response_mask)}, batch_size=len(extra))
        return tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=out)

    def _update_actor(self, batch: Any, metrics: dict) -> Any:
        """Hand λ(step) and the selected share to the distillation loss, then update."""
        lam = warmup_lambda(int(self.global_steps), self.path_router_cfg.kl)
        batch.extra_info[COEF_KEY] = lam
        if self._distill_select_frac is not None:
            batch.extra_info[SELECT_FRAC_KEY] = self._distill_select_frac
        metrics["path_router/kl_lambda"] = lam
        return super()._update_actor(batch, metrics)


@register_trainer(TRAINER_NAME)
class GTAPathRouterTrainer(PathRouterMixin, GTATrainerSync):
    """``gta_path_router_sync``: ``gta_sync`` with PathRouter's route weights and KL schedule."""


@register_trainer(trainer_name("gta_path_router", "colocate_async"))
class GTAPathRouterColocateAsync(PathRouterMixin, GTATrainerColocateAsync):
    """``gta_path_router_colocate_async``: ``gta_colocate_async`` with PathRouter's additions."""


@register_trainer(trainer_name("gta_path_router", "separate_async"))
class GTAPathRouterSeparateAsync(PathRouterMixin, GTATrainerSeparateAsync):
    """``gta_path_router_separate_async``: ``gta_separate_async`` with PathRouter's additions."""
