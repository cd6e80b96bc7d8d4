"""Where the Hugging Face rollout server runs: its device, dtype and Ray actor options (pure).

Two backends share one server (:mod:`gta_verl.cpu.server`):

* ``hf_cpu`` always generates on the host in float32, as verl's CPU platform trains;
* ``hf`` generates on the node's accelerator when the server process sees one, in the dtype the
  rollout is configured with (``rollout.dtype``: verl's default ``bfloat16`` matches the FSDP
  actor's default ``param_dtype``), and falls back to ``hf_cpu``'s choice where none is visible.

The Ray options never ask Ray for ``num_gpus``: verl's placement groups hold every GPU of the
training pool, so a request outside them would never be scheduled. Like verl's own vLLM server
(``vllm_async_server.py``, ``launch_servers``), the ``hf`` server instead runs on the node of the
training worker it serves and sees that worker's GPU (Ray told not to rewrite
``CUDA_VISIBLE_DEVICES``, which is set to the worker's device), sharing it with the FSDP actor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: Accepted spellings of a dtype (verl's short names and torch's) → torch attribute name.
_DTYPES = {
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp16": "float16",
    "float16": "float16",
    "half": "float16",
    "fp32": "float32",
    "float32": "float32",
    "float": "float32",
}

#: Ray's switch that leaves ``CUDA_VISIBLE_DEVICES`` as the actor's runtime env sets it.
RAY_NOSET_CUDA = "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"


def torch_dtype_name(dtype: str | None) -> str:
    """Torch attribute name of a dtype spelling (``None`` → ``"bfloat16"``, verl's default).

    Raises:
        ValueError: an unknown spelling.
    """
    key = "bfloat16" if dtype is None else str(dtype).removeprefix("torch.").lower()
    if key not in _DTYPES:
        raise ValueError(f"hf rollout: unknown dtype {dtype!r} (one of {sorted(_DTYPES)})")
    return _DTYPES[key]


def rollout_device(
    use_accelerator: bool, cuda_available: bool, actor_dtype: str | None, host_dtype: str | None = None
) -> tuple[str, str]:
    """``(device, dtype)`` of the rollout model.

    Args:
        use_accelerator: The backend may use an accelerator (``hf``; ``hf_cpu`` never does).
        cuda_available: ``torch.cuda.is_available()`` in the server process.
        actor_dtype: The rollout's configured dtype (``rollout.dtype``), any :data:`_DTYPES` spelling.
        host_dtype: The dtype on the host (``rollout.engine_kwargs.hf_cpu.dtype``); None is float32.

    Returns:
        ``("cuda", <actor dtype>)`` on an accelerator, otherwise ``("cpu", <host dtype>)``. float32 is the
        host default because bf16 matmuls are only fast where the CPU has bf16 units (AMX/AVX512-BF16:
        7.7x float32 for a 2048x640x2048 matmul on one such core, docs/policies.md) and slow elsewhere.
    """
    if use_accelerator and cuda_available:
        return "cuda", torch_dtype_name(actor_dtype)
    return "cpu", torch_dtype_name(host_dtype or "float32")


def server_options(
    name: str,
    max_concurrency: int,
    gpu_ids: Sequence[str] = (),
    node_id: str | None = None,
) -> dict[str, Any]:
    """Ray ``.options()`` of a rollout server actor (without the scheduling-strategy object).

    Args:
        name: The actor's name.
        max_concurrency: Concurrent calls (verl's replica computes it from ``max_num_seqs``).
        gpu_ids: Accelerator ids the training worker(s) of this replica hold on their node
            (``ray.get_runtime_context().get_accelerator_ids()["GPU"]``); empty: none or ``hf_cpu``.
        node_id: Ray node of those workers; the caller pins the actor there (hard node affinity).

    Returns:
        ``num_cpus=1, num_gpus=0`` always; with ``gpu_ids``, ``node_id`` and a runtime env that shows
        the server exactly those devices.
    """
    opts: dict[str, Any] = {
        "name": name,
        "num_cpus": 1,
        "num_gpus": 0,
        "max_concurrency": int(max_concurrency),
    }
    if gpu_ids:
        if node_id is None:
            raise ValueError("hf rollout: a server sharing a worker's GPU needs that worker's node id")
        opts["node_id"] = node_id
        env = {RAY_NOSET_CUDA: "1", "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in gpu_ids)}
        opts["runtime_env"] = {"env_vars": env}
    return opts
