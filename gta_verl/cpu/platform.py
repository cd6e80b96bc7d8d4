"""verl device platform ``cpu``: stock ``main_ppo`` on a machine without an accelerator.

Load it in every verl process with ``VERL_USE_EXTERNAL_MODULES=gta_verl.cpu.platform`` and select
it with ``VERL_PLATFORM=cpu`` (both also in the Ray workers' ``runtime_env``; ``recipes/cpu/run.sh``
sets them). ``verl/__init__.py`` imports the module before the ``verl.plugins`` entry points, so the
platform is registered before anything freezes the platform choice (docs/verl_on_cpu.md, obstacle 10).
Do not import this module before ``verl`` itself.

What the platform answers (docs/verl_on_cpu.md, obstacles 1, 2, 4):

* device ``cpu``, ``current_device()`` = ``"cpu"`` so verl's ``.to(get_device_id())`` stays on CPU;
* Ray resource ``"GPU"``: verl's worker pools count only ``GPU``/``NPU``; the recipes start Ray with
  one *logical* GPU (``num_gpus=1``) that stands for the CPU training slot;
* communication backend ``gloo``;
* ``device_module``: :class:`CPUDeviceModule`, the ``torch.cuda``-shaped calls verl makes
  (``empty_cache``, ``mem_get_info``, RNG state …) answered for the host.

The two wraps of verl functions (gloo backend string, no pinned memory for the reference model)
live in :mod:`gta_verl.verl_compat_cpu` and are installed here, i.e. only behind this switch.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import torch

from gta_verl.verl_compat_cpu import PlatformBase, PlatformRegistry, install_cpu_wraps

PLATFORM_NAME = "cpu"


def _host_memory() -> tuple[int, int]:
    """(available, total) bytes of host memory."""
    try:
        import psutil

        vm = psutil.virtual_memory()
        return int(vm.available), int(vm.total)
    except ImportError:  # pragma: no cover - psutil ships with ray
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        return pages * size, pages * size


class CPUDeviceModule(ModuleType):
    """``torch.cuda``-shaped namespace for the host; unknown names fall through to ``torch.cpu``.

    ``is_available()`` is False on purpose: verl then skips its accelerator-only paths
    (memory statistics, ``set_per_process_memory_fraction``, CUDA-IPC weight transfer).
    """

    def __init__(self) -> None:
        super().__init__("gta_verl_cpu_device")

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)

    @staticmethod
    def is_available() -> bool:
        return False

    @staticmethod
    def current_device() -> str:
        return "cpu"

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def set_device(device: Any) -> None:
        return None

    @staticmethod
    def synchronize(device: Any = None) -> None:
        return None

    @staticmethod
    def empty_cache() -> None:
        return None

    @staticmethod
    def ipc_collect() -> None:
        return None

    @staticmethod
    def mem_get_info(device: Any = None) -> tuple[int, int]:
        return _host_memory()

    @staticmethod
    def memory_allocated(device: Any = None) -> int:
        return 0

    memory_reserved = max_memory_allocated = max_memory_reserved = memory_allocated

    @staticmethod
    def reset_peak_memory_stats(device: Any = None) -> None:
        return None

    reset_accumulated_memory_stats = reset_peak_memory_stats

    @staticmethod
    def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
        return None

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return "cpu"

    @staticmethod
    def get_rng_state(device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed


_DEVICE_MODULE = CPUDeviceModule()


@PlatformRegistry.register(platform=PLATFORM_NAME)
class PlatformCPU(PlatformBase):
    """verl platform for host CPUs (training over gloo, rollout on ``hf_cpu``)."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> ModuleType:
        return _DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        # Auto-detection probes registered platforms in order (nvidia, npu, rocm, then us):
        # the CPU is always there, so it is picked only when no accelerator platform was.
        return True

    def current_device(self) -> str:  # type: ignore[override]
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        # Ray sets it for the logical GPU; torch's CPU build ignores it.
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):  # abstract signature
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None


install_cpu_wraps()
