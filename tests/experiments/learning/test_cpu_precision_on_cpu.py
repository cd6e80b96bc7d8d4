"""``experiments/learning/cpu_precision.py``: its arithmetic, hand-computed."""

from __future__ import annotations


def test_cpu_precision_rates_by_hand() -> None:
    from experiments.learning.cpu_precision import MATMUL_FLOP, rates_table

    # 2 · 2048 · 640 · 2048 = 5,368,709,120 FLOP; in 0.05 s → 107.4 GFLOP/s
    assert MATMUL_FLOP == 5_368_709_120
    table = rates_table({"matmul": 0.05, "forward": 2.0, "forward+backward": 8.0}, n_tokens=1_200)
    assert "| matmul | 0.0500 | 107.4 GFLOP/s |" in table
    assert "| forward | 2.0000 | 600 tokens/s |" in table  # 1,200 tokens / 2 s
    assert "| forward+backward | 8.0000 | 150 tokens/s |" in table  # 1,200 / 8
