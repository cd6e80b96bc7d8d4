"""A verl SFT warm start for a pretrained policy: τ* replays in the policy's own tokens, verl's SFT trainer.

The 2-layer warm start (:mod:`gta_verl.cpu.warm_start`) trains a tokenizer and a random model first; a
pretrained policy (Gemma-3-270M, :mod:`gta_verl.policies`) brings both, so only the data and the trainer
remain:

1. replay every training question's τ* through the real ``gta_search_agent`` loop with the policy's
   tokenizer and the run's budgets (:func:`gta_verl.cpu.sft_data.replay_rows`): the rows carry exactly the
   tokens a GRPO rollout of that policy would, the loss on generated tokens only;
2. ``torchrun -m verl.trainer.sft_trainer`` from the policy's weights (the same CPU overrides as the 2-layer
   warm start, :func:`gta_verl.cpu.warm_start.sft_command`), exported as fp32.

The prompts keep the rows' own style: SFT teaches the protocol, so the few-shot examples are not needed and
a shorter prompt makes every later rollout cheaper.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gta_verl.cpu.warm_start import SFTSettings, WarmStart, layout, sft_command, sft_env

POLICY_SFT_VERSION = 1
COMPLETE = "policy_sft.json"


@dataclass(frozen=True)
class PolicySFTSettings:
    """Knobs of the SFT run; ``budgets`` = (prompt, response, observation) tokens of the replayed loop.

    ``max_rows`` keeps the first that many training questions (None: all); ``val_rows`` the first that many
    held-out ones for verl's validation loss (at least ``batch_size``: verl drops a partial batch);
    ``param_dtype`` is FSDP2's compute dtype over fp32 master weights.
    """

    steps: int = 40
    batch_size: int = 4
    micro_batch: int = 2
    lr: float = 1e-5
    warmup_ratio: float = 0.1
    seed: int = 0
    max_rows: int | None = 160
    val_rows: int = 8
    budgets: tuple[int, int, int] = (768, 512, 128)
    param_dtype: str = "bf16"


def _rows(path: Path, n: int | None) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    rows = pq.read_table(path).to_pylist()
    return rows[:n] if n is not None else rows


def _replay(policy: Path, rows: list[dict[str, Any]], kb_dir: Path, s: PolicySFTSettings, out: Path) -> dict:
    from transformers import AutoTokenizer

    from gta_verl.cpu.sft_data import replay_rows, write_sft_parquet

    tok = AutoTokenizer.from_pretrained(str(policy))
    recs = replay_rows(rows, tok, kb_dir, budgets=s.budgets)
    write_sft_parquet(recs, out)
    lens = [len(r["input_ids"]) for r in recs]
    return {
        "rows": len(recs),
        "tokens_mean": round(sum(lens) / len(lens), 1),
        "tokens_max": max(lens),
        "searches_mean": round(sum(r["n_searches"] for r in recs) / len(recs), 2),
        "answered": sum(r["answered"] for r in recs),
        "truncated": sum(r["truncated"] for r in recs),
    }


def _run_sft(ws: WarmStart, s: PolicySFTSettings, n_train: int) -> Path:
    """verl's SFT trainer from ``ws.init_model``; returns its HF checkpoint of the last step."""
    sft = ws.root / "sft"
    knobs = SFTSettings(
        steps=s.steps,
        batch_size=s.batch_size,
        micro_batch=s.micro_batch,
        lr=s.lr,
        warmup_ratio=s.warmup_ratio,
        seed=s.seed,
    )
    cmd = sft_command(ws, knobs, sft / "checkpoints", sum(s.budgets[:2]), n_train, s.param_dtype)
    log_path = sft / "verl_sft.log"
    with open(log_path, "w") as logf:
        env = {**sft_env(), "VERL_FILE_LOGGER_PATH": str(sft / "metrics.jsonl")}
        proc = subprocess.run(cmd, env=env, stdout=logf, stderr=subprocess.STDOUT, cwd=ws.root)
    if proc.returncode != 0:
        raise RuntimeError(f"verl SFT of {ws.init_model} failed (exit {proc.returncode}); see {log_path}")
    ckpt = sft / "checkpoints" / f"global_step_{s.steps}" / "huggingface"
    if not ckpt.is_dir():
        raise RuntimeError(f"verl SFT exited 0 but wrote no {ckpt}; see {log_path}")
    return ckpt


def build_policy_sft(
    policy: str | Path,
    train_qa: str | Path,
    heldout_qa: str | Path,
    kb_dir: str | Path,
    root: str | Path,
    settings: PolicySFTSettings = PolicySFTSettings(),
) -> Path:
    """SFT ``policy`` on the τ* replays of ``train_qa``; returns the fp32 HF directory ``root/model``.

    A finished build (``root/policy_sft.json`` with the same settings) is reused.

    Raises:
        RuntimeError: verl's SFT trainer failed or saved no HF checkpoint (the log's path is named).
    """
    from gta_verl.cpu.warm_start import export_checkpoint

    root, policy = Path(root), Path(policy)
    ws = dataclasses.replace(layout(root), init_model=policy)
    done = root / COMPLETE
    # through JSON so a tuple setting compares equal to the list it was saved as
    key = json.loads(
        json.dumps({"v": POLICY_SFT_VERSION, "policy": str(policy), **dataclasses.asdict(settings)})
    )
    if (
        done.is_file()
        and json.loads(done.read_text()).get("key") == key
        and (ws.model / "config.json").is_file()
    ):
        return ws.model
    sft = root / "sft"
    sft.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    train = _rows(Path(train_qa), settings.max_rows)
    report: dict[str, Any] = {"key": key}
    report["train"] = _replay(policy, train, Path(kb_dir), settings, sft / "train.parquet")
    held = _rows(Path(heldout_qa), settings.val_rows)
    report["val"] = _replay(policy, held, Path(kb_dir), settings, sft / "val.parquet")
    report["prepare_s"] = round(time.perf_counter() - t0, 1)
    t1 = time.perf_counter()
    ckpt = _run_sft(ws, settings, len(train))
    report["sft_s"] = round(time.perf_counter() - t1, 1)
    export_checkpoint(ckpt, ws.model)
    tmp = done.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, indent=2))
    tmp.replace(done)  # last: the build is whole from here on
    return ws.model
