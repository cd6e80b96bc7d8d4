"""A query encoder that looks query vectors up instead of computing them (benchmarks of retrieval alone).

Query ``"q<i>"`` is row ``i`` of a precomputed matrix, so a benchmark times retrieval without the encoder.
A Ray replica builds its encoder from an import path with no arguments
(:class:`~gta_verl.retrieval.serving.replica.RetrieverReplica`'s ``embedder``): :func:`from_env` reads
the matrix from the ``.npy`` file named by :data:`QUERIES_ENV`, which the driver exports to its workers
(``ray.init(runtime_env={"env_vars": …})``).
"""

from __future__ import annotations

import os

import numpy as np

#: Environment variable naming the ``.npy`` file of query vectors that :func:`from_env` loads.
QUERIES_ENV = "GTA_VERL_QUERY_VECTORS"
#: The import path a replica's ``embedder`` setting names.
FACTORY = "gta_verl.testing.precomputed_encoder:from_env"


class PrecomputedEncoder:
    """Query ``"q<i>"`` → row ``i`` of precomputed unit vectors (encoding is not timed).

    >>> enc = PrecomputedEncoder(np.eye(3, dtype=np.float32))
    >>> enc.encode(["q2", "q0"]).tolist(), enc.dim, enc.name
    ([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]], 3, 'random')
    """

    def __init__(self, vectors: np.ndarray, name: str = "random") -> None:
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self.dim, self.name = self.vectors.shape[1], name

    def encode(self, texts: list[str], batch_size: int = 64, show_progress: bool = False) -> np.ndarray:
        return self.vectors[[int(t[1:]) for t in texts]]


def from_env() -> PrecomputedEncoder:
    """The :class:`PrecomputedEncoder` of the ``.npy`` file named by ``$GTA_VERL_QUERY_VECTORS``."""
    path = os.environ.get(QUERIES_ENV)
    if not path:
        raise RuntimeError(f"${QUERIES_ENV} must name the .npy file of query vectors")
    return PrecomputedEncoder(np.load(path))
