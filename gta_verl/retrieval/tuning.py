"""Choosing the hybrid order without overfitting: tune on one half of the questions, report on the other.

The hybrid order (``fusion``, ``dense_head``, ``fusion_weight``, optionally
``passage_seed_top``) was once chosen on the same questions it was reported on. Here
every dataset's questions are split in two by a seeded hash of their ids
(:func:`split_halves`); a rule is picked on the *tune* halves only
(:func:`select_fusion`: best mean of R@2 and R@5 among the rules that are ≥ dense
and ≥ graph at every k on every tune half; if none is, the nearest miss) and recall@k is reported on the
*held-out* halves, which took no part in the choice.

The retriever scores each question once per seeding value (:meth:`GraphRetriever.score`);
every candidate order is then applied to those cached scores through the
retriever's own ordering code (:meth:`GraphRetriever.fused_hits`), so a row here
equals what ``gta-verl eval-retrieval`` reports for the same config and questions.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from gta_verl.data.types import QAExample
from gta_verl.retrieval.config import Fusion, Mode, RetrieverConfig
from gta_verl.retrieval.dense_candidates import DenseRow
from gta_verl.retrieval.evaluate import DEFAULT_KS, recall_at_k

K = TypeVar("K", bound=Hashable)
Recalls = Mapping[int, float]

OBJECTIVE_KS = (2, 5)


@dataclass(frozen=True)
class FusionChoice:
    """One candidate hybrid order (the knobs tuning may change)."""

    fusion: Fusion = "dense_head"
    dense_head: int = 1
    fusion_weight: float = 0.5
    passage_seed_top: int = 0

    @property
    def label(self) -> str:
        """Short name, e.g. ``dense_head(1)``, ``score(λ=0.3)``, ``… seed top 100``."""
        args = {"dense_head": f"({self.dense_head})", "score": f"(λ={self.fusion_weight:g})"}
        arg = args.get(self.fusion, "")
        seed = f" seed top {self.passage_seed_top}" if self.passage_seed_top else ""
        return f"{self.fusion}{arg}{seed}"

    def apply(self, config: RetrieverConfig) -> RetrieverConfig:
        """``config`` with this order (and seeding)."""
        return dataclasses.replace(
            config,
            fusion=self.fusion,
            dense_head=self.dense_head,
            fusion_weight=self.fusion_weight,
            passage_seed_top=self.passage_seed_top,
        )


def default_grid(seed_tops: Sequence[int] = (0,)) -> tuple[FusionChoice, ...]:
    """Candidates: rank rules, then score fusion λ = 0.1 … 0.9, for each seeding value.

    The configured default (``dense_head(3)``, every document seeded) comes first, so a
    tie on the tune half keeps it.
    """
    grid: list[FusionChoice] = []
    for top in seed_tops:
        heads = dict.fromkeys((RetrieverConfig().dense_head, 1, 2, 3))  # the configured default first
        grid += [FusionChoice("dense_head", h, passage_seed_top=top) for h in heads]
        rank_rules: tuple[Fusion, ...] = ("interleave", "rrf", "graph_first", "dense_first")
        grid += [FusionChoice(m, passage_seed_top=top) for m in rank_rules]
        grid += [FusionChoice("score", fusion_weight=w / 10, passage_seed_top=top) for w in range(1, 10)]
    return tuple(grid)


def split_halves(qids: Sequence[str], seed: int) -> tuple[list[int], list[int]]:
    """Positions of the tune and held-out halves of questions ``qids``.

    Questions are ordered by ``sha256(f"{seed}:{qid}")``; the first ⌈n/2⌉ are the
    tune half. The split depends only on the ids and the seed, not on file order.

    Raises:
        ValueError: On duplicate ids (a question would sit in both halves).

    >>> split_halves(["a", "b", "c"], 0) == split_halves(["a", "b", "c"], 0)
    True
    """
    if len(set(qids)) != len(qids):
        raise ValueError("question ids must be unique to split them")
    keys = [hashlib.sha256(f"{seed}:{q}".encode()).hexdigest() for q in qids]
    order = sorted(range(len(qids)), key=keys.__getitem__)
    half = (len(qids) + 1) // 2
    return sorted(order[:half]), sorted(order[half:])


def objective(row: Recalls, ks: Sequence[int] = OBJECTIVE_KS) -> float:
    """Mean of ``row`` at ``ks`` (default: (R@2 + R@5) / 2)."""
    return float(np.mean([row[k] for k in ks]))


def dominates(row: Recalls, references: Sequence[Recalls]) -> bool:
    """``row`` ≥ every reference at every k of the reference (ties count as ≥)."""
    return all(row[k] >= ref[k] for ref in references for k in ref)


def select_fusion(
    tables: Sequence[Mapping[K, Recalls]],
    references: Sequence[Sequence[Recalls]],
    objective_ks: Sequence[int] = OBJECTIVE_KS,
) -> tuple[K, bool]:
    """Pick a candidate from recall tables of the tune halves.

    A candidate *passes* if on every dataset it is ≥ each reference row (dense,
    graph) at every k. Among passing candidates the best mean objective over the
    datasets wins. If none passes (``False`` says so), the candidate whose largest
    shortfall below a reference (over datasets, references and k) is smallest wins,
    then the best objective: the goal is "never below dense or graph", so the
    nearest miss is preferred to a higher mean. Ties go to the first candidate.

    Args:
        tables: One ``{candidate: {k: recall}}`` per dataset, same keys and order.
        references: Per dataset, the rows every candidate must match or beat.
        objective_ks: Cut-offs averaged by :func:`objective`.

    Returns:
        ``(candidate, guard_met)``.

    Raises:
        ValueError: On no datasets, mismatched lengths or candidates.
    """
    if not tables or len(tables) != len(references):
        raise ValueError("need one reference list per table and at least one table")
    keys = list(tables[0])
    if not keys or any(list(t) != keys for t in tables):
        raise ValueError("every table must list the same candidates in the same order")

    def score(key: K) -> float:
        return float(np.mean([objective(t[key], objective_ks) for t in tables]))

    def shortfall(key: K) -> float:
        return max(
            ref[k] - t[key][k]
            for t, refs in zip(tables, references, strict=True)
            for ref in refs
            for k in ref
        )

    passing = [
        key
        for key in keys
        if all(dominates(t[key], refs) for t, refs in zip(tables, references, strict=True))
    ]
    if passing:
        best = max(range(len(passing)), key=lambda i: (score(passing[i]), -i))  # first wins a tie
        return passing[best], True
    # none passes: the smallest worst shortfall below a reference, then the objective, then order
    best = min(range(len(keys)), key=lambda i: (round(shortfall(keys[i]), 9), -score(keys[i]), i))
    return keys[best], False


@dataclass(frozen=True)
class Scored:
    """One question's retriever scores (:meth:`GraphRetriever.score` row)."""

    dense: np.ndarray | DenseRow
    graph: tuple[np.ndarray, np.ndarray] | None
    seeded: bool


def score_questions(retriever: Any, questions: Sequence[str], k: int) -> list[Scored]:
    """Score every question once (dense row + PPR top-``k``) with ``retriever``'s config."""
    texts, _ = retriever.prepare_queries(questions)
    out: list[Scored] = []
    step = retriever.config.batch_size
    for start in range(0, len(texts), step):
        dense, graph, seeded = retriever.score(texts[start : start + step], k)
        for b in range(len(dense)):
            g = None if graph is None else (graph[0][b], graph[1][b])
            out.append(Scored(dense[b], g, bool(seeded[b])))
    return out


def mean_recalls(
    retriever: Any,
    scored: Sequence[Scored],
    qa: Sequence[QAExample],
    ks: Sequence[int],
    k_g: int | None = None,
    k_d: int | None = None,
) -> dict[int, float]:
    """Mean recall@k of the hits ``retriever.fused_hits`` orders from cached scores.

    ``k_g``/``k_d`` default to ``max(ks)`` each (= :meth:`GraphRetriever.rank`); pass the
    config's K_g, K_d for R(q), the set the agent sees (then R@k, k ≥ |R(q)|, is the
    recall of the whole set).
    """
    kmax = max(ks)
    k_g = kmax if k_g is None else k_g
    k_d = kmax if k_d is None else k_d
    sums = dict.fromkeys(ks, 0.0)
    for s, ex in zip(scored, qa, strict=True):
        ids = [h.doc_id for h in retriever.fused_hits(s.dense, s.graph, s.seeded, k_g, k_d)]
        for k in ks:
            sums[k] += recall_at_k(ids, ex.supporting_doc_ids, k)
    return {k: round(v / len(qa), 4) for k, v in sums.items()}


@dataclass(frozen=True)
class Dataset:
    """Questions with gold documents and a retriever over their KB."""

    name: str
    retriever: Any
    qa: Sequence[QAExample]


@dataclass(frozen=True)
class DatasetResult:
    """Recall tables of one dataset (``{row: {k: recall}}``)."""

    name: str
    n_tune: int
    n_held_out: int
    tune: dict[str, dict[int, float]]
    held_out: dict[str, dict[int, float]]
    held_out_candidates: dict[str, dict[int, float]]


@dataclass(frozen=True)
class TuneReport:
    """Result of :func:`tune_fusion`: the rule chosen on the tune halves and held-out recall."""

    split_seed: int
    ks: tuple[int, ...]
    objective_ks: tuple[int, ...]
    chosen: FusionChoice
    guard_met: bool
    datasets: tuple[DatasetResult, ...]


class _Tables:
    """Cached scores of one dataset and recall rows computed from them."""

    def __init__(self, ds: Dataset, seed_tops: Sequence[int], ks: Sequence[int]) -> None:
        self.qa = [q for q in ds.qa if q.supporting_doc_ids]
        if not self.qa:
            raise ValueError(f"{ds.name}: no question has gold documents")
        self.base, self.retriever, self.ks = ds.retriever.config, ds.retriever, tuple(ks)
        k = max(max(ks), self.base.k_graph)
        questions = [q.question for q in self.qa]
        self.scored = {
            top: score_questions(
                ds.retriever.with_config(dataclasses.replace(self.base, mode="hybrid", passage_seed_top=top)),
                questions,
                k,
            )
            for top in seed_tops
        }

    def row(
        self, idx: Sequence[int], choice: FusionChoice, mode: Mode, r_q: bool = False
    ) -> dict[int, float]:
        cfg = dataclasses.replace(choice.apply(self.base), mode=mode)
        kg, kd = (cfg.k_graph, cfg.k_dense) if r_q else (None, None)
        scored = self.scored[choice.passage_seed_top]
        return mean_recalls(
            self.retriever.with_config(cfg),
            [scored[i] for i in idx],
            [self.qa[i] for i in idx],
            self.ks,
            kg,
            kd,
        )

    def references(self, idx: Sequence[int], seed_tops: Sequence[int]) -> dict[str, dict[int, float]]:
        """Dense, and graph at every seeding value of the grid (the bars to match)."""
        refs = {"dense": self.row(idx, FusionChoice(passage_seed_top=seed_tops[0]), "dense")}
        for top in seed_tops:
            name = "graph" + (f" seed top {top}" if top else "")
            refs[name] = self.row(idx, FusionChoice(passage_seed_top=top), "graph")
        return refs


def tune_fusion(
    datasets: Sequence[Dataset],
    grid: Sequence[FusionChoice] | None = None,
    split_seed: int = 0,
    ks: Sequence[int] = DEFAULT_KS,
    objective_ks: Sequence[int] = OBJECTIVE_KS,
) -> TuneReport:
    """Choose the hybrid order on the tune halves; report recall on the held-out halves.

    Args:
        datasets: One or more datasets; the chosen rule must suit all of them.
        grid: Candidates (default :func:`default_grid`).
        split_seed: Seed of :func:`split_halves`.
        ks: Cut-offs reported.
        objective_ks: Cut-offs of the selection objective (default R@2, R@5), among ``ks``.

    Returns:
        The choice, whether it met the guard (≥ dense and ≥ graph at every k on every
        tune half) and per dataset the tune table and held-out rows ``dense``,
        ``graph``, ``hybrid (chosen)``, ``R(q) (chosen)`` and ``hybrid (config)``.
    """
    if not set(objective_ks) <= set(ks):
        raise ValueError(f"objective cut-offs {list(objective_ks)} must be among the reported ks {list(ks)}")
    grid = tuple(grid or default_grid())
    seed_tops = list(dict.fromkeys(c.passage_seed_top for c in grid))
    tables = [_Tables(ds, seed_tops, ks) for ds in datasets]
    splits = [split_halves([q.qid for q in t.qa], split_seed) for t in tables]
    tune_tables = [
        {c: t.row(tune, c, "hybrid") for c in grid} for t, (tune, _) in zip(tables, splits, strict=True)
    ]
    tune_refs = [t.references(tune, seed_tops) for t, (tune, _) in zip(tables, splits, strict=True)]
    chosen, met = select_fusion(tune_tables, [list(r.values()) for r in tune_refs], objective_ks)
    results = []
    for ds, t, (tune, held), tt, refs in zip(datasets, tables, splits, tune_tables, tune_refs, strict=True):
        b = t.base
        base_choice = FusionChoice(b.fusion, b.dense_head, b.fusion_weight, b.passage_seed_top)
        held_rows = {
            "dense": t.row(held, chosen, "dense"),
            "graph": t.row(held, chosen, "graph"),
            f"hybrid (chosen: {chosen.label})": t.row(held, chosen, "hybrid"),
            f"R(q) (chosen; K_g={b.k_graph}, K_d={b.k_dense})": t.row(held, chosen, "hybrid", r_q=True),
        }
        if base_choice.passage_seed_top in seed_tops:  # its scores are cached
            held_rows[f"hybrid (config: {base_choice.label})"] = t.row(held, base_choice, "hybrid")
        results.append(
            DatasetResult(
                name=ds.name,
                n_tune=len(tune),
                n_held_out=len(held),
                tune={**refs, **{c.label: r for c, r in tt.items()}},
                held_out=held_rows,
                held_out_candidates={c.label: t.row(held, c, "hybrid") for c in grid},
            )
        )
    return TuneReport(split_seed, tuple(ks), tuple(objective_ks), chosen, met, tuple(results))


def held_out_shortfalls(result: DatasetResult, ks: Sequence[int]) -> list[str]:
    """Where the chosen hybrid falls below dense or graph on the held-out half (``[]`` = nowhere)."""
    rows = result.held_out
    hyb = next(r for name, r in rows.items() if name.startswith("hybrid (chosen"))
    return [
        f"R@{k} {hyb[k]:.3f} < {ref} {rows[ref][k]:.3f}"
        for ref in ("dense", "graph")
        for k in ks
        if hyb[k] < rows[ref][k]
    ]


def _table(rows: Mapping[str, Mapping[int, float]], ks: Sequence[int], bold: str = "") -> list[str]:
    lines = ["| rule | " + " | ".join(f"R@{k}" for k in ks) + " |", "|---|" + "---|" * len(ks)]
    for name, r in rows.items():
        cells = [f"{r[k]:.3f}" for k in ks]
        if name == bold:
            name, cells = f"**{name}**", [f"**{c}**" for c in cells]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def format_tune_report(report: TuneReport) -> str:
    """Markdown: the choice, then per dataset held-out rows, tune table, held-out candidates."""
    obj = " + ".join(f"R@{k}" for k in report.objective_ks)
    guard = "met" if report.guard_met else "NOT met by any candidate (chose the smallest worst shortfall)"
    out = [
        f"Chosen on the tune halves (split seed {report.split_seed}; objective mean of {obj}; "
        f"guard ≥ dense and ≥ graph at every k on every tune half: {guard}): **{report.chosen.label}**",
    ]
    for d in report.datasets:
        out += ["", f"### {d.name}: held-out half ({d.n_held_out} questions, not used for the choice)", ""]
        out += _table(d.held_out, report.ks)
        short = held_out_shortfalls(d, report.ks)
        out += [
            "",
            "Held out, chosen hybrid ≥ dense and ≥ graph at every k: "
            + ("yes" if not short else "no (" + "; ".join(short) + ")"),
        ]
        out += ["", f"{d.name}: tune half ({d.n_tune} questions; the choice was made here)", ""]
        out += _table(d.tune, report.ks, bold=report.chosen.label)
        out += [
            "",
            f"{d.name}: every candidate on the held-out half (inspection only, not used to choose)",
            "",
        ]
        out += _table(d.held_out_candidates, report.ks, bold=report.chosen.label)
    return "\n".join(out)
