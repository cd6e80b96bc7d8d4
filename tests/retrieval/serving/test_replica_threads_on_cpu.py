"""Thread caps of a retriever replica: no oversubscribed cores."""

from __future__ import annotations

import faiss
import numba
import torch

from gta_verl.retrieval.serving.replica import limit_threads, replica_threads


def test_replica_threads_follow_reserved_cpus() -> None:
    # int() of the reserved CPUs, at least 1: 2.0 → 2, 1.5 → 1, 0.01 → 0 → 1, None (no reservation) → 1
    assert [replica_threads(c) for c in (2.0, 1.5, 0.01, None)] == [2, 1, 1, 1]


def test_limit_threads_caps_torch_numba_faiss() -> None:
    before = (torch.get_num_threads(), numba.get_num_threads(), faiss.omp_get_max_threads())
    try:
        assert limit_threads(1) == {"torch": 1, "numba": 1, "faiss": 1}
        assert (torch.get_num_threads(), numba.get_num_threads(), faiss.omp_get_max_threads()) == (1, 1, 1)
    finally:
        torch.set_num_threads(before[0])
        numba.set_num_threads(before[1])
        faiss.omp_set_num_threads(before[2])
