"""The CPU warm-start policy: a small Qwen2 taught the action protocol by verl's own SFT trainer.

Pipeline (each step cached under ``root``; a finished step is not redone):

1. synthesize Stage-I questions over the KB (template generator, retriever-validated), split them so that no
   held-out question shares a target document with a training one (:mod:`gta_verl.data.split`);
2. train a 4,096-token BPE on the corpus and the Stage-I text, save a random ``Qwen2ForCausalLM`` over it;
3. replay every τ* through the real agent loop to get SFT rows in the rollout token layout;
4. run ``torchrun -m verl.trainer.sft_trainer`` (stock, CPU platform plugin, ``data.custom_cls`` =
   :class:`gta_verl.cpu.sft_dataset.AgentLayoutSFTDataset`), export its HF checkpoint as fp32.

What it took to run verl's SFT trainer on CPU: docs/verl_on_cpu.md, "The SFT trainer".
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gta_verl.cpu.sft_data import WarmStartModel
from gta_verl.cpu.warm_start_check import COMPLETE_FILE, Checked, mismatches, record, whole

log = logging.getLogger(__name__)

WARM_START_VERSION = 1


@dataclass(frozen=True)
class SFTSettings:
    """verl SFT knobs of the warm start (in experiments/learning/results/README.md, The warm start).

    ``rl_fraction`` of the training questions is held out of SFT for GRPO prompts (see
    :attr:`WarmStart.rl_questions`); 0 keeps every training question in SFT. ``split`` is ``components``
    (whole components of "shares a target document" per side; fractions of questions) or ``documents``
    (communities of target documents per side, straddling questions dropped; fractions of documents), the
    one that still splits when thousands of questions share a small corpus (:mod:`gta_verl.data.split`).
    ``val_rows`` > 0 keeps only the first that many held-out questions in SFT's validation loss (each
    ``trainer.test_freq`` pass is a forward over all of them); evaluation still uses every held-out question.
    """

    n_paths: int = 600
    heldout_fraction: float = 0.2
    steps: int = 1000
    batch_size: int = 8
    micro_batch: int = 4
    lr: float = 3e-3
    scheduler: str = "cosine"
    warmup_ratio: float = 0.03
    seed: int = 0
    model: WarmStartModel = field(default_factory=WarmStartModel)
    rl_fraction: float = 0.0
    split: str = "components"
    val_rows: int = 0


#: Knobs whose default leaves the cache key unchanged (warm starts built before the knob existed stay valid).
_KEY_DEFAULTS: dict[str, Any] = {"rl_fraction": 0.0, "split": "components", "val_rows": 0}


#: The main job's and the learning regression test's warm start: 96 paths, a 2-layer 128-wide Qwen2,
#: 200 SFT steps (built in minutes on 2 cores; it memorizes its training questions, which is all a
#: few GRPO steps need to see rewards that differ within a group).
QUICK = SFTSettings(
    n_paths=96, steps=200, model=WarmStartModel(hidden=128, layers=2, heads=4, kv_heads=2, intermediate=384)
)


@dataclass(frozen=True)
class WarmStart:
    """Paths the learning runs read (all under one root)."""

    root: Path
    model: Path
    init_model: Path
    train: Path
    heldout: Path
    rl: Path

    @property
    def complete(self) -> bool:
        """Every file the build recorded matches its checksum (:mod:`gta_verl.cpu.warm_start_check`)."""
        return self.check().complete

    def check(self) -> Checked:
        return mismatches(self.root, [self.model.name, self.train.name, self.heldout.name])

    @property
    def rl_questions(self) -> Path:
        """The GRPO prompts: questions SFT never saw when ``rl_fraction > 0``, else the SFT questions."""
        return self.rl if self.rl.is_file() else self.train


def settings_key(settings: SFTSettings) -> dict[str, Any]:
    """The settings that name a cached warm start (knobs left at a :data:`_KEY_DEFAULTS` value are
    omitted)."""
    return {k: v for k, v in asdict(settings).items() if k not in _KEY_DEFAULTS or _KEY_DEFAULTS[k] != v}


def default_root(kb_dir: str | Path, settings: SFTSettings = SFTSettings()) -> Path:
    """``$GTA_VERL_CACHE/warm_start/v<N>-<digest>``: one per KB content (manifest checksums) and settings."""
    import hashlib

    from gta_verl.agent.tokenizer import cache_dir
    from gta_verl.kb.store import read_manifest

    files = read_manifest(kb_dir)["files"]
    key = json.dumps({"files": files, "settings": settings_key(settings)}, sort_keys=True)
    return (
        cache_dir() / "warm_start" / f"v{WARM_START_VERSION}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"
    )


def layout(root: Path) -> WarmStart:
    return WarmStart(
        root=root,
        model=root / "model",
        init_model=root / "init",
        train=root / "stage1_train.parquet",
        heldout=root / "stage1_heldout.parquet",
        rl=root / "stage1_rl.parquet",
    )


def _write_questions(kb_dir: Path, ws: WarmStart, s: SFTSettings) -> dict[str, Any]:
    from gta_verl.data.split import split_by_document_communities, split_sft_rl_heldout
    from gta_verl.retrieval.backends import open_retriever
    from gta_verl.synth.generators.registry import make_generator
    from gta_verl.synth.pipeline import synthesize
    from gta_verl.synth.writer import write_stage1_parquet

    retriever = open_retriever(kb_dir)
    res = synthesize(
        retriever.kb,
        retriever,
        make_generator("template", seed=s.seed),
        n=s.n_paths,
        seed=s.seed,
        progress=False,
    )
    trajs = list(res.validated)
    # RL prompts (rl_fraction > 0) share no target document with an SFT question: a policy that memorized
    # its SFT questions has nothing to recall on them, as on the held-out side.
    targets = [t.path_doc_ids for t in trajs]
    counts: dict[str, int] = {}
    if s.split == "documents":
        cut = split_by_document_communities(targets, s.heldout_fraction, s.rl_fraction, s.seed)
        train, rl, held, counts = cut.sft, cut.rl, cut.heldout, cut.counts()
    elif s.split == "components":
        train, rl, held = split_sft_rl_heldout(targets, s.heldout_fraction, s.rl_fraction, s.seed)
    else:
        raise ValueError(f"SFTSettings.split must be 'components' or 'documents', got {s.split!r}")
    passages = {p.doc_id: p for p in retriever.kb.passages}
    meta = {
        "funnel": res.funnel.to_dict(),
        "split": "no target document shared between train, RL and held-out",
        "split_method": s.split,
        **({"split_counts": counts} if counts else {}),
    }
    write_stage1_parquet([trajs[i] for i in train], ws.train, passages, metadata=meta)
    write_stage1_parquet([trajs[i] for i in held], ws.heldout, passages, metadata=meta)
    if rl:
        write_stage1_parquet([trajs[i] for i in rl], ws.rl, passages, metadata=meta)
    return {
        "validated": len(trajs),
        "train": len(train),
        "rl": len(rl),
        "heldout": len(held),
        "dropped_straddling_sides": len(trajs) - len(train) - len(rl) - len(held),
    }


def write_split_questions(kb_dir: str | Path, root: Path, settings: SFTSettings) -> dict[str, Any]:
    """Synthesize ``settings.n_paths`` Stage-I questions over ``kb_dir``; write the split parquet files
    (train, held-out and, with ``rl_fraction``, RL) under ``root`` as :func:`layout` names them."""
    return _write_questions(Path(kb_dir), layout(Path(root)), settings)


def _rows(path: Path) -> list[dict[str, Any]]:
    import pandas as pd

    return pd.read_parquet(path).to_dict("records")


def _prepare_sft(kb_dir: Path, ws: WarmStart, s: SFTSettings) -> dict[str, Any]:
    from gta_verl.cpu import sft_data
    from gta_verl.cpu.corpus_tokenizer import train_corpus_tokenizer
    from gta_verl.kb.store import load_kb

    train, held = _rows(ws.train), _rows(ws.heldout)
    tok = train_corpus_tokenizer(sft_data.tokenizer_texts(load_kb(kb_dir).passages, train))
    sft_data.init_model_dir(ws.init_model, tok, size=s.model, seed=s.seed)
    stats: dict[str, Any] = {"vocab": len(tok)}
    for name, rows in (("train", train), ("val", held[: s.val_rows] if s.val_rows > 0 else held)):
        recs = sft_data.replay_rows(rows, tok, kb_dir)
        sft_data.write_sft_parquet(recs, ws.root / "sft" / f"{name}.parquet")
        lens = [len(r["input_ids"]) for r in recs]
        stats[name] = {
            "rows": len(recs),
            "tokens_mean": sum(lens) / len(lens),
            "tokens_max": max(lens),
            "answered": sum(r["answered"] for r in recs),
            "truncated": sum(r["truncated"] for r in recs),
        }
    return stats


def sft_command(
    ws: WarmStart, s: SFTSettings, out_dir: Path, max_length: int, n_train: int, param_dtype: str = "fp32"
) -> list[str]:
    """``torchrun … -m verl.trainer.sft_trainer`` with the overrides a CPU run needs (docs/verl_on_cpu.md).

    ``param_dtype`` is FSDP2's compute dtype over fp32 master weights (``bf16`` where the CPU has bf16 units,
    docs/policies.md).

    ``trainer.total_epochs`` (default 4) ends the loop before ``total_training_steps`` when the data is
    small, and then nothing is saved (``sft_trainer.py:356``), so it is set from the steps per epoch.
    """
    sft = ws.root / "sft"
    per_epoch = max(1, n_train // s.batch_size)  # the sampler drops the last partial batch
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes=1",
        "--nproc_per_node=1",
        "-m",
        "verl.trainer.sft_trainer",
        f"model.path={ws.init_model}",
        f"data.train_files={sft / 'train.parquet'}",
        f"data.val_files={sft / 'val.parquet'}",
        "data.custom_cls.path=pkg://gta_verl.cpu.sft_dataset",
        "data.custom_cls.name=AgentLayoutSFTDataset",
        f"data.max_length={max_length}",
        f"data.train_batch_size={s.batch_size}",
        f"data.micro_batch_size_per_gpu={s.micro_batch}",
        "data.use_dynamic_bsz=false",
        "data.num_workers=0",
        "data.pad_mode=no_padding",
        "engine.strategy=fsdp2",
        "engine.use_torch_compile=false",
        f"+engine.mixed_precision.param_dtype={param_dtype}",
        "+model.override_config.attn_implementation=sdpa",
        "model.use_remove_padding=false",
        "model.enable_gradient_checkpointing=false",
        f"optim.lr={s.lr}",
        f"optim.lr_scheduler_type={s.scheduler}",
        f"optim.lr_warmup_steps_ratio={s.warmup_ratio}",
        "trainer.device=cpu",
        "trainer.logger=[console,file]",
        f"trainer.total_training_steps={s.steps}",
        f"trainer.total_epochs={-(-s.steps // per_epoch)}",
        "trainer.resume_mode=disable",
        f"trainer.test_freq={max(1, s.steps // 6)}",
        f"trainer.save_freq={s.steps}",
        f"trainer.default_local_dir={out_dir}",
        "trainer.project_name=gta_verl_warm_start",
        f"trainer.experiment_name=sft_s{s.seed}",
        f"trainer.seed={s.seed}",
        "checkpoint.save_contents=[model,optimizer,extra,hf_model]",
    ]


def sft_env() -> dict[str, str]:
    return {
        **os.environ,
        "VERL_USE_EXTERNAL_MODULES": "gta_verl.cpu.platform",
        "VERL_PLATFORM": "cpu",
        "VERL_ENGINE_DEVICE": "cuda",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "WANDB_MODE": "disabled",
    }


def fix_dtype(hf_dir: Path) -> Path:
    """Record fp32 in a verl HF checkpoint's ``config.json`` (verl writes ``bfloat16`` over fp32 tensors,
    ``fsdp_checkpoint_manager.py:446``, so ``from_pretrained(dtype="auto")`` would round the weights)."""
    cfg_path = hf_dir / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["torch_dtype"] = cfg["dtype"] = "float32"
    cfg_path.write_text(json.dumps(cfg, indent=2))
    return hf_dir


def export_checkpoint(ckpt: Path, out: Path) -> None:
    """Copy verl's HF checkpoint to ``out`` as fp32."""
    tmp = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(ckpt, tmp)
    fix_dtype(tmp)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)


def build_warm_start(
    kb_dir: str | Path,
    root: str | Path | None = None,
    settings: SFTSettings = SFTSettings(),
    log_file: Path | None = None,
) -> WarmStart:
    """Build (or reuse) the warm start under ``root``; returns its paths. See the module docstring."""
    from gta_verl.cpu.sft_data import PROMPT_LENGTH, RESPONSE_LENGTH

    ws = layout(Path(root) if root else default_root(kb_dir, settings))
    checked = ws.check()
    if not checked.complete and checked.bad == (COMPLETE_FILE,) and whole(ws.model, [ws.train, ws.heldout]):
        # built before builds recorded checksums, and intact: record it rather than train again
        record(ws.root, [ws.model, ws.train, ws.heldout, ws.rl])
        checked = ws.check()
    if checked.complete:
        return ws
    ws.root.mkdir(parents=True, exist_ok=True)
    report_path = ws.root / "warm_start.json"
    report = _read_report(report_path)
    report["settings"] = asdict(settings)
    t0 = time.perf_counter()
    if not all(_reusable(p, checked) for p in (ws.train, ws.heldout)):
        shutil.rmtree(ws.root / "sft", ignore_errors=True)  # SFT rows come from the questions: redo them too
        report["questions"] = _write_questions(Path(kb_dir), ws, settings)
    if not (ws.root / "sft" / "val.parquet").is_file():
        report["sft_data"] = _prepare_sft(Path(kb_dir), ws, settings)
    report["prepare_s"] = round(time.perf_counter() - t0, 1)
    report_path.write_text(json.dumps(report, indent=2))  # an interrupted SFT keeps the data statistics
    out_dir = ws.root / "sft" / "checkpoints"
    t1 = time.perf_counter()
    log_path = log_file or ws.root / "sft" / "verl_sft.log"
    with open(log_path, "w") as logf:
        n_train = len(_rows(ws.train))
        proc = subprocess.run(
            sft_command(ws, settings, out_dir, PROMPT_LENGTH + RESPONSE_LENGTH, n_train),
            env={**sft_env(), "VERL_FILE_LOGGER_PATH": str(ws.root / "sft" / "metrics.jsonl")},
            stdout=logf,
            stderr=subprocess.STDOUT,
            cwd=ws.root,
        )
    if proc.returncode != 0:
        raise RuntimeError(f"verl SFT failed (exit {proc.returncode}); see {log_path}")
    report["sft_s"] = round(time.perf_counter() - t1, 1)
    ckpt = out_dir / f"global_step_{settings.steps}" / "huggingface"
    if not ckpt.is_dir():
        raise RuntimeError(f"verl SFT exited 0 but wrote no {ckpt}; see {log_path}")
    export_checkpoint(ckpt, ws.model)
    report_path.write_text(json.dumps(report, indent=2))
    record(ws.root, [ws.model, ws.train, ws.heldout, ws.rl])  # last: the build is whole from here on
    return ws


def _read_report(path: Path) -> dict[str, Any]:
    """The build's statistics so far; a cut or foreign file starts them afresh (they are rewritten)."""
    try:
        report = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError) as exc:
        log.warning("%s is unreadable (%s): starting its statistics afresh", path, exc)
        return {}
    return report if isinstance(report, dict) else {}


def _reusable(path: Path, checked: Checked) -> bool:
    """A question file of an unfinished build is kept if the record does not disown it and it reads."""
    import pyarrow.parquet as pq

    if path.name in checked.bad:
        return False
    try:
        pq.read_metadata(path)
    except Exception:  # missing, cut, not parquet: pyarrow raises several types
        return False
    return True


def grpo_overrides(
    steps: int, seed: int, lr: float, n: int, batch: int, save_freq: int | None = None
) -> tuple[str, ...]:
    """Hydra overrides of a GRPO run from the warm start, on top of ``recipes/cpu/run.sh``'s.

    ``batch`` prompts × ``n`` rollouts per step in one mini-batch and one micro-batch (one optimizer
    step per GRPO step), the warm start's rollout layout (prompt/response/observation budgets), sampling
    temperature 1, ``data.seed`` = ``seed`` (the same data order for every condition of that seed), and an
    HF checkpoint every ``save_freq`` steps (None: at the last step only).
    """
    from gta_verl.cpu.sft_data import MAX_OBS_TOKENS, PROMPT_LENGTH, RESPONSE_LENGTH

    return (
        f"data.train_batch_size={batch}",
        f"actor_rollout_ref.rollout.n={n}",
        f"data.max_prompt_length={PROMPT_LENGTH}",
        f"data.max_response_length={RESPONSE_LENGTH}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={batch}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={batch * n}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={batch * n}",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={batch * n}",
        f"actor_rollout_ref.actor.optim.lr={lr}",
        "actor_rollout_ref.rollout.temperature=1.0",
        f"gta.agent.max_obs_tokens={MAX_OBS_TOKENS}",
        f"data.seed={seed}",
        f"actor_rollout_ref.rollout.seed={seed}",
        f"trainer.save_freq={save_freq or steps}",
        "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]",
    )


def grpo_algo_overrides(
    adam_eps: float | None = None, std_norm: bool = True, kl_coef: float | None = None
) -> tuple[str, ...]:
    """Hydra overrides of the optimizer and advantage knobs ``experiments/learning/tiny.py`` varies.

    Args:
        adam_eps: AdamW ``eps`` of the actor (None: torch's 1e-8). The update is m̂ / (√v̂ + eps): with
            1e-8 a tied-embedding row whose gradient is ~1e-6 (a token absent from the batch, reached
            only through the softmax) moves as far per step as a row the batch used.
        std_norm: GRPO's division of A_i = R_i − mean(R) by the group's std. False is Dr. GRPO: a group
            whose rewards differ only by search terms (±0.35 in eq 16) is then pushed less hard than
            one whose answers differ (3.0 between −1 and +2), instead of equally hard.
        kl_coef: β of the actor's KL loss to the warm start (None: the recipe's).
    """
    out: tuple[str, ...] = ()
    if adam_eps is not None:
        out += (f"actor_rollout_ref.actor.optim.override_optimizer_config={{eps:{adam_eps}}}",)
    if not std_norm:
        out += ("algorithm.norm_adv_by_std_in_grpo=false",)
    if kl_coef is not None:
        out += (f"actor_rollout_ref.actor.kl_loss_coef={kl_coef}",)
    return out


def step_cost_overrides(torch_threads: int = 0, bypass_old_logprob: bool = False) -> tuple[str, ...]:
    """Hydra overrides of the two knobs that cut a CPU GRPO step (experiments/learning/results, Step cost).

    Args:
        torch_threads: OpenMP threads of every Ray worker (0: Ray's default, a worker's ``num_cpus``,
            i.e. 1 here). Ray exports ``OMP_NUM_THREADS`` unless the job's env sets it; the value must
            be a string.
        bypass_old_logprob: π_old = the rollout policy, whose log-probs ``hf_cpu`` already returns
            (verl's ``rollout_correction.bypass_mode``): no recompute pass, no ``actor/entropy`` metric.
            Exact only with one mini-batch and one epoch per step, as :func:`grpo_overrides` sets.
    """
    out: tuple[str, ...] = ()
    if torch_threads:
        out += (f'+ray_kwargs.ray_init.runtime_env.env_vars.OMP_NUM_THREADS="{torch_threads}"',)
    if bypass_old_logprob:
        out += ("algorithm.rollout_correction.bypass_mode=true",)
    return out


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    """The HF checkpoint a ``run_cpu_recipe`` run saved at ``step`` (fp32 recorded in its config).

    Raises:
        FileNotFoundError: the run saved no HF checkpoint at ``step`` (or it was deleted).
    """
    hf = run_dir / "verl" / "ckpt" / f"global_step_{step}" / "actor" / "huggingface"
    if not (hf / "config.json").is_file():
        raise FileNotFoundError(f"no HF checkpoint of step {step} under {run_dir} (expected {hf})")
    return fix_dtype(hf)
