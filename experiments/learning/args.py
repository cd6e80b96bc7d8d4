"""The command line of :mod:`experiments.learning.tiny`, one group of options per function."""

from __future__ import annotations

import argparse
from pathlib import Path

from experiments.learning.spread import SCORES

REPO = Path(__file__).resolve().parents[2]
#: Where the learning experiments are recorded (their settings, tables and per-step data).
EXPERIMENT_LOG = "experiments/learning/results/README.md"


def build_parser(description: str | None) -> argparse.ArgumentParser:
    """The parser of ``python -m experiments.learning.tiny`` (options in the order ``--help`` lists them)."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_run_arguments(p)
    _add_warm_start_arguments(p)
    _add_question_arguments(p)
    _add_step_arguments(p)
    return p


def _add_run_arguments(p: argparse.ArgumentParser) -> None:
    """Where the runs go, what they train and for how long."""
    p.add_argument("--out", default=str(REPO / "runs" / "learning"))
    p.add_argument("--kb", default=None, help="KB directory (default: the bundled MuSiQue KB, built once)")
    p.add_argument(
        "--warm-start-root",
        default=None,
        help="warm-start directory (default: $GTA_VERL_CACHE/warm_start/v<N>-<digest of KB and settings>)",
    )
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=8, help="prompts per step")
    p.add_argument("--n", type=int, default=4, help="rollouts per prompt")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--seeds-ab", default="0,1,2")
    p.add_argument("--seeds-cd", default="0", help="seeds of (c), (d) and (e)")
    p.add_argument("--conditions", default="a,b,c,d")
    p.add_argument(
        "--eval-questions", type=int, default=None, help="first N held-out questions (default all)"
    )
    p.add_argument("--timeout", type=float, default=7200)


def _add_warm_start_arguments(p: argparse.ArgumentParser) -> None:
    """The warm start's questions and SFT (gta_verl.cpu.warm_start.SFTSettings)."""
    p.add_argument(
        "--n-paths", type=int, default=600, help="Stage-I questions synthesized for SFT, RL and held-out"
    )
    p.add_argument("--sft-steps", type=int, default=1000, help="verl SFT steps of the warm start")
    p.add_argument(
        "--rl-fraction",
        type=float,
        default=0.0,
        help="share of the training questions kept out of SFT for the GRPO prompts (0: GRPO on SFT's)",
    )
    p.add_argument(
        "--split",
        default="components",
        choices=("components", "documents"),
        help="how questions are split (SFTSettings.split): whole components, or document communities",
    )
    p.add_argument(
        "--heldout-fraction",
        type=float,
        default=0.2,
        help="held-out share (of questions for --split components, of documents for documents)",
    )
    p.add_argument(
        "--sft-val-rows", type=int, default=0, help="held-out questions in SFT's validation loss (0: all)"
    )


def _add_question_arguments(p: argparse.ArgumentParser) -> None:
    """Which questions the reference policies and GRPO run on, and how they are scored."""
    p.add_argument(
        "--untrained-questions", type=int, default=32, help="questions the random policy is run on"
    )
    p.add_argument(
        "--real-qa",
        default="bundled",
        help="real QA parquet every checkpoint is also evaluated on ('bundled': the 100 MuSiQue "
        "questions the KB was built from; '' to skip)",
    )
    p.add_argument(
        "--rl-questions",
        type=int,
        default=0,
        help="GRPO on the first N RL questions only, each checkpoint also evaluated on them (0: all)",
    )
    p.add_argument(
        "--select-spread",
        type=int,
        default=0,
        metavar="M",
        help="with --rl-questions N: the N of the first M RL questions whose warm-start rollouts (--n each, "
        "T = 1) spread most in --select-score (experiments.learning.spread); 0: the first N",
    )
    p.add_argument(
        "--select-score",
        choices=SCORES,
        default="proxy",
        help="a sampled rollout's score for --select-spread: proxy = EM + fraction of targets found, "
        "trajectory = the trajectory-guided reward itself (eq 18)",
    )
    p.add_argument(
        "--train-samples",
        type=int,
        default=1,
        help="rollouts per question (T = 1) when evaluating on GRPO's own prompts (1: greedy)",
    )


def _add_step_arguments(p: argparse.ArgumentParser) -> None:
    """The quick warm start, the knobs of a GRPO step, and report-only."""
    p.add_argument(
        "--quick",
        action="store_true",
        help="the main job's warm-start data and model (gta_verl.cpu.warm_start.QUICK: 96 paths, 2-layer "
        "Qwen2; GRPO prompts = its SFT questions) trained for --sft-steps; --n-paths/--split are ignored",
    )
    p.add_argument(
        "--torch-threads",
        type=int,
        default=0,
        help="OMP_NUM_THREADS of every Ray worker (0: Ray's default, 1)",
    )
    p.add_argument(
        "--bypass-old-logprob",
        action="store_true",
        help="π_old = the rollout log-probs (verl rollout_correction.bypass_mode), no recompute",
    )
    p.add_argument(
        "--adam-eps",
        type=float,
        default=None,
        help=f"AdamW eps of the actor (default: torch's 1e-8); see {EXPERIMENT_LOG}, experiment 8",
    )
    p.add_argument(
        "--no-std-norm",
        action="store_true",
        help="GRPO advantages without the group-std division (verl algorithm.norm_adv_by_std_in_grpo=false)",
    )
    p.add_argument(
        "--kl-coef",
        type=float,
        default=None,
        help="β of the actor's KL loss to the warm start (default: the recipe's 0.001)",
    )
    p.add_argument(
        "--report-only",
        action="store_true",
        help="write the tables and curves from the finished runs; start no new run",
    )
