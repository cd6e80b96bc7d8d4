"""``gta-verl retriever serve`` and ``gta-verl eval-retrieval``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from gta_verl.retrieval.config import BACKENDS, FUSIONS, INDEX_KINDS, MODES, RetrieverConfig
from gta_verl.retrieval.serving.http_limits import (
    BODY_TIMEOUT_S,
    HEADER_TIMEOUT_S,
    MAX_CONNECTIONS,
    WRITE_TIMEOUT_S,
)


def _add_config_args(p: argparse.ArgumentParser) -> None:
    d = RetrieverConfig()
    p.add_argument("--kb", required=True, help="KB directory (gta-verl kb build --out DIR)")
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        default=d.backend,
        help=f"retriever: graph = GTA-RAG hybrid, dense = Search-R1 dense, bm25 (default {d.backend})",
    )
    p.add_argument("--k-graph", type=int, default=d.k_graph, help=f"K_g (default {d.k_graph})")
    p.add_argument("--k-dense", type=int, default=d.k_dense, help=f"K_d (default {d.k_dense})")
    p.add_argument(
        "--alpha", type=float, default=d.alpha, help=f"PPR restart probability (default {d.alpha})"
    )
    p.add_argument("--fusion", choices=FUSIONS, default=d.fusion, help=f"hybrid order (default {d.fusion})")
    p.add_argument(
        "--dense-head",
        type=int,
        default=d.dense_head,
        help=f"dense documents first with --fusion dense_head (default {d.dense_head})",
    )
    p.add_argument(
        "--fusion-weight",
        type=float,
        default=d.fusion_weight,
        help=f"dense weight λ of --fusion score (default {d.fusion_weight})",
    )
    p.add_argument(
        "--passage-seed-top",
        type=int,
        default=d.passage_seed_top,
        help=f"documents seeded with their dense score, 0 = all (default {d.passage_seed_top})",
    )
    p.add_argument("--index", choices=INDEX_KINDS, default=d.index, help="triple index (default flat)")
    p.add_argument(
        "--allow-download",
        action="store_true",
        help="let the KB's query encoder be fetched from the model hub (default: local/bundled only)",
    )


def _config(args: argparse.Namespace, **extra: Any) -> RetrieverConfig:
    return RetrieverConfig(
        backend=args.backend,
        k_graph=args.k_graph,
        k_dense=args.k_dense,
        alpha=args.alpha,
        fusion=args.fusion,
        dense_head=args.dense_head,
        fusion_weight=args.fusion_weight,
        passage_seed_top=args.passage_seed_top,
        index=args.index,
        **extra,
    )


def cmd_serve(args: argparse.Namespace) -> int:
    from gta_verl.retrieval.serving.http import serve

    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"warning: serving on {args.host}, reachable beyond this machine (no authentication)",
            file=sys.stderr,
        )
    serve(
        args.kb,
        args.host,
        args.port,
        _config(args, mode=args.mode),
        allow_download=args.allow_download,
        max_batch=args.max_batch,
        max_wait_ms=args.max_wait_ms,
        header_timeout_s=args.header_timeout,
        body_timeout_s=args.body_timeout,
        max_connections=args.max_connections,
        write_timeout_s=args.write_timeout,
    )
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from gta_verl.retrieval.backends import open_retriever
    from gta_verl.retrieval.evaluate import evaluate_retrieval, format_recall_table, load_qa

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    ks = [int(k) for k in args.k.split(",") if k.strip()]
    config = _config(args)
    if args.backends or config.backend != "graph":
        if args.tune_fusion:
            msg = "--tune-fusion orders the graph backend's hybrid list: drop --backend/--backends"
            print(msg, file=sys.stderr)
            return 2
        return _eval_backends(args, config, ks)
    retriever = open_retriever(args.kb, config, allow_download=args.allow_download)
    qa = load_qa(args.qa, retriever.kb.passages)
    if args.limit:
        qa = qa[: args.limit]
    if args.tune_fusion:
        return _tune(args, retriever, qa)
    result = evaluate_retrieval(retriever, qa, modes, ks, dataclasses.replace(retriever.config))
    print(json.dumps(result, indent=2) if args.json else format_recall_table(result))
    return 0


def _eval_backends(args: argparse.Namespace, config: RetrieverConfig, ks: list[int]) -> int:
    """``--backends`` (or a non-graph ``--backend``): one recall row per backend over one loaded KB."""
    from gta_verl.kb.store import load_kb
    from gta_verl.retrieval.evaluate import evaluate_backends, format_recall_table, load_qa
    from gta_verl.retrieval.passages import load_query_encoder

    names = [b.strip() for b in (args.backends or config.backend).split(",") if b.strip()]
    kb = load_kb(args.kb)
    qa = load_qa(args.qa, kb.passages)[: args.limit or None]
    enc = load_query_encoder(kb, config, args.allow_download) if set(names) - {"bm25"} else None
    result = evaluate_backends(kb, qa, names, ks, config, enc)
    print(json.dumps(result, indent=2) if args.json else format_recall_table(result, "backend"))
    return 0


def _tune(args: argparse.Namespace, retriever: object, qa: list) -> int:
    from gta_verl.retrieval.tuning import Dataset, default_grid, format_tune_report, tune_fusion

    seed_tops = [int(x) for x in args.seed_tops.split(",") if x.strip()]
    ks = [int(k) for k in args.k.split(",") if k.strip()]
    report = tune_fusion([Dataset(args.qa, retriever, qa)], default_grid(seed_tops), args.split_seed, ks)
    print(
        json.dumps(dataclasses.asdict(report), indent=2, default=str)
        if args.json
        else format_tune_report(report)
    )
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``retriever serve`` and ``eval-retrieval``."""
    r = subparsers.add_parser("retriever", help="serve the retrieval environment")
    rsub = r.add_subparsers(dest="retriever_command", metavar="ACTION")
    s = rsub.add_parser("serve", help="HTTP /retrieve (Search-R1 protocol) + /health")
    _add_config_args(s)
    s.add_argument("--mode", choices=MODES, default="hybrid")
    s.add_argument("--host", default="127.0.0.1", help="bind address (default loopback only)")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--max-batch", type=int, default=256, help="most queries per batched call")
    s.add_argument("--max-wait-ms", type=float, default=5.0, help="micro-batching window")
    s.add_argument(
        "--header-timeout",
        type=float,
        default=HEADER_TIMEOUT_S,
        help=f"close a connection without complete request headers after this many s "
        f"(default {HEADER_TIMEOUT_S:g})",
    )
    s.add_argument(
        "--body-timeout",
        type=float,
        default=BODY_TIMEOUT_S,
        help=f"408 and close when the body is incomplete this many s after its headers "
        f"(default {BODY_TIMEOUT_S:g})",
    )
    s.add_argument(
        "--write-timeout",
        type=float,
        default=WRITE_TIMEOUT_S,
        help=f"abort a connection whose client reads nothing of its response for this many s "
        f"(default {WRITE_TIMEOUT_S:g})",
    )
    s.add_argument(
        "--max-connections",
        type=int,
        default=MAX_CONNECTIONS,
        help=f"open connections at most; past it the oldest idle one is closed; lowered to fit "
        f"the open-file limit (default {MAX_CONNECTIONS})",
    )
    s.set_defaults(func=cmd_serve)
    r.set_defaults(func=lambda a: (r.print_help(), 2)[1])
    _add_eval_parser(subparsers)


def _add_eval_parser(subparsers: argparse._SubParsersAction) -> None:
    e = subparsers.add_parser("eval-retrieval", help="recall@k of gold documents per retrieval mode")
    _add_config_args(e)
    e.add_argument("--qa", required=True, help="QA parquet (data prep) or HippoRAG/FlashRAG question file")
    e.add_argument("--modes", default="dense,graph,hybrid", help="comma list of dense,graph,hybrid")
    e.add_argument(
        "--backends",
        default="",
        help=f"comma list of {','.join(BACKENDS)}: one row per backend (graph: the hybrid order) "
        "instead of one per mode",
    )
    e.add_argument("--k", default="1,2,5,10", help="comma list of cut-offs")
    e.add_argument("--limit", type=int, default=0, help="evaluate only the first N questions")
    e.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    e.add_argument(
        "--tune-fusion",
        action="store_true",
        help="choose the hybrid order on one seeded half of the questions (mean R@2, R@5; "
        "≥ dense and graph at every k) and report recall on the other half",
    )
    e.add_argument("--split-seed", type=int, default=0, help="seed of the --tune-fusion split (default 0)")
    e.add_argument(
        "--seed-tops",
        default="0",
        help="passage_seed_top values tried by --tune-fusion, comma list (default 0 = all)",
    )
    e.set_defaults(func=cmd_eval)
