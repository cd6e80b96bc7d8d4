"""The shared pieces of the Ray KB build (:mod:`gta_verl.kb.ray_build`): its options, its per-stage
statistics, the shard files every stage writes and resumes from, and the actor pool that maps shards.

A shard is ``<name>.parquet`` (temp file + rename) plus a marker ``<name>.done.json`` holding its counts and
the parquet's sha256; a shard counts as finished only when both are there and the checksum still matches.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WORK_LAYOUT = 1  # bump when shard contents change meaning: old shards then stop matching by name


@dataclass(frozen=True)
class RayOptions:
    """How the Ray stages run.

    Attributes:
        address: ``None`` starts a private local Ray instance; ``"auto"`` (or ``ray://…``) joins a cluster.
            Ignored when Ray is already initialised in this process.
        concurrency: Actors per pool (OpenIE and encoder).
        num_gpus: GPUs per encoder actor (0: CPU encoders).
        encoder_num_cpus: CPUs per encoder actor; Ray sets its ``OMP_NUM_THREADS`` to this, and on a CPU
            the vectors' last bits depend on the encoder's thread count, so bit-identity with a
            single-process build needs the CPU count that build ran with.
        openie_num_gpus: GPUs per OpenIE actor (``--openie vllm``).
        shard_passages: Passages per OpenIE shard.
        embed_chunk: Texts per embedding shard; ``None`` = the single-process encoder's chunk
            (needed for bit-identical vectors).
        work_dir: Shard directory (default ``<out>.ray-work`` next to the KB directory).
        cache_dir: Root of the OpenIE / embedding caches (default ``$GTA_VERL_CACHE``).
    """

    address: str | None = None
    concurrency: int = 2
    num_gpus: float = 0.0
    encoder_num_cpus: float = 1.0
    openie_num_gpus: float = 0.0
    shard_passages: int = 256
    embed_chunk: int | None = None
    work_dir: str | None = None
    cache_dir: str | None = None

    def __post_init__(self) -> None:
        chunk_ok = self.embed_chunk is None or self.embed_chunk >= 1
        if self.concurrency < 1 or self.shard_passages < 1 or not chunk_ok:
            raise ValueError(f"concurrency, shard_passages and embed_chunk must be ≥ 1: {self}")
        if self.num_gpus < 0 or self.openie_num_gpus < 0:
            raise ValueError(f"num_gpus must be ≥ 0: {self}")


@dataclass
class StageStats:
    """One row of the summary table."""

    stage: str
    items: int = 0
    triples: int | None = None
    failures: int = 0
    shards_run: int = 0
    shards_resumed: int = 0
    seconds: float = 0.0
    failed_ids: list[str] = field(default_factory=list)


def summary_table(stats: Sequence[StageStats]) -> str:
    """Markdown table: passages/texts, triples, failures, shards run/resumed and time per stage."""
    rows = [
        "| stage | items | triples | failures | shards run | shards resumed | time (s) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for s in stats:
        tri = "" if s.triples is None else f"{s.triples:,}"
        rows.append(
            f"| {s.stage} | {s.items:,} | {tri} | {s.failures:,} | {s.shards_run} | "
            f"{s.shards_resumed} | {s.seconds:.1f} |"
        )
    for s in stats:
        if s.failed_ids:
            more = f" (+{s.failures - len(s.failed_ids)} more)" if s.failures > len(s.failed_ids) else ""
            rows.append(f"\n{s.stage} failures: {', '.join(s.failed_ids)}{more}")
    return "\n".join(rows)


# ------------------------------------------------------------------ shards on disk
def _sha256(path: Path) -> str:
    from gta_verl.kb.store import sha256_file

    return sha256_file(path)


def write_shard(directory: Path, name: str, table: Any, meta: dict[str, Any]) -> None:
    """Write ``table`` (pyarrow) as ``name.parquet``, then its completion marker ``name.done.json``."""
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.parquet"
    tmp = directory / f".{name}.{uuid.uuid4().hex[:8]}.tmp"
    pq.write_table(table, tmp)
    os.replace(tmp, path)
    marker = {**meta, "rows": table.num_rows, "sha256": _sha256(path)}
    tmp = directory / f".{name}.{uuid.uuid4().hex[:8]}.done.tmp"
    tmp.write_text(json.dumps(marker, sort_keys=True))
    os.replace(tmp, directory / f"{name}.done.json")


def finished_shard(directory: Path, name: str) -> dict[str, Any] | None:
    """The marker of a finished shard, or ``None`` (no marker, no parquet, or a parquet that changed)."""
    marker, path = directory / f"{name}.done.json", directory / f"{name}.parquet"
    if not marker.exists() or not path.exists():
        return None
    try:
        meta = json.loads(marker.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return meta if isinstance(meta, dict) and meta.get("sha256") == _sha256(path) else None


def read_shard(directory: Path, name: str) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    return pq.read_table(directory / f"{name}.parquet").to_pylist()


def digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps([WORK_LAYOUT, *parts], default=str).encode()).hexdigest()[:16]


def run_pool(
    actor: type,
    rows: list[dict[str, Any]],
    ctor: dict[str, Any],
    concurrency: int,
    num_gpus: float,
    num_cpus: float = 1.0,
) -> list[dict[str, Any]]:
    """Map ``rows`` (one per shard) through a pool of ``actor``; return the small result rows.

    The pool never asks for more actors than the cluster can hold (Ray Data would wait for them).
    """
    import ray
    import ray.data

    if not rows:
        return []
    total = ray.cluster_resources()
    size = min(concurrency, len(rows), int(total.get("CPU", 1) // num_cpus) if num_cpus else len(rows))
    if num_gpus:
        size = min(size, int(total.get("GPU", 0) // num_gpus))
    ds = ray.data.from_items(rows, override_num_blocks=len(rows))
    out = ds.map_batches(
        actor,
        batch_size=1,
        batch_format="pyarrow",
        fn_constructor_kwargs=ctor,
        compute=ray.data.ActorPoolStrategy(size=max(1, size)),
        num_cpus=num_cpus,
        num_gpus=num_gpus or None,
    )
    return list(out.iter_rows())
