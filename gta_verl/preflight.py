"""Launch checks of a gta recipe, run by Hydra before verl's ``main_ppo`` starts Ray.

Every recipe YAML (``gta_verl/config/*.yaml``) declares a Hydra callback::

    hydra:
      callbacks:
        gta_preflight:
          _target_: gta_verl.preflight.GTAPreflight
          family: gta            # or gta_path_router

Hydra calls :meth:`GTAPreflight.on_run_start` with the composed config before it runs
``main_ppo``'s task function, i.e. before ``ray.init``, and the job runs the config as
modified there. That makes verl's own knob ``trainer.v1.trainer_mode`` safe on our recipes:

* a verl mode name (``sync``, ``colocate_async``, ``separate_async``) is mapped to this
  recipe's trainer in that mode (``gta_colocate_async``, ``gta_path_router_separate_async``
  …), so the evidence metrics and PathRouter's route weights are never silently lost to
  verl's stock trainer of the same name;
* combinations that cannot work (``separate_async`` on the CPU backend, verl's
  ``tool_agent`` with PathRouter or per-turn rewards) stop the launch with one line;
* the whole ``gta:`` node is read as :class:`gta_verl.config.GTAConfig`, so a misspelt key
  (``gta.reward.step_shapping``) stops the launch naming the valid ones, instead of being
  ignored by the section that would have read it;
* a policy name (:mod:`gta_verl.policies`, e.g. ``gemma-3-270m``) at a model path
  (``actor_rollout_ref.model.path``, a distillation teacher's ``model_path`` …, see
  :data:`MODEL_PATH_KEYS`) is replaced by its prepared directory (:func:`resolve_policy_names`),
  once, before any worker reads it — the way verl resolves ``model.path`` once in its model
  config. This is the only place a launch resolves a name: every recipe, CPU and GPU, passes
  ``MODEL_PATH`` through as given.

Any other name is left as given: the recipe's :class:`gta_verl.recipe_guard.RecipeGuard`
(``on_job_start``, after this callback) refuses every trainer the recipe does not list,
e.g. ``gta_sync`` on a PathRouter recipe, and verl's classic trainer.

The resolution is pure (:func:`resolve_trainer_mode`, :func:`check_agent_loop`); the
callback only reads and writes the config. Launches that bypass Hydra's run (tests that
``compose`` a config) call :func:`apply_preflight` themselves.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from hydra.experimental.callback import Callback

from gta_verl.strict_config import value_at

__all__ = [
    "FAMILIES",
    "VERL_MODES",
    "GTAPreflight",
    "ModeChoice",
    "MODEL_PATH_KEYS",
    "PreflightError",
    "apply_preflight",
    "check_agent_loop",
    "resolve_policy_names",
    "resolve_trainer_mode",
    "trainer_name",
]

#: verl 0.9.1's V1 trainer modes (``trainer.v1.trainer_mode``; ``trainer/ppo/v1/trainer_*.py``).
VERL_MODES = ("sync", "colocate_async", "separate_async")
#: Trainer families: ``gta`` (every recipe) and ``gta_path_router`` (PathRouter's trainer).
FAMILIES = ("gta", "gta_path_router")
#: Loops whose outputs carry gta's token tensors (turn spans → distill_mask, per-turn rm_scores).
GTA_AGENT_LOOP = "gta_search_agent"
#: Rollout backends that cannot feed standalone rollout replicas (separate_async).
_NO_STANDALONE_WEIGHT_SYNC = {
    "hf_cpu": (
        "verl's separate_async trainer syncs weights to standalone rollout replicas through a "
        "checkpoint engine other than naive (verl/trainer/ppo/v1/trainer_separate_async.py:64-70) "
        "and the hf_cpu backend has none; on CPU use trainer.v1.trainer_mode=colocate_async"
    ),
    "hf": (
        "verl's separate_async trainer syncs weights to standalone rollout replicas through a "
        "checkpoint engine other than naive (verl/trainer/ppo/v1/trainer_separate_async.py:64-70) "
        "and the hf backend has none; use trainer.v1.trainer_mode=sync or colocate_async"
    ),
}


#: Config keys that hold a model directory (verl's ``HFModelConfig`` ``path`` / ``tokenizer_path`` of the
#: actor and the critic); every ``distillation.teacher_models.<name>.model_path`` is one too.
MODEL_PATH_KEYS = (
    "actor_rollout_ref.model.path",
    "actor_rollout_ref.model.tokenizer_path",
    "critic.model.path",
    "critic.model.tokenizer_path",
)


class PreflightError(ValueError):
    """A launch that cannot run as configured; the message is one line naming the fix."""


@dataclass(frozen=True)
class ModeChoice:
    """The trainer a launch runs.

    Attributes:
        requested: ``trainer.v1.trainer_mode`` as given.
        trainer: The registered trainer name to run.
        mode: The verl mode it runs in (None for a trainer gta does not know).
    """

    requested: str
    trainer: str
    mode: str | None

    @property
    def mapped(self) -> bool:
        """True when a verl mode name was replaced by this recipe's trainer."""
        return self.trainer != self.requested


def trainer_name(family: str, mode: str) -> str:
    """Registered name of ``family``'s trainer in verl ``mode`` (``gta_path_router_sync`` …)."""
    if family not in FAMILIES or mode not in VERL_MODES:
        raise ValueError(f"unknown trainer family {family!r} or verl mode {mode!r}")
    return f"{family}_{mode}"


def _known_trainers() -> dict[str, tuple[str, str]]:
    return {trainer_name(f, m): (f, m) for f in FAMILIES for m in VERL_MODES}


def resolve_trainer_mode(family: str, requested: str, rollout_name: str = "") -> ModeChoice:
    """Which trainer a recipe of ``family`` runs for ``trainer.v1.trainer_mode=requested``.

    Args:
        family: The recipe's trainer family (a key of :data:`FAMILIES`).
        requested: The configured ``trainer.v1.trainer_mode``.
        rollout_name: ``actor_rollout_ref.rollout.name`` (some backends cannot run every mode).

    Returns:
        The :class:`ModeChoice`; any name but a verl mode is kept (``mode`` None for a name
        that is not this family's: the recipe guard refuses it).

    Raises:
        PreflightError: a mode the rollout backend cannot run.
    """
    if family not in FAMILIES:
        raise ValueError(f"unknown trainer family {family!r}; expected one of {sorted(FAMILIES)}")
    known = _known_trainers()
    if requested in VERL_MODES:
        choice = ModeChoice(requested, trainer_name(family, requested), requested)
    elif known.get(requested, ("", ""))[0] == family:
        choice = ModeChoice(requested, requested, known[requested][1])
    else:
        return ModeChoice(requested, requested, None)
    reason = _NO_STANDALONE_WEIGHT_SYNC.get(rollout_name) if choice.mode == "separate_async" else None
    if reason:
        raise PreflightError(f"gta_verl: trainer.v1.trainer_mode={requested} cannot run: {reason}")
    return choice


def check_agent_loop(family: str, agent_loop: str, place_turn_rewards: bool) -> None:
    """Refuse settings that need ``gta_search_agent``'s outputs with another default loop.

    PathRouter's teacher KL mask (``distill_mask``) and the opt-in per-turn ``rm_scores``
    are built by ``gta_search_agent``'s output class from its turn spans; verl's
    ``tool_agent`` returns a plain ``AgentLoopOutput`` without them.

    Raises:
        PreflightError: naming the setting and the loop to use.
    """
    if agent_loop == GTA_AGENT_LOOP:
        return
    if family == "gta_path_router":
        raise PreflightError(
            f"gta_verl: PathRouter needs actor_rollout_ref.rollout.agent.default_agent_loop={GTA_AGENT_LOOP} "
            f"(its teacher-KL mask comes from that loop's turn spans), not {agent_loop}"
        )
    if place_turn_rewards:
        raise PreflightError(
            f"gta_verl: gta.agent.place_turn_rewards=true needs default_agent_loop={GTA_AGENT_LOOP} "
            f"(it places the per-turn rewards), not {agent_loop}"
        )


def _model_path_keys(config: Any) -> list[str]:
    from omegaconf import OmegaConf

    teachers = OmegaConf.select(config, "distillation.teacher_models", default=None)
    names = list(teachers.keys()) if OmegaConf.is_dict(teachers) else []
    return [*MODEL_PATH_KEYS, *(f"distillation.teacher_models.{n}.model_path" for n in names)]


def resolve_policy_names(config: Any) -> dict[str, str]:
    """Replace each policy name at a model-path key of ``config`` by its prepared directory.

    A key set by interpolation (the PathRouter YAML's teacher ``${actor_rollout_ref.model.path}``)
    follows its source; a path, a hub id or anything else that is no policy name is left as given.
    Each name is prepared once (:func:`gta_verl.policies.resolve_model`: the first time about a
    minute, then a manifest check).

    Returns:
        ``{key: directory}`` for every key replaced.

    Raises:
        PreflightError: the policy's directory cannot be prepared (one line naming the key).
    """
    from omegaconf import OmegaConf, read_write

    from gta_verl.policies import policy_name, resolve_model
    from gta_verl.policies.model_dir import ModelDirError

    resolved: dict[str, str] = {}
    replaced: dict[str, str] = {}
    for key in _model_path_keys(config):
        parent_key, leaf = key.rsplit(".", 1)
        parent = OmegaConf.select(config, parent_key, default=None)
        if not OmegaConf.is_dict(parent) or leaf not in parent or OmegaConf.is_interpolation(parent, leaf):
            continue
        value = parent[leaf]
        if not isinstance(value, str) or policy_name(value) is None:
            continue
        if value not in resolved:
            try:
                resolved[value] = resolve_model(value)
            except (ModelDirError, ImportError, OSError) as exc:
                raise PreflightError(f"gta_verl: {key}={value}: {' '.join(str(exc).split())}") from None
        with read_write(config):
            parent[leaf] = resolved[value]
        replaced[key] = resolved[value]
    return replaced


def apply_preflight(config: Any, family: str) -> ModeChoice:
    """Check ``config`` (a composed recipe config), set the trainer the job runs and resolve policy names.

    Returns:
        The :class:`ModeChoice`; ``config.trainer.v1.trainer_mode`` is its ``trainer``, and each
        policy name at a model path is its directory (:func:`resolve_policy_names`).

    Raises:
        PreflightError: an invalid ``gta:`` node, a policy that cannot be prepared, or see
            :func:`resolve_trainer_mode` and :func:`check_agent_loop`.
    """
    from omegaconf import read_write

    from gta_verl.config import GTAConfig

    try:
        GTAConfig.from_trainer_config(config)
    except (TypeError, ValueError) as exc:
        raise PreflightError(f"gta_verl: {' '.join(str(exc).split())}") from None
    rollout = config.actor_rollout_ref.rollout
    choice = resolve_trainer_mode(family, str(config.trainer.v1.trainer_mode), str(rollout.get("name", "")))
    agent = rollout.get("agent") or {}
    gta_agent = value_at(config, "gta.agent.place_turn_rewards", False)
    check_agent_loop(family, str(agent.get("default_agent_loop", GTA_AGENT_LOOP)), bool(gta_agent))
    if choice.mapped:
        with read_write(config):
            config.trainer.v1.trainer_mode = choice.trainer
    resolve_policy_names(config)  # last: a launch refused above never spends a minute preparing
    return choice


class GTAPreflight(Callback):
    """Hydra callback of every recipe YAML (see the module docstring).

    Args:
        family: The recipe's trainer family, ``gta`` or ``gta_path_router``.
    """

    def __init__(self, family: str) -> None:
        if family not in FAMILIES:
            raise ValueError(f"gta_preflight.family={family!r}; expected one of {sorted(FAMILIES)}")
        self.family = family

    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        """Map the mode or stop the launch; Hydra swallows exceptions, so exit explicitly."""
        try:
            choice = apply_preflight(config, self.family)
        except PreflightError as exc:
            raise SystemExit(str(exc)) from None
        if choice.mapped:
            print(
                f"gta_verl: trainer.v1.trainer_mode={choice.requested} runs {choice.trainer} "
                f"(this recipe's trainer in verl's {choice.mode} mode)",
                file=sys.stderr,
            )
