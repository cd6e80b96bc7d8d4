"""``hf`` rollout: device/dtype choice, Ray options, registration, and the GPU wiring run on CPU.

The pure halves (:func:`gta_verl.cpu.devices.rollout_device`, :func:`~gta_verl.cpu.devices.server_options`)
are checked both ways by hand. The wiring is run for real on a CPU Ray cluster that advertises one
logical GPU: an ``hf`` replica whose training worker holds "GPU 0" starts its server pinned to that
worker's node with ``CUDA_VISIBLE_DEVICES=0`` and Ray told not to rewrite it; with no CUDA device in
the process, the server falls back to the host in float32 (what ``hf_cpu`` always does). The
``gpu``-marked test loads the server on a real GPU and skips on CPU machines.
"""

from __future__ import annotations

import asyncio

import pytest
import torch

from gta_verl.cpu.devices import RAY_NOSET_CUDA, rollout_device, server_options, torch_dtype_name

GREEDY = {"temperature": 0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
PROMPT = [151644, 872, 198, 9707]


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [
        ("bfloat16", "bfloat16"),
        ("bf16", "bfloat16"),
        ("fp16", "float16"),
        ("torch.float32", "float32"),
        (None, "bfloat16"),
    ],
)
def test_cuda_available_gives_cuda_and_the_actor_dtype(dtype, expected):
    assert rollout_device(True, True, dtype) == ("cuda", expected)


@pytest.mark.parametrize("dtype", ["bfloat16", "fp16", None])
def test_no_cuda_gives_cpu_float32(dtype):
    assert rollout_device(True, False, dtype) == ("cpu", "float32")


def test_hf_cpu_stays_on_the_host_even_with_a_gpu():
    assert rollout_device(False, True, "bfloat16") == ("cpu", "float32")


@pytest.mark.parametrize(
    ("host", "expected"), [("bf16", "bfloat16"), ("float32", "float32"), (None, "float32")]
)
def test_the_host_dtype_knob_sets_the_host_dtype_only(host, expected):
    """``rollout.engine_kwargs.hf_cpu.dtype``: the host's dtype; the accelerator keeps ``rollout.dtype``."""
    assert rollout_device(False, False, "fp16", host) == ("cpu", expected)
    assert rollout_device(True, True, "fp16", host) == ("cuda", "float16")


def test_unknown_dtype_is_refused():
    with pytest.raises(ValueError, match="int8"):
        torch_dtype_name("int8")


def test_server_options_without_a_gpu_ask_for_none():
    assert server_options("hf_server_0", 1064) == {
        "name": "hf_server_0",
        "num_cpus": 1,
        "num_gpus": 0,
        "max_concurrency": 1064,
    }


def test_server_options_with_a_gpu_share_the_workers_device():
    opts = server_options("hf_server_1", 1064, ["3"], node_id="n1")
    assert opts == {
        "name": "hf_server_1",
        "num_cpus": 1,
        "num_gpus": 0,  # verl's placement groups hold every GPU: a Ray GPU request would never schedule
        "max_concurrency": 1064,
        "node_id": "n1",
        "runtime_env": {"env_vars": {RAY_NOSET_CUDA: "1", "CUDA_VISIBLE_DEVICES": "3"}},
    }
    with pytest.raises(ValueError, match="node id"):
        server_options("hf_server_1", 1064, ["3"])


def test_hf_registered_by_name():
    import verl  # noqa: F401 - loads the verl.plugins entry point
    from verl.workers.rollout.base import get_rollout_class
    from verl.workers.rollout.replica import get_rollout_replica_class

    from gta_verl.cpu.rollout import HFReplica, HFServerAdapter, server_actor_name

    assert get_rollout_replica_class("hf") is HFReplica
    assert get_rollout_class("hf", "async") is HFServerAdapter
    assert server_actor_name(2, "_t", "hf") == "hf_server_2_t"


class _MetaModel:
    """Stands for a model on an accelerator: records where ``generate`` received its inputs."""

    device = torch.device("meta")

    def __init__(self) -> None:
        self.seen: list[str] = []

    def generate(self, input_ids, attention_mask, **kwargs):
        self.seen += [input_ids.device.type, attention_mask.device.type]
        raise RuntimeError("recorded")


def test_batched_generation_moves_its_inputs_to_the_models_device():
    from gta_verl.llm.hf_batch_generate import hf_generate_batch
    from gta_verl.llm.hf_generate import hf_generate

    class Tok:
        pad_token_id, eos_token_id = 0, 1

    for call in (
        lambda m: hf_generate_batch(m, Tok(), [[5, 6], [7]], {"temperature": 0}, [3, 3], 3),
        lambda m: hf_generate(m, Tok(), [5, 6], {"temperature": 0}, 3),
    ):
        model = _MetaModel()
        with pytest.raises(RuntimeError, match="recorded"):
            call(model)
        assert model.seen == ["meta", "meta"]


ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def ray_one_logical_gpu():
    if ray.is_initialized():
        pytest.skip("needs its own Ray cluster with one logical GPU")
    ray.init(address="local", num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _replica(model_path, workers):
    from omegaconf import OmegaConf
    from verl.workers.config import RolloutConfig

    from gta_verl.cpu.rollout import HFReplica

    config = RolloutConfig(
        name="hf", mode="async", response_length=8, prompt_length=64, tensor_model_parallel_size=1, seed=0
    )
    rep = HFReplica(
        replica_rank=0, config=config, model_config=OmegaConf.create({"path": model_path}), gpus_per_node=1
    )
    rep.workers = workers
    return rep


def test_hf_replica_pins_its_server_to_the_workers_gpu(ray_one_logical_gpu, model_path):
    import os

    @ray.remote(num_gpus=1, num_cpus=0)
    class TrainingWorker:  # what verl's FSDP worker is to Ray: an actor holding GPU 0
        def ping(self) -> int:
            return 1

    worker = TrainingWorker.remote()
    ray.get(worker.ping.remote())
    rep = _replica(model_path, [worker])
    asyncio.run(rep.launch_servers())
    server = rep.server_handle
    try:
        env = ray.get(
            server.__ray_call__.remote(
                lambda self: (os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get(RAY_NOSET_CUDA))
            )
        )
        assert env == ("0", "1")
        assert rep.server_address == "hf_server_0"
        state = ray.get(server.state.remote())
        assert (state["device"], state["dtype"]) == ("cpu", "float32")  # no CUDA in this process
        out = ray.get(
            server.generate.remote(
                prompt_ids=PROMPT, sampling_params={**GREEDY, "max_tokens": 3}, request_id="r"
            )
        )
        assert len(out.token_ids) == 3 and out.extra_fields["global_steps"] == 0
    finally:
        ray.kill(server)
        ray.kill(worker)


def test_hf_replica_without_workers_asks_for_no_gpu(ray_one_logical_gpu, model_path):
    import time

    deadline = time.monotonic() + 30
    while ray.available_resources().get("GPU") != 1.0 and time.monotonic() < deadline:
        time.sleep(0.2)  # the previous test's killed worker gives its GPU back asynchronously
    rep = _replica(model_path, [])
    asyncio.run(rep.launch_servers())
    try:
        # The one logical GPU stays free: the server neither took it nor waits for it.
        assert ray.available_resources().get("GPU") == 1.0
        assert ray.get(rep.server_handle.state.remote())["device"] == "cpu"
    finally:
        ray.kill(rep.server_handle)


@pytest.mark.gpu
def test_server_generates_on_cuda_in_the_actor_dtype(model_path):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from transformers import AutoModelForCausalLM

    from gta_verl.cpu.server import HFRolloutServer

    server = HFRolloutServer(model_path, 8, seed=0, use_accelerator=True, dtype="bfloat16")
    assert (server.device, server.dtype) == ("cuda", "bfloat16")
    assert next(server.model.parameters()).device.type == "cuda"
    out = asyncio.run(server.generate(PROMPT, {**GREEDY, "max_tokens": 4}, request_id="g"))
    assert len(out.token_ids) == 4 and len(out.log_probs) == 4
    # A weight sync arrives as host float32 tensors (the adapter copies to the host).
    policy = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    state = {n: t for n, t in policy.state_dict().items() if n != "lm_head.weight"}
    assert asyncio.run(server.load_weights(state)) == len(state)
    assert next(server.model.parameters()).dtype == torch.bfloat16


def test_hf_cannot_run_separate_async():
    from gta_verl.preflight import PreflightError, resolve_trainer_mode

    with pytest.raises(PreflightError, match="hf backend"):
        resolve_trainer_mode("gta", "separate_async", "hf")
    assert resolve_trainer_mode("gta", "colocate_async", "hf").mode == "colocate_async"
