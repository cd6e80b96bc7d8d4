"""verl internals the CPU platform needs, and the two wraps that get verl 0.9.1 onto a CPU.

Why a second adapter module next to :mod:`gta_verl.verl_compat`: the CPU platform must be
registered *before* anything calls ``verl.plugin.platform.get_platform()``, which freezes the
platform for the process (``verl/trainer/constants_ppo.py:26`` calls it at import). It is
therefore loaded through ``VERL_USE_EXTERNAL_MODULES``, which ``verl/__init__.py`` runs while
verl itself is still importing, before the ``verl.plugins`` entry points. ``verl_compat`` imports
the agent-loop and trainer modules (and through them ``constants_ppo``), so importing it from the
platform would freeze the platform to ``nvidia`` first. This module imports only verl modules that
``verl/__init__`` has already loaded (the platform registry, ``verl.utils.distributed``).

Everything here is active only behind the CPU switch: :func:`install_cpu_wraps` is called by
:mod:`gta_verl.cpu.platform`, i.e. only in processes that load the CPU platform.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import logging
import sys
from collections.abc import Callable
from typing import Any

from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry

logger = logging.getLogger(__name__)

#: verl module holding the FSDP2 engine; it binds ``CPUOffloadPolicy`` at import.
FSDP_ENGINE_MODULE = "verl.workers.engine.fsdp.transformer_impl"
#: verl module holding ``initialize_global_process_group_ray``.
DISTRIBUTED_MODULE = "verl.utils.distributed"

__all__ = ["PlatformBase", "PlatformRegistry", "install_cpu_wraps", "after_import"]


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Runs a hook right after one named module finishes executing (keeps heavy imports lazy)."""

    def __init__(self, name: str, hook: Callable[[Any], None]) -> None:
        self.name, self.hook = name, hook

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # find the real spec without recursing into ourselves
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        loader, hook = spec.loader, self.hook

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec: Any) -> Any:
                return loader.create_module(spec)

            def exec_module(self, module: Any) -> None:
                loader.exec_module(module)
                hook(module)

        spec.loader = _Loader()
        sys.meta_path.remove(self)  # one module, once
        return spec


def after_import(name: str, hook: Callable[[Any], None]) -> None:
    """Call ``hook(module)`` once ``name`` is imported (now, if it already is)."""
    if name in sys.modules:
        hook(sys.modules[name])
    else:
        sys.meta_path.insert(0, _PostImportFinder(name, hook))


def _wrap_gloo_backend(module: Any) -> None:
    """Default process-group backend ``"gloo"`` instead of ``"cpu:gloo,cpu:gloo"``.

    ``initialize_global_process_group_ray`` (``utils/distributed.py:89``) builds the backend
    string ``f"cpu:gloo,{device}:{backend}"``; with device ``cpu`` torch rejects it ("Duplicate
    device type cpu"). Upstream fix that removes this wrap: skip the second entry when the device
    is ``cpu`` (or let the platform supply the whole backend string).
    """
    original = module.initialize_global_process_group_ray
    if getattr(original, "_gta_cpu_wrapped", False):
        return

    def initialize_global_process_group_ray(timeout_second: Any = None, backend: Any = None) -> Any:
        return original(timeout_second=timeout_second, backend=backend or "gloo")

    initialize_global_process_group_ray._gta_cpu_wrapped = True  # type: ignore[attr-defined]
    module.initialize_global_process_group_ray = initialize_global_process_group_ray
    _wrap_spmd_gloo(module)


def _wrap_spmd_gloo(module: Any) -> None:
    """The SPMD SFT trainer's ``initialize_global_process_group`` on plain ``"gloo"``.

    ``utils/distributed.py:63`` hard-codes ``f"cpu:gloo,{device}:{nccl}"`` (no backend argument), which
    torch rejects on a CPU ("Duplicate device type cpu"). ``trainer/sft_trainer.py:453`` imports the
    function when ``run_sft`` is called, so replacing the module attribute is enough. Upstream fix that
    removes this wrap: the same device check as above.
    """
    import os
    from datetime import timedelta

    if getattr(module.initialize_global_process_group, "_gta_cpu_wrapped", False):
        return

    def initialize_global_process_group(timeout_second: int = 36000) -> tuple[int, int, int]:
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group(
                backend="gloo",
                timeout=timedelta(seconds=timeout_second),
                init_method=os.environ.get("DIST_INIT_METHOD", None),
            )
        return int(os.environ["LOCAL_RANK"]), int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])

    initialize_global_process_group._gta_cpu_wrapped = True  # type: ignore[attr-defined]
    module.initialize_global_process_group = initialize_global_process_group


def _wrap_no_pin_memory(module: Any) -> None:
    """The FSDP2 engine's ``CPUOffloadPolicy`` never pins memory.

    ``transformer_impl.py:462`` builds the reference model (``forward_only``) with
    ``CPUOffloadPolicy(pin_memory=True)``; pinning needs an accelerator. Upstream fix that removes
    this wrap: ``pin_memory=get_platform().is_pin_memory_supported()`` (or an engine config flag).
    """
    base = module.CPUOffloadPolicy
    if base is None or getattr(base, "_gta_cpu_wrapped", False):
        return

    class CPUOffloadPolicyNoPin(base):  # type: ignore[misc, valid-type]
        _gta_cpu_wrapped = True

        def __init__(self, pin_memory: bool = True, **kwargs: Any) -> None:
            super().__init__(pin_memory=False, **kwargs)

    module.CPUOffloadPolicy = CPUOffloadPolicyNoPin


def install_cpu_wraps() -> None:
    """Install both wraps (idempotent). Called only by the CPU platform module."""
    after_import(DISTRIBUTED_MODULE, _wrap_gloo_backend)
    after_import(FSDP_ENGINE_MODULE, _wrap_no_pin_memory)
