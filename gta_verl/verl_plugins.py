"""verl plugin entry point (``verl.plugins`` group → ``gta_verl = gta_verl.verl_plugins``).

``import verl`` imports this module in every process (driver, Ray workers), which
runs the registration decorators of the modules below. It must stay light: no GPU
work, no model loading at import time.

verl swallows plugin import errors (logged only at DEBUG), so every failure here
is logged at ERROR with the module name and its traceback, and ``tests/test_verl_plugins_on_cpu.py``
asserts that every name in :data:`REGISTERED_NAMES` resolves after a plain ``import verl``.
"""

from __future__ import annotations

import importlib
import logging
import sys

logger = logging.getLogger("gta_verl.verl_plugins")

#: Modules whose import registers gta-verl's pieces in verl's registries.
PLUGIN_MODULES: tuple[str, ...] = (
    "gta_verl.rewards.managers",  # reward loop: trajectory_guided, exact_match
    "gta_verl.rewards.path_router_manager",  # reward loop: path_router
    "gta_verl.agent.loop",  # agent loop: gta_search_agent
    "gta_verl.algos.advantages",  # advantage estimator: gta_turn_grpo
    "gta_verl.algos.shuffled_control",  # advantage estimator: gta_shuffled_grpo (the shuffled-reward control)
    "gta_verl.algos.distill_loss",  # distillation loss: gta_selective_topk_kl
    "gta_verl.algos.trainer",  # V1 trainers: gta_* and gta_path_router_* in every verl mode
    "gta_verl.cpu.rollout",  # rollout backends: hf_cpu (HF generate on CPU), hf (on the GPU if any)
)

#: registry kind → names that must resolve after ``import verl``.
REGISTERED_NAMES: dict[str, tuple[str, ...]] = {
    "reward_manager": ("trajectory_guided", "exact_match", "path_router"),
    "agent_loop": ("gta_search_agent",),
    "adv_estimator": ("gta_turn_grpo", "gta_shuffled_grpo"),
    "distillation_loss": ("gta_selective_topk_kl",),
    "trainer": tuple(
        f"{family}_{mode}"
        for family in ("gta", "gta_path_router")
        for mode in ("sync", "colocate_async", "separate_async")
    ),
    "rollout": ("hf_cpu", "hf"),
}

LOADED: dict[str, bool] = {}


def _compat_half_imported() -> bool:
    """True while ``gta_verl.verl_compat`` is mid-import (it imported verl, which imported us).

    Our plugin modules import names from ``verl_compat``; they cannot load until it
    finishes, and ``verl_compat`` re-runs the registration at its end. ``VERL_VERSION_PINNED``
    is assigned after all of its verl imports, so its absence marks the half-imported state.
    """
    compat = sys.modules.get("gta_verl.verl_compat")
    return compat is not None and not hasattr(compat, "VERL_VERSION_PINNED")


def _register_all() -> None:
    if _compat_half_imported():
        for name in PLUGIN_MODULES:
            LOADED[name] = False
        logger.debug("deferring gta-verl plugin registration until gta_verl.verl_compat is imported")
        return
    for name in PLUGIN_MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # verl logs a raised error at DEBUG only: say it where it shows
            LOADED[name] = False
            logger.error(
                "gta-verl plugin module %s failed to import: the names it registers are missing",
                name,
                exc_info=True,
            )
        else:
            LOADED[name] = True


_register_all()


def _register_resolvers() -> None:
    """``${gta_chat_template:…}`` for config values, in every process that imports verl."""
    try:
        from gta_verl.agent.chat_templates import register_resolver

        register_resolver()
    except Exception as exc:  # verl would swallow it silently
        logger.warning("gta-verl OmegaConf resolvers failed to register: %r", exc)


_register_resolvers()
