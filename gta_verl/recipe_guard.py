"""Refuse, before Ray starts, the verl trainers a gta recipe config cannot run on.

Our recipe configs (``gta_verl/config/*.yaml``) name our V1 trainer in one key,
``trainer.v1.trainer_mode``. Two overrides silently swap it out:

* ``trainer.use_v1=False`` selects verl's classic ``RayPPOTrainer``: no ``gta/*`` evidence
  metrics, no retriever started before step 1, no route weights or λ(step); the PathRouter
  recipes die at step 1 inside verl (their agent-loop manager is TransferQueue-only);
* a ``trainer.v1.trainer_mode`` the recipe does not list (another family's trainer such as
  ``gta_sync`` on a PathRouter recipe, a user's own) replaces our trainer, dropping the same
  pieces without a message. verl's own mode names (``sync``, ``colocate_async``,
  ``separate_async``) never get here: the recipe's :class:`gta_verl.preflight.GTAPreflight`
  (Hydra's ``on_run_start``, before this callback) maps them to the recipe's trainer in that
  mode, and each recipe lists its trainer in every mode.

Each recipe YAML declares :class:`RecipeGuard` as a Hydra callback (``hydra.callbacks``,
a public Hydra hook) with the trainer modes it supports. Hydra calls
:meth:`RecipeGuard.on_job_start` with the composed config (overrides applied) before
verl's ``main`` runs, so ``validate_config`` and ``ray.init`` are never reached: the job
stops with one line naming the requirement and the override to use. Hydra turns an
``Exception`` raised by a callback into a warning, so the refusal is a ``SystemExit``.

The same check backs up :class:`gta_verl.algos.teacher.GTAAgentLoopManagerTQ` for launches
that bypass Hydra (a custom ``main`` calling verl's ``run_ppo``): that manager is
TransferQueue-only, and verl's classic trainer would otherwise reach it and fail at step 1.

Reads the config mapping only; imports neither verl nor Ray.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from hydra.experimental.callback import Callback

from gta_verl.strict_config import value_at

__all__ = ["RecipeGuard", "classic_trainer_refusal", "refusal"]


def refusal(
    config: Mapping[str, Any], recipe: str, trainer_modes: Iterable[str], provides: str = ""
) -> str | None:
    """The one-line refusal for ``config``, or None when its trainer is one the recipe supports.

    Args:
        config: The composed trainer config (``trainer.use_v1``, ``trainer.v1.trainer_mode``).
        recipe: The config's name, for the message.
        trainer_modes: The V1 trainer modes the recipe runs with; the first is its default.
        provides: What the recipe's trainer adds, for the message.

    Returns:
        None, or a single line without newlines.

    Examples:
        >>> cfg = {"trainer": {"use_v1": False, "v1": {"trainer_mode": "gta_sync"}}}
        >>> refusal(cfg, "gta_grpo", ["gta_sync"])[:50]
        "gta_verl: config gta_grpo needs verl's V1 trainer "
        >>> v1 = {"trainer": {"use_v1": True, "v1": {"trainer_mode": "gta_sync"}}}
        >>> refusal(v1, "gta_grpo", ["gta_sync"]) is None
        True
    """
    modes = [str(m) for m in trainer_modes]
    if not modes:
        raise ValueError(
            f"RecipeGuard of {recipe}: trainer_modes is empty; list the V1 trainer modes it supports"
        )
    default = modes[0]
    what = f"config {recipe}" + (f" ({provides})" if provides else "")
    classic = classic_trainer_refusal(config, what, default)
    if classic is not None:
        return classic
    mode = str(value_at(config, "trainer.v1.trainer_mode", default))
    if mode not in modes:
        return (
            f"gta_verl: {what} runs with trainer.v1.trainer_mode={' or '.join(modes)}; "
            f"trainer.v1.trainer_mode={mode} would replace that trainer and drop them — "
            f"set trainer.v1.trainer_mode={default}"
        )
    return None


def classic_trainer_refusal(config: Mapping[str, Any], what: str, trainer_mode: str) -> str | None:
    """One line when ``config`` selects verl's classic trainer (``trainer.use_v1=False``), else None.

    Args:
        config: The trainer config.
        what: What needs the V1 trainer, for the message (``"config gta_grpo"``).
        trainer_mode: The V1 trainer mode to name in the message.

    Examples:
        >>> classic_trainer_refusal({"trainer": {"use_v1": "false"}}, "config x", "gta_sync")[:38]
        "gta_verl: config x needs verl's V1 tra"
    """
    use_v1 = value_at(config, "trainer.use_v1", True)
    if isinstance(use_v1, str):
        use_v1 = use_v1.strip().lower() not in ("false", "0", "no")
    if use_v1:
        return None
    return (
        f"gta_verl: {what} needs verl's V1 trainer (trainer.use_v1=true, "
        f"trainer.v1.trainer_mode={trainer_mode}); verl's classic trainer (trainer.use_v1=False) "
        f"cannot run it — remove the override or set trainer.use_v1=true"
    )


class RecipeGuard(Callback):
    """Hydra callback of the recipe YAML (see module docstring).

    Args:
        trainer_modes: V1 trainer modes the recipe supports, its default first.
        provides: What the recipe's trainer adds (named in the message).
        recipe: Name used in the message; defaults to ``hydra.job.config_name``.
    """

    def __init__(self, trainer_modes: Iterable[str], provides: str = "", recipe: str | None = None) -> None:
        self.trainer_modes = tuple(str(m) for m in trainer_modes)
        self.provides = str(provides)
        self.recipe = recipe

    def check(self, config: Mapping[str, Any]) -> None:
        """Raise ``SystemExit`` with the one-line refusal, if any."""
        recipe = self.recipe or str(value_at(config, "hydra.job.config_name", "this recipe"))
        message = refusal(config, recipe, self.trainer_modes, self.provides)
        if message is not None:
            raise SystemExit(message)

    def on_job_start(self, config: Mapping[str, Any], **kwargs: Any) -> None:
        """Hydra hook: runs on the composed config before the task function (verl's ``main``)."""
        self.check(config)
