"""Every gta-verl name resolves in verl's registries after a plain ``import verl``.

verl loads the ``verl.plugins`` entry point during ``import verl`` and swallows plugin
errors, so a broken registration would otherwise only show up as "unknown reward manager"
deep inside a Ray worker. Each check runs in a fresh interpreter (a subprocess) so that
nothing the test process imported earlier can register the names instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import entry_points

import pytest

from gta_verl.verl_plugins import REGISTERED_NAMES

# Looks names up in verl's own registries; imports nothing from gta_verl before verl.
_PROBE = r"""
import json, sys
{first_import}
from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
from verl.experimental.reward_loop.reward_manager.registry import REWARD_MANAGER
from verl.trainer.distillation.losses import DISTILLATION_LOSS_REGISTRY
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY
from verl.workers.rollout.base import _ROLLOUT_REGISTRY
from verl.workers.rollout.replica import RolloutReplicaRegistry
import gta_verl.verl_plugins as plugins

# A rollout backend needs both halves: the replica (driver side) and the in-worker adapter.
rollouts = {n for n in RolloutReplicaRegistry._registry if (n, "async") in _ROLLOUT_REGISTRY}

registries = {
    "reward_manager": REWARD_MANAGER,
    "agent_loop": _agent_loop_registry,
    "adv_estimator": ADV_ESTIMATOR_REGISTRY,
    "distillation_loss": DISTILLATION_LOSS_REGISTRY,
    "trainer": TRAINER_REGISTRY,
    "rollout": rollouts,
}
found = {kind: {n: n in registries[kind] for n in names} for kind, names in plugins.REGISTERED_NAMES.items()}
print(json.dumps({"found": found, "loaded": plugins.LOADED}))
"""


def _probe(first_import: str) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VERL_USE_EXTERNAL_PLUGINS", "VERL_USE_EXTERNAL_MODULES")
    }
    env.setdefault("HF_HUB_OFFLINE", "1")
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE.replace("{first_import}", first_import)],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def after_import_verl() -> dict:
    return _probe("import verl")


def test_entry_point_declared():
    names = {ep.name: ep.value for ep in entry_points(group="verl.plugins")}
    assert names.get("gta_verl") == "gta_verl.verl_plugins", (
        "reinstall gta-verl (pip install -e .) so the verl.plugins entry point is registered"
    )


@pytest.mark.parametrize(("kind", "name"), [(k, n) for k, names in REGISTERED_NAMES.items() for n in names])
def test_name_resolves_after_import_verl(after_import_verl, kind, name):
    assert after_import_verl["found"][kind][name], (
        f"{kind} {name!r} not registered after `import verl`; plugin modules loaded: "
        f"{after_import_verl['loaded']}"
    )


def test_names_resolve_when_compat_is_imported_first():
    """``gta_verl.verl_compat`` as the first importer of verl creates an import cycle
    (verl → plugin → managers → half-imported compat); its retry must still register."""
    out = _probe("import gta_verl.algos.advantages")
    assert out["found"]["reward_manager"]["trajectory_guided"]
    assert out["found"]["reward_manager"]["exact_match"]
    assert out["found"]["adv_estimator"]["gta_turn_grpo"]
