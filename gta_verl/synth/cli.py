"""``gta-verl synth``: build the Stage-I trajectory dataset from a KB directory."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from gta_verl.synth.generators.registry import GENERATOR_NAMES


def _hops(text: str) -> tuple[int, ...]:
    try:
        hops = tuple(sorted({int(h) for h in text.split(",") if h.strip()}))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--hops expects integers like 2,3,4, got {text!r}") from exc
    if not hops or min(hops) < 2:
        raise argparse.ArgumentTypeError(f"--hops needs hop counts >= 2, got {text!r}")
    return hops


def add_parser(subparsers: Any) -> None:
    """Register ``synth``."""
    p = subparsers.add_parser(
        "synth",
        help="synthesize validated multi-hop trajectories (Stage-I parquet)",
        description="Sample graph paths, generate multi-hop questions with per-turn search "
        "trajectories, keep those whose every query retrieves its target document, and write "
        "a verl parquet for Stage I.",
    )
    p.add_argument("--kb", required=True, help="KB directory (gta-verl kb build --out)")
    p.add_argument("--out", required=True, help="output parquet (written atomically)")
    _add_path_arguments(p)
    _add_validation_arguments(p)
    _add_llm_arguments(p)
    p.set_defaults(func=cmd_synth)


def _add_path_arguments(p: argparse.ArgumentParser) -> None:
    """What is generated and from which paths: generator, count, hops, sampling."""
    p.add_argument(
        "--generator",
        choices=GENERATOR_NAMES,
        default="template",
        help="template: offline, CPU, lower quality; openai: OpenAI-compatible endpoint; "
        "vllm: in-process vLLM (GPU)",
    )
    p.add_argument("--n", type=int, default=200, help="validated trajectories wanted (default 200)")
    p.add_argument(
        "--hops",
        type=_hops,
        default=(2, 3, 4),
        help="allowed hop counts; weights from our default mix 0.8/0.15/0.05 (default 2,3,4)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of path sampling and generation (default 0)")
    p.add_argument("--batch-size", type=int, default=64, help="paths per round (default 64)")
    p.add_argument(
        "--max-sampled-docs", type=int, default=10, help="cap on document nodes sampled per path (paper: 10)"
    )
    p.add_argument(
        "--max-paths-factor",
        type=int,
        default=20,
        help="give up after sampling this many paths per wanted trajectory (default 20; an LLM on a CPU "
        "costs minutes a batch)",
    )


def _add_validation_arguments(p: argparse.ArgumentParser) -> None:
    """How trajectories are validated, and by which retriever."""
    p.add_argument(
        "--no-validation",
        action="store_true",
        help="skip the retriever check (the 'w/o trajectory validation' ablation)",
    )
    p.add_argument(
        "--keep-unvalidated",
        default=None,
        metavar="PATH",
        help="also write every rule-passing trajectory, retriever check ignored",
    )
    p.add_argument(
        "--retriever-config",
        default=None,
        metavar="JSON",
        help="JSON file of RetrieverConfig fields (default: the training defaults)",
    )
    p.add_argument(
        "--retriever-actor",
        default=None,
        metavar="NAME",
        help="validate through this running Ray retriever actor (joins the cluster at address=auto)",
    )
    p.add_argument("--ray-namespace", default=None, help="Ray namespace of --retriever-actor")
    p.add_argument(
        "--retriever-url",
        default=None,
        metavar="URL",
        help="validate through a 'gta-verl retriever serve' HTTP server",
    )


def _add_llm_arguments(p: argparse.ArgumentParser) -> None:
    """The LLM generator, the rows' query format, and output."""
    p.add_argument(
        "--llm-base-url", default=None, help="endpoint for --generator openai, e.g. http://127.0.0.1:8000/v1"
    )
    p.add_argument("--llm-model", default=None, help="model name (openai) or path (vllm)")
    p.add_argument("--llm-api-key-env", default="OPENAI_API_KEY", help="env var holding the API key")
    p.add_argument("--temperature", type=float, default=0.7, help="LLM sampling temperature (default 0.7)")
    p.add_argument("--max-tokens", type=int, default=1024, help="LLM max tokens per reply (default 1024)")
    p.add_argument(
        "--llm-timeout",
        type=float,
        default=60.0,
        help="openai: seconds per HTTP request (default 60; a CPU server needs more)",
    )
    p.add_argument(
        "--llm-stop",
        action="append",
        default=None,
        metavar="TEXT",
        help="LLM stop string, repeatable (a base model behind a transcript template: '\\nInput:'; "
        "backslash escapes are read)",
    )
    p.add_argument(
        "--no-worked-example",
        action="store_true",
        help="openai/vllm: leave out the prompt's worked example (a fixed 2-hop path and its JSON reply, "
        "sent as an earlier user/assistant turn; a base model needs it)",
    )
    p.add_argument(
        "--max-queries-per-turn",
        type=int,
        default=1,
        help="K the rows train with (gta.agent.max_queries_per_turn); above 1 the prompts say how "
        "(default 1)",
    )
    p.add_argument(
        "--comparison-share",
        type=float,
        default=0.0,
        help="template: share of 2-hop paths phrased as yes/no comparisons whose two sub-questions are "
        "searched in one action (needs --max-queries-per-turn >= 2; default 0)",
    )
    p.add_argument("--json", action="store_true", help="print the funnel and stats as one JSON object")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _retriever(args: argparse.Namespace, kb: Any) -> Any:
    """The deployed retriever: in-process (default), a Ray actor, or an HTTP server."""
    if args.retriever_url:
        from gta_verl.retrieval.serving.clients import HTTPRetrieverClient

        return HTTPRetrieverClient(args.retriever_url)
    if args.retriever_actor:
        import ray

        from gta_verl.retrieval.serving.clients import RayRetrieverClient

        if not ray.is_initialized():
            ray.init(address="auto", namespace=args.ray_namespace, log_to_driver=False)
        return RayRetrieverClient(args.retriever_actor, namespace=args.ray_namespace)
    from gta_verl.retrieval.backends import open_kb_retriever
    from gta_verl.retrieval.config import RetrieverConfig

    fields = json.loads(Path(args.retriever_config).read_text()) if args.retriever_config else {}
    return open_kb_retriever(kb, RetrieverConfig.from_mapping(fields))  # the KB is already loaded


def _config(args: argparse.Namespace) -> Any:
    from dataclasses import replace

    from gta_verl.synth.pipeline import SynthesisConfig

    config = SynthesisConfig(batch_size=args.batch_size, max_paths_factor=args.max_paths_factor)
    return replace(
        config,
        sampler=replace(config.sampler, max_sampled_docs=args.max_sampled_docs),
        validation=replace(config.validation, check_retrieval=not args.no_validation),
    )


def _generator(args: argparse.Namespace) -> Any:
    from gta_verl.llm.openai_chat import stop_strings
    from gta_verl.synth.generators.registry import make_generator

    llm_kwargs: dict[str, Any] = {}
    if args.generator != "template":
        llm_kwargs = {
            "temperature": args.temperature,
            "max_tokens": args.max_tokens,
            "stop": stop_strings(args.llm_stop),
            "llm_timeout": args.llm_timeout,
            "worked_example": not args.no_worked_example,
        }
    if args.comparison_share and args.max_queries_per_turn < 2:
        raise SystemExit(
            "synth: --comparison-share needs --max-queries-per-turn >= 2 (both sub-questions in one search)"
        )
    return make_generator(
        args.generator,
        seed=args.seed,
        comparison_share=args.comparison_share,
        llm_base_url=args.llm_base_url,
        llm_model=args.llm_model,
        llm_api_key=os.environ.get(args.llm_api_key_env),
        **llm_kwargs,
    )


def _write(args: argparse.Namespace, result: Any, kb: Any, report: dict[str, Any]) -> None:
    from gta_verl.synth.writer import write_stage1_parquet

    passages = {p.doc_id: p for p in kb.passages}
    if result.validated:
        write_stage1_parquet(
            result.validated,
            args.out,
            passages,
            validated=not args.no_validation,
            metadata=report,
            max_queries_per_turn=args.max_queries_per_turn,
        )
    if args.keep_unvalidated and result.unvalidated:
        write_stage1_parquet(
            result.unvalidated,
            args.keep_unvalidated,
            passages,
            validated=False,
            metadata=report,
            max_queries_per_turn=args.max_queries_per_turn,
        )
        report["unvalidated_out"] = str(args.keep_unvalidated)


def cmd_synth(args: argparse.Namespace) -> int:
    """Run :func:`gta_verl.synth.pipeline.synthesize` and write the parquet(s)."""
    from gta_verl.kb.store import load_kb
    from gta_verl.synth.pipeline import synthesize
    from gta_verl.synth.writer import stats_markdown

    generator = _generator(args)
    kb = load_kb(args.kb)
    retriever = None if args.no_validation else _retriever(args, kb)
    result = synthesize(
        kb,
        retriever,
        generator,
        n=args.n,
        hops=args.hops,
        seed=args.seed,
        progress=not args.no_progress,
        config=_config(args),
    )
    funnel = result.funnel.to_dict()
    report = {
        "out": str(args.out),
        "generator": generator.name,
        "stats": result.stats,
        "funnel": funnel,
        "timings": result.timings,
    }
    _write(args, result, kb, report)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(stats_markdown(result.stats, funnel))
        if result.validated:
            print(f"wrote {len(result.validated)} trajectories to {args.out}")
    if not result.validated:
        print(
            f"synth: 0 of {funnel['sampled']} sampled paths passed validation; "
            "nothing written (see the funnel)",
            file=sys.stderr,
        )
        return 1
    return 0
