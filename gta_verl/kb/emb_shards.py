"""Shards of the on-disk embedding cache (:class:`gta_verl.kb.embed.EmbeddingCache`): read one and
check it, or set a damaged one aside so that its texts are encoded again."""

from __future__ import annotations

import logging
import os
import zipfile
import zlib
from pathlib import Path

import numpy as np


class BadShard(ValueError):
    """An embedding-cache shard that cannot be used (cut, not an npz, wrong arrays, non-finite vectors)."""


def read_shard(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(keys S20 [n], vecs float32 [n, dim])`` of one shard, every vector finite.

    Raises:
        BadShard: naming what is wrong (a truncated file is a ``BadZipFile`` or a short read inside).
        FileNotFoundError: the shard is gone.
    """
    try:
        with np.load(path, allow_pickle=False) as z:
            keys, vecs = z["keys"], z["vecs"]
    except FileNotFoundError:
        raise
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        raise BadShard(f"unreadable ({type(exc).__name__}: {exc})") from exc
    if keys.ndim != 1 or keys.dtype.kind != "S" or vecs.ndim != 2 or vecs.dtype != np.float32:
        raise BadShard(f"wrong arrays (keys {keys.dtype} {keys.shape}, vecs {vecs.dtype} {vecs.shape})")
    if len(keys) != len(vecs):
        raise BadShard(f"{len(keys)} keys for {len(vecs)} vectors")
    if not np.isfinite(vecs).all():
        raise BadShard("vectors hold NaN or infinity")
    return keys, vecs


def set_aside(shard: Path, reason: str) -> None:
    """Rename a bad shard to ``NAME.bad`` (kept for inspection, no longer read) and say so once."""
    try:
        os.replace(shard, shard.with_name(shard.name + ".bad"))
    except FileNotFoundError:  # another process set it aside first
        return
    logging.getLogger(__name__).warning(
        "embedding cache shard %s is %s: set aside as %s.bad, its texts are encoded again",
        shard,
        reason,
        shard.name,
    )
