"""Trajectory augmentation end to end: sample paths → generate → parse → validate.

:func:`synthesize` runs rounds of ``batch_size`` paths until ``n`` trajectories
are kept or the path budget is spent, and accounts for every path in a
:class:`Funnel` (``sampled = generated + rejected``, and so on down to
``validated``), each rejection with its reason code.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise
from pathlib import Path
from typing import Any

from gta_verl.data.types import Trajectory
from gta_verl.kb.knowledge_base import KnowledgeBase
from gta_verl.retrieval.base import Retriever
from gta_verl.synth.generators.base import Generator
from gta_verl.synth.paths import PathSampler, PathSamplerConfig, build_path_index, hop_mix_for
from gta_verl.synth.validate import ValidationConfig, validate_trajectories
from gta_verl.synth.writer import table4_stats

FUNNEL_STAGES = ("sampled", "generated", "parsed", "rules_passed", "validated")


@dataclass(frozen=True)
class SynthesisConfig:
    """Run-level knobs of :func:`synthesize`.

    Attributes:
        sampler: Path sampler config (hop mix, cap of 10 sampled documents per path …).
        validation: Rule thresholds; ``check_retrieval=False`` keeps rule-passing
            trajectories without the retriever check (the "w/o trajectory
            validation" ablation).
        batch_size: Paths per round (one generator call and one batched validation).
        max_paths_factor: Give up after sampling ``max_paths_factor * n`` paths.
    """

    sampler: PathSamplerConfig = field(default_factory=PathSamplerConfig)
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    batch_size: int = 64
    max_paths_factor: int = 20

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.max_paths_factor < 1:
            raise ValueError("SynthesisConfig: batch_size and max_paths_factor must be >= 1")


@dataclass
class Funnel:
    """Yield funnel: counts per stage and rejection reasons per stage."""

    counts: dict[str, int] = field(default_factory=lambda: {s: 0 for s in FUNNEL_STAGES})
    reasons: dict[str, Counter] = field(default_factory=lambda: {s: Counter() for s in FUNNEL_STAGES})
    sampling: dict[str, int] = field(default_factory=dict)
    surplus: int = 0
    """Validated trajectories beyond ``n`` from the last round (not written)."""

    def add(self, stage: str, ok: bool, reason: str | None = None) -> None:
        if ok:
            self.counts[stage] += 1
        else:
            self.reasons[stage][reason or "unknown"] += 1

    def check(self) -> None:
        """Assert the accounting identity count(stage) = count(next) + rejected(next)."""
        for prev, stage in pairwise(FUNNEL_STAGES):
            rejected = sum(self.reasons[stage].values())
            if self.counts[prev] != self.counts[stage] + rejected:
                raise AssertionError(f"funnel: {prev}={self.counts[prev]} != {stage}+rejected")

    def to_dict(self) -> dict[str, Any]:
        stages = [
            {
                "name": s,
                "count": self.counts[s],
                "rejected": sum(self.reasons[s].values()),
                "reasons": dict(self.reasons[s]),
            }
            for s in FUNNEL_STAGES
        ]
        sampled = max(self.counts["sampled"], 1)
        return {
            **self.counts,
            "pass_rate": self.counts["validated"] / sampled,
            "surplus": self.surplus,
            "stages": stages,
            "sampling": dict(self.sampling),
        }


@dataclass
class SynthesisResult:
    """Output of :func:`synthesize`."""

    validated: list[Trajectory]
    """Kept trajectories (D_traj), at most ``n``."""
    unvalidated: list[Trajectory]
    """Every parsed, rule-passing trajectory, retriever check ignored (ablation set)."""
    funnel: Funnel
    stats: dict[str, int]
    """GTA-RAG Table 4 layout for ``validated``."""
    timings: dict[str, float]
    """Seconds spent in sampling, generation and validation."""
    rejected_examples: list[dict[str, Any]] = field(default_factory=list)
    """A few rejected examples per reason (for debugging prompts and templates)."""


def _load(kb: KnowledgeBase | str | Path) -> KnowledgeBase:
    if isinstance(kb, KnowledgeBase):
        return kb
    from gta_verl.kb.store import load_kb

    return load_kb(kb)


def _prepare(
    n: int, hops: Sequence[int] | None, retriever: Retriever | None, config: SynthesisConfig | None
) -> SynthesisConfig:
    """Check the arguments of :func:`synthesize` and fold ``hops`` into the sampler config."""
    if n < 1:
        raise ValueError(f"synthesize: n must be >= 1, got {n}")
    config = config or SynthesisConfig()
    if hops is not None:
        config = replace(config, sampler=replace(config.sampler, hop_mix=hop_mix_for(hops)))
    if config.validation.check_retrieval and retriever is None:
        raise ValueError("synthesize: pass the deployed retriever, or disable check_retrieval")
    return config


@dataclass
class _Run:
    """Mutable state of one :func:`synthesize` call."""

    funnel: Funnel = field(default_factory=Funnel)
    kept: list[Trajectory] = field(default_factory=list)
    unvalidated: list[Trajectory] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)
    per_reason: Counter = field(default_factory=Counter)
    timings: dict[str, float] = field(
        default_factory=lambda: {"sampling_s": 0.0, "generation_s": 0.0, "validation_s": 0.0}
    )

    def reject(self, reason: str, item: dict[str, Any]) -> None:
        """Keep the first few rejected examples of each reason."""
        if self.per_reason[reason] < 3:
            self.per_reason[reason] += 1
            self.rejected.append({"reason": reason, **item})


def _round(
    run: _Run,
    paths: list,
    kb: KnowledgeBase,
    generator: Generator,
    retriever: Retriever | None,
    passages: dict,
    config: SynthesisConfig,
) -> None:
    """Generate and validate one batch of paths, updating the funnel."""
    run.funnel.counts["sampled"] += len(paths)
    t0 = time.perf_counter()
    outcomes = generator.generate(paths, kb)
    run.timings["generation_s"] += time.perf_counter() - t0
    trajs = []
    for o in outcomes:
        run.funnel.add("generated", o.generated, o.reason)
        if o.generated:
            run.funnel.add("parsed", o.trajectory is not None, o.reason)
        if o.trajectory is None:
            run.reject(o.reason or "", {"doc_ids": list(o.path.doc_ids), "raw": o.raw})
        else:
            trajs.append(o.trajectory)
    t0 = time.perf_counter()
    reports = validate_trajectories(trajs, retriever, passages, config.validation)
    run.timings["validation_s"] += time.perf_counter() - t0
    for r in reports:
        run.funnel.add("rules_passed", r.rules_ok, r.reason)
        if r.rules_ok:
            run.unvalidated.append(r.trajectory)
            run.funnel.add("validated", r.ok, r.reason)
        if r.ok:
            run.kept.append(r.trajectory)
        else:
            t = r.trajectory
            run.reject(
                r.reason or "",
                {"question": t.question, "answer": t.answer, "queries": [x.query for x in t.turns]},
            )


def synthesize(
    kb: KnowledgeBase | str | Path,
    retriever: Retriever | None,
    generator: Generator,
    n: int = 200,
    hops: Sequence[int] | None = None,
    seed: int = 0,
    progress: bool = True,
    config: SynthesisConfig | None = None,
) -> SynthesisResult:
    """Build D_traj = {(x, y*, S(x), τ*)} (GTA-RAG eq. 14) from a knowledge base.

    Args:
        kb: A loaded KB or a KB directory.
        retriever: The deployed retriever (same config as training); ``None`` only
            with ``config.validation.check_retrieval=False``.
        generator: Any :class:`Generator` (template, openai, vllm).
        n: Number of kept trajectories wanted.
        hops: Allowed hop counts (weights from our default mix 0.8/0.15/0.05); ``None`` uses
            ``config.sampler.hop_mix``.
        seed: Seed of path sampling.
        progress: Show a tqdm bar.
        config: Run config (defaults if ``None``).

    Returns:
        A :class:`SynthesisResult`; ``validated`` has fewer than ``n`` items only
        when the path budget or the graph ran out.
    """
    config = _prepare(n, hops, retriever, config)
    kb = _load(kb)
    passages = {p.doc_id: p for p in kb.passages}
    run = _Run()
    t0 = time.perf_counter()
    sampler = PathSampler(build_path_index(kb, config.sampler), config.sampler, seed)
    run.timings["index_s"] = time.perf_counter() - t0
    max_paths = config.max_paths_factor * n
    bar = _progress(n, progress)
    while len(run.kept) < n and run.funnel.counts["sampled"] < max_paths:
        t0 = time.perf_counter()
        paths = sampler.sample(min(config.batch_size, max_paths - run.funnel.counts["sampled"]))
        run.timings["sampling_s"] += time.perf_counter() - t0
        if not paths:
            break  # graph exhausted: no new unique path within the attempt budget
        _round(run, paths, kb, generator, retriever, passages, config)
        if bar is not None:
            bar.update(min(len(run.kept), n) - bar.n)
            bar.set_postfix(sampled=run.funnel.counts["sampled"], kept=len(run.kept))
    if bar is not None:
        bar.close()
    return _result(run, sampler, n, config)


def _result(run: _Run, sampler: PathSampler, n: int, config: SynthesisConfig) -> SynthesisResult:
    """The first ``n`` kept trajectories, the funnel checked for consistency, Table-4 statistics."""
    run.funnel.sampling = sampler.stats.to_dict()
    run.funnel.surplus = max(0, len(run.kept) - n)
    run.funnel.check()
    kept = run.kept[:n]
    return SynthesisResult(
        validated=kept,
        unvalidated=run.unvalidated,
        funnel=run.funnel,
        stats=table4_stats(kept, config.sampler.max_sampled_docs),
        timings=run.timings,
        rejected_examples=run.rejected,
    )


def _progress(total: int, enabled: bool):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="synth", unit="traj")
