"""The hand-computed reward cases of ``reward_cases.yaml`` (beside this file), loaded once."""

from __future__ import annotations

from pathlib import Path

from gta_verl.testing.reward_cases import load_cases

TABLE = Path(__file__).with_name("reward_cases.yaml")
CASES = load_cases(TABLE)
