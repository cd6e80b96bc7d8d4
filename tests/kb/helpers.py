"""Small deterministic stand-ins for KB tests (no model load)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import numpy as np


class HashEmbedder:
    """Deterministic pseudo-embeddings; ``fixed`` pins chosen texts to chosen vectors."""

    name = "hash-test"

    def __init__(self, dim: int = 16, fixed: Mapping[str, Sequence[float]] | None = None) -> None:
        self.dim = dim
        self.fixed = {k: np.asarray(v, dtype=np.float32) for k, v in (fixed or {}).items()}
        self.calls: list[list[str]] = []

    def encode(self, texts, batch_size=64, show_progress=False):
        self.calls.append(list(texts))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            if t in self.fixed:
                v = self.fixed[t]
            else:
                seed = int.from_bytes(hashlib.sha1(t.encode()).digest()[:4], "little")
                v = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
            out[i] = v / max(np.linalg.norm(v), 1e-12)
        return out
