"""``gta-verl kb build | stats | add``."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from gta_verl.kb.build import KBConfig


def _add_common(p: argparse.ArgumentParser, openie_required: bool) -> None:
    d = KBConfig()
    p.add_argument("--corpus", required=True, help="corpus file (HippoRAG JSON, FlashRAG jsonl or parquet)")
    p.add_argument(
        "--format",
        dest="corpus_format",
        choices=("hipporag", "flashrag", "parquet"),
        default=None,
        help="corpus format (default: from the file suffix .json/.jsonl/.parquet)",
    )
    p.add_argument(
        "--openie",
        required=openie_required,
        default=None,
        help="precomputed:PATH | spacy | openai | vllm (openai/vllm take ':MODEL' optionally)",
    )
    p.add_argument(
        "--synonymy-threshold",
        type=float,
        default=d.synonymy_threshold,
        help=f"δ, min cosine of a synonymy edge (default {d.synonymy_threshold})",
    )
    p.add_argument(
        "--synonymy-k", type=int, default=d.synonymy_k, help=f"k-NN candidates (default {d.synonymy_k})"
    )
    p.add_argument(
        "--include-ner-entities",
        action="store_true",
        help="also link documents to NER entities that are in no triple",
    )
    p.add_argument("--embedder", default=d.embedder, help=f"encoder name or path (default {d.embedder})")
    p.add_argument("--device", default=d.device, help="encoder device (default cpu)")
    p.add_argument(
        "--allow-download",
        action="store_true",
        help="let --embedder be fetched from the model hub (default: bundled/local/cached only)",
    )
    p.add_argument(
        "--llm-base-url", default=d.llm_base_url, help="OpenAI-compatible endpoint for --openie openai"
    )
    p.add_argument("--llm-model", default=d.llm_model, help="model for --openie openai/vllm")
    p.add_argument(
        "--llm-max-tokens",
        type=int,
        default=d.llm_max_tokens,
        help=f"reply budget per --openie openai call (default {d.llm_max_tokens})",
    )
    p.add_argument(
        "--llm-timeout",
        type=float,
        default=d.llm_timeout,
        help=f"seconds per --openie openai request (default {d.llm_timeout:g}; a CPU server needs more)",
    )
    p.add_argument(
        "--llm-stop",
        action="append",
        default=None,
        metavar="TEXT",
        help="stop string of --openie openai calls, repeatable (a base model behind a transcript template: "
        "'\\nInput:'; backslash escapes are read)",
    )
    p.add_argument("--no-openie-cache", action="store_true", help="do not cache/resume OpenIE results")
    p.add_argument("--strict", action="store_true", help="fail on the first malformed corpus record")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def _config(args: argparse.Namespace) -> KBConfig:
    from gta_verl.llm.openai_chat import stop_strings

    return KBConfig(
        synonymy_threshold=args.synonymy_threshold,
        synonymy_k=args.synonymy_k,
        include_ner_entities=args.include_ner_entities,
        embedder=args.embedder,
        device=args.device,
        llm_base_url=args.llm_base_url,
        llm_model=args.llm_model,
        llm_max_tokens=args.llm_max_tokens,
        llm_timeout=args.llm_timeout,
        llm_stop=stop_strings(args.llm_stop),
        openie_cache=not args.no_openie_cache,
    )


def _print_stats(kb_dir: str, as_json: bool, manifest: dict | None = None) -> None:
    from gta_verl.kb.stats import stats_markdown
    from gta_verl.kb.store import load_kb

    # counts come from the loaded (checked) KB, never from the manifest's own numbers
    manifest = manifest or load_kb(kb_dir).manifest
    stats = manifest["counts"]
    if as_json:
        obj = {
            "kb_dir": str(kb_dir),
            **stats,
            "embedder": manifest.get("embedder"),
            "openie": manifest.get("openie"),
            "corpus": manifest.get("corpus"),
            "schema_version": manifest.get("schema_version"),
            "created_at": manifest.get("created_at"),
        }
        print(json.dumps(obj, sort_keys=True, default=str))
    else:
        print(stats_markdown(stats, name=str(kb_dir)))
        op = manifest.get("openie") or {}
        if op:
            print(
                f"\nOpenIE {op.get('spec')}: {op.get('n_passages')} passages {op.get('by_status')}, "
                f"{op.get('n_triples')} triples, {op.get('n_malformed_triples')} malformed skipped"
            )


def cmd_build(args: argparse.Namespace) -> int:
    from gta_verl.kb.atomic import write_lock
    from gta_verl.kb.store import check_out_dir, recover_interrupted

    out = Path(args.out)
    recover_interrupted(out)
    check_out_dir(out, args.force)  # before the build, so a refusal costs nothing
    with write_lock(out):  # held for the whole build: a second writer fails now, not after its build
        return _cmd_build_ray(args) if args.ray else _cmd_build_local(args)


def _build_inputs(args: argparse.Namespace) -> tuple[str, str | None, str, str, KBConfig]:
    """Corpus, its format, OpenIE spec, output and KB config: what both builds take first."""
    return args.corpus, args.corpus_format, args.openie, args.out, _config(args)


def _build_flags(args: argparse.Namespace) -> dict[str, bool]:
    """The keyword flags both builds share."""
    return {
        "progress": not args.no_progress,
        "strict": args.strict,
        "allow_download": args.allow_download,
        "force": args.force,
        "allow_empty": args.allow_empty,
    }


def _cmd_build_local(args: argparse.Namespace) -> int:
    from gta_verl.kb.build import build_kb_from_files

    kb = build_kb_from_files(*_build_inputs(args), **_build_flags(args))
    print(f"wrote KB to {args.out}", file=sys.stderr)
    _print_stats(args.out, False, kb.manifest)
    return 0


def _cmd_build_ray(args: argparse.Namespace) -> int:
    from gta_verl.kb.ray_build import RayOptions, build_kb_ray, summary_table

    opts = RayOptions(
        address=args.ray_address,
        concurrency=args.ray_concurrency,
        num_gpus=args.ray_num_gpus,
        openie_num_gpus=args.ray_openie_num_gpus,
        shard_passages=args.ray_shard_passages,
        encoder_num_cpus=args.ray_encoder_cpus,
        work_dir=args.ray_work_dir,
    )
    kb, stats = build_kb_ray(*_build_inputs(args), opts, **_build_flags(args))
    print(f"wrote KB to {args.out}", file=sys.stderr)
    print(summary_table(stats))
    _print_stats(args.out, False, kb.manifest)
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    _print_stats(args.kb_dir, args.json)
    return 0


def cmd_add(args: argparse.Namespace) -> int:
    from gta_verl.kb.atomic import write_lock
    from gta_verl.kb.incremental import add_to_kb
    from gta_verl.kb.store import read_manifest, recover_interrupted

    recover_interrupted(args.kb_dir)
    manifest = read_manifest(args.kb_dir)
    openie = args.openie or (manifest.get("openie") or {}).get("spec")
    if not openie:
        print("kb add: --openie is required (the KB manifest records no OpenIE backend)", file=sys.stderr)
        return 2
    stored = manifest.get("config", {})
    config = replace(
        _config(args),
        synonymy_threshold=stored.get("synonymy_threshold", args.synonymy_threshold),
        synonymy_k=stored.get("synonymy_k", args.synonymy_k),
        include_ner_entities=stored.get("include_ner_entities", args.include_ner_entities),
        embedder=stored.get("embedder", args.embedder),
    )
    with write_lock(Path(args.kb_dir)):
        kb = add_to_kb(
            args.kb_dir,
            args.corpus,
            args.corpus_format,
            openie,
            config,
            progress=not args.no_progress,
            strict=args.strict,
            allow_download=args.allow_download,
        )
    _print_stats(args.kb_dir, False, kb.manifest)
    return 0


def cmd_check_coverage(args: argparse.Namespace) -> int:
    """Fraction of each question's gold paragraphs present in the KB; exit 2 below ``--min``."""
    import pandas as pd

    from gta_verl.data.loaders import DataFormatError
    from gta_verl.data.schema import parse_ground_truth
    from gta_verl.kb.coverage import gold_coverage
    from gta_verl.kb.store import read_doc_ids

    kb_ids = set(read_doc_ids(args.kb))
    gold = []
    for path in args.qa:
        try:
            df = pd.read_parquet(path, columns=["reward_model"])
        except Exception as exc:  # one line naming the file
            raise DataFormatError(
                f"{path}: not a verl QA parquet with reward_model ({exc})".splitlines()[0]
            ) from None
        gold += _gold_ids(path, df["reward_model"], parse_ground_truth)
    if not gold:  # a mean over no question would print "0.0%", as if the KB lacked every paragraph
        print(f"gta-verl: error: {', '.join(args.qa)}: no rows, so no coverage to check", file=sys.stderr)
        return 2
    rep = gold_coverage(gold, kb_ids)
    print(rep.markdown(",".join(args.qa)))
    if rep.n_without_gold:
        print(
            f"{rep.n_without_gold} of {rep.n_questions} questions have no gold ids (not in the mean)",
            file=sys.stderr,
        )
    if rep.mostly_without_gold and not args.allow_without_gold:
        print(
            f"gta-verl: error: {rep.n_without_gold} of {rep.n_questions} questions have no gold ids, so the "
            "mean coverage speaks for a minority; pass --allow-without-gold to accept it",
            file=sys.stderr,
        )
        return 2
    if rep.mean_coverage < args.min:
        print(
            f"gta-verl: error: {args.kb} holds {rep.mean_coverage:.1%} of the questions' gold paragraphs "
            f"(< --min {args.min:.0%}): build the KB from these questions' paragraphs",
            file=sys.stderr,
        )
        return 2
    return 0


def _gold_ids(path: str, rows: Any, parse: Any) -> list[list[str]]:
    """Each row's gold doc ids; a malformed row is one :class:`DataFormatError` naming file and row."""
    from gta_verl.data.loaders import DataFormatError

    out = []
    for i, rm in enumerate(rows):
        try:
            if rm is not None and not isinstance(rm, dict):
                raise ValueError(f"reward_model must be an object, got {type(rm).__name__}")
            out.append(list(parse((rm or {}).get("ground_truth", {}))[1]))
        except (ValueError, TypeError, AttributeError, KeyError) as exc:
            raise DataFormatError(f"{path}: row {i}: malformed reward_model: {exc}") from None
    return out


def _fraction(text: str) -> float:
    """``--min``: a number in [0, 1] (``nan`` compares false with everything, so it passed any KB)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value <= 1.0:  # also false for nan
        raise argparse.ArgumentTypeError(f"must be a fraction in [0, 1], got {text!r}")
    return value


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    kb = subparsers.add_parser("kb", help="build and inspect the graph knowledge base")
    sub = kb.add_subparsers(dest="kb_command", metavar="{build,stats,add,check-coverage}")
    b = sub.add_parser("build", help="corpus → OpenIE → entity–document graph → KB directory")
    _add_common(b, openie_required=True)
    b.add_argument(
        "--out",
        required=True,
        help="output KB directory: new, empty, or a KB (replaced atomically); anything else is refused",
    )
    b.add_argument(
        "--allow-empty",
        action="store_true",
        help="build even if OpenIE found no triple in any passage (an entity-less, dense-only graph)",
    )
    b.add_argument(
        "--force",
        action="store_true",
        help="replace --out even if it is a non-empty directory that is not a KB (deletes what it holds)",
    )
    _add_ray_arguments(b)
    b.set_defaults(func=cmd_build)
    s = sub.add_parser("stats", help="GTA-RAG Table 5 statistics of a KB directory")
    s.add_argument("kb_dir")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=cmd_stats)
    a = sub.add_parser("add", help="add passages to a KB (extracts only the new ones)")
    a.add_argument("kb_dir")
    _add_common(a, openie_required=False)
    a.set_defaults(func=cmd_add)
    c = sub.add_parser("check-coverage", help="fraction of a QA set's gold paragraphs present in a KB")
    c.add_argument("--kb", required=True, help="KB directory")
    c.add_argument("--qa", required=True, nargs="+", help="verl QA parquet file(s)")
    c.add_argument(
        "--min", type=_fraction, default=0.95, help="fail (exit 2) below this mean coverage (default 0.95)"
    )
    c.add_argument(
        "--allow-without-gold",
        action="store_true",
        help="pass even when most questions have no gold ids (by default that fails: exit 2)",
    )
    c.set_defaults(func=cmd_check_coverage)
    kb.set_defaults(func=lambda _args: (kb.print_help(), 2)[1])


def _add_ray_arguments(b: argparse.ArgumentParser) -> None:
    """``kb build``'s Ray options (the distributed build)."""
    r = b.add_argument_group("Ray (distributed build: OpenIE and embeddings as Ray Data actor pools)")
    r.add_argument("--ray", action="store_true", help="run OpenIE and embeddings on Ray; resumable")
    r.add_argument(
        "--ray-address",
        default=None,
        help="Ray cluster to join ('auto' = the running one; default: start a local instance)",
    )
    r.add_argument("--ray-concurrency", type=int, default=2, help="actors per pool (default 2)")
    r.add_argument("--ray-num-gpus", type=float, default=0.0, help="GPUs per encoder actor (default 0: CPU)")
    r.add_argument(
        "--ray-encoder-cpus",
        type=float,
        default=1.0,
        help="CPUs (= torch threads) per encoder actor (default 1)",
    )
    r.add_argument(
        "--ray-openie-num-gpus",
        type=float,
        default=0.0,
        help="GPUs per OpenIE actor (--openie vllm; default 0)",
    )
    r.add_argument(
        "--ray-shard-passages", type=int, default=256, help="passages per OpenIE shard (default 256)"
    )
    r.add_argument(
        "--ray-work-dir",
        default=None,
        help="shard directory, shared by all nodes (default OUT.ray-work); rerun to resume",
    )
