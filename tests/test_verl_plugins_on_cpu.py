"""Every gta-verl name resolves in verl's registries after a plain ``import verl``.

verl loads the ``verl.plugins`` entry point during ``import verl`` and swallows plugin
errors, so a broken registration would otherwise only show up as "unknown reward manager"
deep inside a Ray worker. Each check runs in a fresh interpreter (a subprocess) so that
nothing the test process imported earlier can register the names instead.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import entry_points
from pathlib import Path

import pytest

import gta_verl
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


def _first_importers() -> list[str]:
    """Every gta_verl module that imports ``gta_verl.verl_compat`` at module level: each can be the
    first importer of verl in a process, while it is itself half-imported."""
    root = Path(gta_verl.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            names = [a.name for a in node.names] if isinstance(node, (ast.Import, ast.ImportFrom)) else []
            module = node.module if isinstance(node, ast.ImportFrom) else None
            if module == "gta_verl.verl_compat" or "gta_verl.verl_compat" in names:
                found.append(".".join(path.relative_to(root.parent).with_suffix("").parts))
                break
    return found


def test_every_name_resolves_whichever_module_imports_verl_first():
    """A module importing verl first runs verl's plugin loading while it is half-imported (verl →
    plugins → e.g. ``path_router_manager`` → ``from gta_verl.rewards.managers import …``); the retry in
    ``verl_compat`` and at the end of such a provider must still register every name."""
    modules = _first_importers()
    assert "gta_verl.rewards.managers" in modules and "gta_verl.algos.distill_loss" in modules
    with ThreadPoolExecutor(max_workers=2) as pool:  # a fresh interpreter each, two at a time
        outs = dict(zip(modules, pool.map(lambda m: _probe(f"import {m}"), modules), strict=True))
    missing = {
        m: sorted(
            f"{kind}:{name}" for kind, names in out["found"].items() for name, ok in names.items() if not ok
        )
        for m, out in outs.items()
    }
    assert not {m: v for m, v in missing.items() if v}, missing
