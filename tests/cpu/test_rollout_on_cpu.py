"""``hf_cpu`` rollout: the Ray server actor, the replica and the in-worker weight-sync adapter.

Runs the real pieces verl drives: :class:`HFCPUReplica.launch_servers` starts the server actor,
the server's ``generate`` answers a ``TokenOutput`` with an int ``global_steps``, and
:class:`HFCPUServerAdapter.update_weights` (what verl's actor worker calls on a weight sync)
makes the server generate with the pushed weights.
"""

from __future__ import annotations

import asyncio
import os

import pytest
import torch

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def ray_local():
    started = not ray.is_initialized()
    if started:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    if started:
        ray.shutdown()


def _rollout_config():
    from verl.workers.config import RolloutConfig

    return RolloutConfig(
        name="hf_cpu", mode="async", response_length=8, prompt_length=64, tensor_model_parallel_size=1, seed=0
    )


@pytest.fixture(scope="module")
def replica(ray_local, model_path):
    from omegaconf import OmegaConf

    from gta_verl.cpu.rollout import HFCPUReplica

    rep = HFCPUReplica(
        replica_rank=0,
        config=_rollout_config(),
        model_config=OmegaConf.create({"path": model_path}),
        gpus_per_node=1,
    )
    asyncio.run(rep.launch_servers())
    yield rep
    ray.kill(rep.server_handle)


GREEDY = {"temperature": 0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}


def test_registered_by_name():
    import verl  # noqa: F401 - loads the verl.plugins entry point
    from verl.workers.rollout.base import get_rollout_class
    from verl.workers.rollout.replica import get_rollout_replica_class

    from gta_verl.cpu.rollout import HFCPUReplica, HFCPUServerAdapter

    assert get_rollout_replica_class("hf_cpu") is HFCPUReplica
    assert get_rollout_class("hf_cpu", "async") is HFCPUServerAdapter


def test_server_generate_returns_int_global_steps(replica):
    out = ray.get(
        replica.server_handle.generate.remote(
            prompt_ids=[151644, 872, 198, 9707], sampling_params={**GREEDY, "max_tokens": 5}, request_id="r0"
        )
    )
    assert len(out.token_ids) == 5 and len(out.log_probs) == 5
    assert out.extra_fields["global_steps"] == 0  # an int before the first sync (V1 builds an int array)
    assert replica.server_address == "hf_cpu_server_0"
    assert replica.servers == [replica.server_handle]


def test_weight_update_reaches_the_server(replica, model_path, monkeypatch):
    from transformers import AutoModelForCausalLM
    from verl.workers.config import HFModelConfig

    from gta_verl.cpu.rollout import HFCPUServerAdapter

    monkeypatch.setitem(os.environ, "RANK", "0")
    adapter = HFCPUServerAdapter(_rollout_config(), HFModelConfig(path=model_path), device_mesh=None)
    prompt = [151644, 872, 198, 9707]
    before = ray.get(
        replica.server_handle.generate.remote(
            prompt_ids=prompt, sampling_params={**GREEDY, "max_tokens": 4}, request_id="a"
        )
    )

    # The "actor" after a step: every weight scaled, so greedy log-probs must change.
    policy = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    with torch.no_grad():
        for p in policy.parameters():
            p.mul_(1.5)
    weights = ((n, t) for n, t in policy.state_dict().items() if n != "lm_head.weight")  # tied, as FSDP sends
    asyncio.run(adapter.update_weights(weights, global_steps=3))

    after = ray.get(
        replica.server_handle.generate.remote(
            prompt_ids=prompt, sampling_params={**GREEDY, "max_tokens": 4}, request_id="b"
        )
    )
    assert after.extra_fields["global_steps"] == 3
    assert ray.get(replica.server_handle.state.remote())["weight_updates"] == 1
    # Expected: the updated policy's own greedy continuation and its log-probs (plain forward pass).
    ids = torch.tensor([prompt + after.token_ids])
    with torch.no_grad():
        logits = policy(input_ids=ids).logits[0, len(prompt) - 1 : -1]
    assert after.token_ids == logits.argmax(-1).tolist()
    expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(after.token_ids)[:, None]).squeeze(-1)
    assert torch.allclose(torch.tensor(after.log_probs), expected, atol=1e-4)
    assert not torch.allclose(torch.tensor(after.log_probs), torch.tensor(before.log_probs))


def test_partial_weight_sync_is_refused(replica):
    with pytest.raises(ray.exceptions.RayTaskError, match="missing"):
        ray.get(replica.server_handle.load_weights.remote({"model.norm.weight": torch.ones(64)}))


def test_concurrent_requests_share_one_batched_call(replica):
    """Eight turns sent at once are served in fewer than eight model calls, each row its own greedy result."""
    prompts = [[151644, 872, 198, 9707 + k] for k in range(8)]
    singles = [
        ray.get(
            replica.server_handle.generate.remote(
                prompt_ids=p, sampling_params={**GREEDY, "max_tokens": 3 + k % 3}, request_id=f"s{k}"
            )
        )
        for k, p in enumerate(prompts)
    ]
    calls_before = len(ray.get(replica.server_handle.state.remote())["batches"])
    refs = [
        replica.server_handle.generate.remote(
            prompt_ids=p, sampling_params={**GREEDY, "max_tokens": 3 + k % 3}, request_id=f"c{k}"
        )
        for k, p in enumerate(prompts)
    ]
    together = ray.get(refs)
    batches = ray.get(replica.server_handle.state.remote())["batches"][calls_before:]
    assert sum(batches) == 8 and len(batches) < 8 and max(batches) > 1
    for one, many in zip(singles, together, strict=True):
        assert many.token_ids == one.token_ids
        assert torch.allclose(torch.tensor(many.log_probs), torch.tensor(one.log_probs), atol=1e-4)
