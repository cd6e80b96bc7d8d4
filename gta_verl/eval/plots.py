"""PNG plots for evaluation reports (matplotlib, Agg backend: no display needed).

* :func:`plot_route_shares`: PathRouter route shares over training steps (paper Fig. 5),
  read from a training metrics log (:func:`read_route_shares`).
* :func:`plot_coverage_by_hops`: TargetDocCov and CompleteTrajCov per hop count.
* :func:`plot_search_turn_histogram`: how many searches rollouts made.
* :func:`plot_route_distribution`: the 2×2 route mix per dataset (paper Fig. 3).
"""

from __future__ import annotations

import csv
import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gta_verl.data.io import atomic_path

ROUTE_SHARE_KEY = "path_router/route_share/"


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # headless: CI and GPU nodes have no display
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path | str) -> Path:
    """Save atomically (temp + rename) and close the figure."""
    path = Path(path)
    try:
        with atomic_path(path, suffix=".png") as tmp:
            fig.savefig(tmp, dpi=110, bbox_inches="tight", format="png")
    finally:
        _pyplot().close(fig)
    return path


def _route_items(data: Mapping[str, Any]) -> dict[str, float]:
    out = {}
    for key, value in data.items():
        if ROUTE_SHARE_KEY in key and value not in (None, ""):
            out[key.split(ROUTE_SHARE_KEY, 1)[1]] = float(value)
    return out


def read_route_shares(path: Path | str) -> dict[str, list[tuple[int, float]]]:
    """Read ``…path_router/route_share/<route>`` metrics per step from a training log.

    Accepted formats:
        * jsonl of verl's ``file`` logger: ``{"step": s, "data": {metric: value}}`` per line;
        * jsonl of flat dicts with a ``step`` key;
        * CSV with a ``step`` column and one column per metric.
    Any prefix before ``path_router/route_share/`` (``train/``, ``val-aux/``…) is accepted.

    Returns:
        ``{route: [(step, share), …]}`` sorted by step.

    Raises:
        ValueError: naming the file and line of a malformed entry, or when no route
            share metric is present.
    """
    path = Path(path)
    series: dict[str, list[tuple[int, float]]] = {}
    if path.suffix.lower() == ".csv":
        with path.open(newline="") as fh:
            rows = [(i + 2, dict(r)) for i, r in enumerate(csv.DictReader(fh))]
    else:
        rows = []
        for lineno, line in enumerate(path.read_text().splitlines(), start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: not JSON ({exc.msg})") from exc
            data = obj.get("data", obj) if isinstance(obj.get("data"), Mapping) else obj
            rows.append((lineno, {**data, "step": obj.get("step", data.get("step"))}))
    for lineno, row in rows:
        shares = _route_items(row)
        if not shares:
            continue
        if row.get("step") in (None, ""):
            raise ValueError(f"{path}:{lineno}: route-share metrics without a 'step'")
        for route, share in shares.items():
            series.setdefault(route, []).append((int(float(row["step"])), share))
    if not series:
        raise ValueError(f"{path}: no '{ROUTE_SHARE_KEY}*' metrics found")
    return {k: sorted(v) for k, v in sorted(series.items())}


def plot_route_shares(series: Mapping[str, Sequence[tuple[int, float]]], out: Path | str) -> Path:
    """Line plot of each route's share over training steps."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for route, points in series.items():
        steps, shares = zip(*points, strict=True) if points else ((), ())
        ax.plot(steps, [100 * s for s in shares], marker="o", markersize=3, label=route)
    ax.set_xlabel("training step")
    ax.set_ylabel("share of rollouts (%)")
    ax.set_title("PathRouter route shares over training")
    ax.legend(frameon=False, fontsize=8)
    return _save(fig, out)


def plot_coverage_by_hops(per_hops: Mapping[int, Mapping[str, float]], out: Path | str) -> Path:
    """Grouped bars of TargetDocCov and CompleteTrajCov (%) per hop count (hops 0 = unknown)."""
    plt = _pyplot()
    hops = [h for h in sorted(per_hops) if per_hops[h].get("n_with_targets", 0)]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    width = 0.38
    for offset, key, label in (
        (-width / 2, "target_doc_cov", "TargetDocCov"),
        (width / 2, "complete_traj_cov", "CompleteTrajCov"),
    ):
        vals = [100 * per_hops[h][key] if not math.isnan(per_hops[h][key]) else 0.0 for h in hops]
        ax.bar([i + offset for i in range(len(hops))], vals, width, label=label)
    ax.set_xticks(range(len(hops)), [f"{h}-hop (n={int(per_hops[h]['n_with_targets'])})" for h in hops])
    ax.set_ylim(0, 100)
    ax.set_ylabel("coverage (%)")
    ax.set_title("Evidence coverage by hop count")
    ax.legend(frameon=False, fontsize=8)
    return _save(fig, out)


def plot_search_turn_histogram(num_searches: Sequence[int], out: Path | str) -> Path:
    """Bar histogram: number of rollouts per search-turn count."""
    plt = _pyplot()
    counts = Counter(int(n) for n in num_searches)
    xs = list(range(max(counts, default=0) + 1))
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.bar(xs, [counts.get(x, 0) for x in xs])
    ax.set_xticks(xs)
    ax.set_xlabel("search turns per rollout")
    ax.set_ylabel("rollouts")
    ax.set_title(f"Search turns (n={len(num_searches)})")
    return _save(fig, out)


def plot_route_distribution(per_dataset: Mapping[str, Mapping[str, float]], out: Path | str) -> Path:
    """Stacked bars of the route mix (%) per dataset, datasets without routes skipped."""
    plt = _pyplot()
    names = [d for d, s in per_dataset.items() if any(k.startswith("route/") for k in s)]
    routes = sorted({k for d in names for k in per_dataset[d] if k.startswith("route/")})
    fig, ax = plt.subplots(figsize=(max(4, 1.2 * len(names) + 2), 3.5))
    bottom = [0.0] * len(names)
    for key in routes:
        vals = [100 * per_dataset[d].get(key, 0.0) for d in names]
        ax.bar(names, vals, bottom=bottom, label=key.split("/", 1)[1])
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.set_ylim(0, 100)
    ax.set_ylabel("share of rollouts (%)")
    ax.set_title("PathRouter routes at evaluation")
    ax.legend(frameon=False, fontsize=8, bbox_to_anchor=(1.0, 1.0), loc="upper left")
    return _save(fig, out)
