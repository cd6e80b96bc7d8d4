"""Warm start (ii) for a pretrained policy: stock ``verl.trainer.sft_trainer`` from the policy's own weights.

The quick warm start stands in for the pretrained policy (Gemma-3-270M takes minutes per SFT step on 2
cores): :func:`experiments.learning.policy_sft.build_policy_sft` replays τ* in its tokenizer, runs verl's SFT
for 2 steps from its weights and exports fp32; a second call with the same settings reuses the build.
Marked ``verl_e2e`` (CI runs it).
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.verl_e2e


def test_sft_starts_from_the_policy_and_moves_it(tmp_path) -> None:
    import torch
    from safetensors.torch import load_file

    from experiments.learning.policy_sft import PolicySFTSettings, build_policy_sft
    from gta_verl.cpu.prepare import default_root, ensure_kb
    from gta_verl.cpu.warm_start import QUICK, build_warm_start

    kb = ensure_kb(default_root() / "kb_musique")
    ws = build_warm_start(kb, settings=QUICK)
    s = PolicySFTSettings(steps=2, batch_size=4, micro_batch=2, lr=1e-3, max_rows=8, val_rows=4)
    model = build_policy_sft(ws.model, ws.train, ws.heldout, kb, tmp_path / "sft", s)

    report = json.loads((tmp_path / "sft" / "policy_sft.json").read_text())
    assert report["train"]["rows"] == 8 and report["val"]["rows"] == 4
    assert report["train"]["answered"] == 8 and report["train"]["truncated"] == 0
    assert json.loads((model / "config.json").read_text())["torch_dtype"] == "float32"
    before, after = load_file(ws.model / "model.safetensors"), load_file(model / "model.safetensors")
    assert before.keys() == after.keys()
    assert all(before[k].shape == after[k].shape for k in before)
    # AdamW at 1e-3 (with weight decay) moves every trained tensor
    moved = [k for k in before if not torch.equal(before[k], after[k])]
    assert len(moved) == len(before), sorted(set(before) - set(moved))[:5]

    stamp = (model / "model.safetensors").stat().st_mtime_ns
    assert build_policy_sft(ws.model, ws.train, ws.heldout, kb, tmp_path / "sft", s) == model
    assert (model / "model.safetensors").stat().st_mtime_ns == stamp  # reused, not retrained
