"""The native stack the suite loads survives a normal interpreter teardown.

``tests/conftest.py`` ends the pytest process with ``os._exit`` after its final status because one CI
run crashed (SIGSEGV, no trace) in interpreter teardown after a green suite. This test runs the
suspected combination on its own, with the normal teardown: torch's thread pool, a faiss search
(faiss's bundled OpenMP), a numba ``parallel=True`` kernel (numba's threading layer) and a Ray driver
that starts, runs a task and shuts down. A crash then fails here, by name, with every thread's stack
(``faulthandler``), instead of being hidden.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow  # a Ray start in the child: 10-60 s on 2 shared cores

CHILD = textwrap.dedent(
    """
    import faulthandler
    faulthandler.enable(all_threads=True)
    import faiss
    import numba
    import numpy as np
    import ray
    import torch

    x = torch.randn(256, 256)
    assert torch.isfinite(x @ x).all()

    index = faiss.IndexFlatIP(64)
    index.add(np.random.rand(2000, 64).astype("float32"))
    index.search(np.random.rand(32, 64).astype("float32"), 5)

    @numba.njit(parallel=True, nogil=True)
    def total(a):
        s = 0.0
        for i in numba.prange(a.shape[0]):
            s += a[i]
        return s

    assert total(np.ones(100_000)) == 100_000

    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)

    @ray.remote
    def inc(v):
        return v + 1

    assert ray.get(inc.remote(1)) == 2
    ray.shutdown()
    print("tearing down", flush=True)
    """
)


def test_torch_faiss_numba_ray_exit_cleanly():
    proc = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300, check=False
    )
    assert "tearing down" in proc.stdout, proc.stderr[-4000:]
    assert proc.returncode == 0, f"exit {proc.returncode} in interpreter teardown:\n{proc.stderr[-8000:]}"
    assert "Fatal Python error" not in proc.stderr
