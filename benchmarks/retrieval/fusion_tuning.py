"""Choose the hybrid order on one half of each dataset's questions, report recall on the other half.

    python -m benchmarks.retrieval.fusion_tuning \\
        --dataset musique=KB_DIR:gta_verl/assets/musique/musique_train.json \\
        --dataset hotpotqa=KB_DIR2:assets/hotpotqa_train/hotpotqa_train.json \\
        [--split-seeds 0,1,2] [--seed-tops 0] [--k 1,2,5,10]

For every split seed: each dataset's questions are split in halves by a seeded hash of
their ids; one rule (fusion, dense_head, λ of score fusion, and ``passage_seed_top`` if
several are given) is chosen on all tune halves together (mean over datasets of
(R@2 + R@5) / 2, among the rules ≥ dense and ≥ graph at every k on every tune half;
:func:`gta_verl.retrieval.tuning.select_fusion`), and R@1/2/5/10 are printed on the
held-out halves for dense, graph, the chosen hybrid, R(q) (K_g ∪ K_d, what the agent
sees) and the configured order. A summary table lists the choice per split seed.
Prints markdown with ``uptime`` (machine load) first.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _datasets(specs: list[str]) -> list:
    from gta_verl.retrieval.backends import open_retriever
    from gta_verl.retrieval.evaluate import load_qa
    from gta_verl.retrieval.tuning import Dataset

    out = []
    for spec in specs:
        name, _, rest = spec.partition("=")
        kb_dir, _, qa_path = rest.rpartition(":")
        if not (name and kb_dir and qa_path):
            raise SystemExit(f"--dataset wants NAME=KB_DIR:QA_PATH, got {spec!r}")
        r = open_retriever(kb_dir)
        _ = r.transition  # shared by every with_config copy
        out.append(Dataset(name, r, load_qa(qa_path, r.kb.passages)))
    return out


def main(argv: list[str] | None = None) -> int:
    from gta_verl.retrieval.tuning import default_grid, format_tune_report, held_out_shortfalls, tune_fusion

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", action="append", required=True, help="NAME=KB_DIR:QA_PATH (repeat)")
    p.add_argument("--split-seeds", default="0", help="comma list of split seeds (default 0)")
    p.add_argument(
        "--seed-tops", default="0", help="passage_seed_top values tried (default 0 = all documents)"
    )
    p.add_argument("--k", default="1,2,5,10", help="cut-offs reported")
    args = p.parse_args(argv)
    ks = [int(k) for k in args.k.split(",")]
    grid = default_grid([int(x) for x in args.seed_tops.split(",")])
    print(f"`uptime`: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}\n")
    t0 = time.perf_counter()
    datasets = _datasets(args.dataset)
    summary = [
        "| split seed | chosen on tune halves | guard met on tune | "
        + " | ".join(f"held-out {d.name}: hybrid ≥ dense, graph" for d in datasets)
        + " |",
        "|---|---|---|" + "---|" * len(datasets),
    ]
    for seed in (int(s) for s in args.split_seeds.split(",")):
        rep = tune_fusion(datasets, grid, seed, ks)
        print(f"## Split seed {seed}\n\n{format_tune_report(rep)}\n")
        shorts = [held_out_shortfalls(d, ks) for d in rep.datasets]
        cells = ["yes" if not s else "no: " + "; ".join(s) for s in shorts]
        summary.append(
            f"| {seed} | {rep.chosen.label} | {'yes' if rep.guard_met else 'no'} | "
            + " | ".join(cells)
            + " |"
        )
    print("## Summary\n\n" + "\n".join(summary))
    print(
        f"\n{time.perf_counter() - t0:.0f} s; `uptime` after: "
        f"{subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
