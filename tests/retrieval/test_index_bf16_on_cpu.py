"""The bfloat16 pre-scan returns exactly the float32 scan's top-n and minimum (or falls back to it)."""

from __future__ import annotations

import numpy as np
import pytest

from gta_verl.retrieval.config import RetrieverConfig
from gta_verl.retrieval.index import BF16_CANDIDATES, BF16_DELTA, VectorIndex, bf16_delta


def _unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("n", [50, 20_000])  # fewer rows than candidates (all kept), and many more
def test_bf16_scan_equals_float32_scan(n: int) -> None:
    rng = np.random.default_rng(n)
    x, q = _unit(rng, n, 384), _unit(rng, 40, 384)
    want_s, want_i, want_m = VectorIndex(x, scan="float32").search_with_min(q, 5)
    index = VectorIndex(x, scan="bfloat16")
    got_s, got_i, got_m = index.search_with_min(q, 5)
    assert np.array_equal(got_i, want_i)
    np.testing.assert_allclose(got_s, want_s, atol=1e-6)
    np.testing.assert_allclose(got_m, want_m, atol=1e-6)
    *_, ok = index._bf16.search_with_min(q, 5)
    assert ok.all()  # random vectors: ≈ 40 rows within 2δ of the 5th best at most, 128 kept


def test_near_ties_fall_back_to_the_float32_scan() -> None:
    """300 rows scattered 3e-3 around one direction: cosines to it ≈ 1 − 2.9e-4 ± 1e-4, all inside the
    2δ ≈ 0.024 window (not certifiable, so exact), yet far apart against float32 rounding (6e-8)."""
    rng = np.random.default_rng(1)
    base = _unit(rng, 1, 64)
    x = np.concatenate([base + 3e-3 * rng.standard_normal((300, 64)), _unit(rng, 2000, 64)]).astype(
        np.float32
    )
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = np.concatenate([base, _unit(rng, 3, 64)]).astype(np.float32)
    index = VectorIndex(x, scan="bfloat16")
    *_, ok = index._bf16.search_with_min(q, 5)
    assert not ok[0] and 300 > BF16_CANDIDATES  # the tied block is larger than the candidate list
    want = VectorIndex(x, scan="float32").search_with_min(q, 5)
    got = index.search_with_min(q, 5)
    assert np.array_equal(got[1], want[1])
    np.testing.assert_allclose(got[0], want[0], atol=1e-6)
    np.testing.assert_allclose(got[2], want[2], atol=1e-6)


def test_bf16_error_stays_inside_the_stated_bound() -> None:
    """δ = (2u + u²) + d·2⁻²⁴ + u(1 + 2.1u) + 1e-5 with u = 2⁻⁸, d = 1024:
    0.0078278 + 0.0000610 + 0.0039383 + 0.00001 = 0.0118371 (per unit ‖q‖·‖x‖)."""
    import torch

    assert bf16_delta(1024) == pytest.approx(0.0118371, abs=1e-7) and BF16_DELTA == bf16_delta(1024)
    rng = np.random.default_rng(2)
    x, q = _unit(rng, 5000, 384), _unit(rng, 16, 384)
    exact = q.astype(np.float64) @ x.T.astype(np.float64)
    approx = (torch.from_numpy(q).bfloat16() @ torch.from_numpy(x).bfloat16().T).float().numpy()
    assert np.abs(approx - exact).max() <= BF16_DELTA


def test_config_default_scan_is_auto_and_validated() -> None:
    assert RetrieverConfig().triple_scan == "auto"
    with pytest.raises(ValueError, match="triple_scan"):
        RetrieverConfig(triple_scan="int8")  # type: ignore[arg-type]
