"""The packing benchmark's argument parsing and grouping (the timings themselves are a benchmark)."""

import pytest

from experiments.learning.packing import groups, parse_lengths


def test_lengths_accept_lists_and_repeats():
    assert parse_lengths("700,300,900") == [700, 300, 900]
    assert parse_lengths("520x3") == [520, 520, 520]
    assert parse_lengths("520x2,900") == [520, 520, 900]


def test_groups_are_consecutive_with_a_short_last_one():
    assert groups([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]
    assert groups([1, 2, 3], 1) == [[1], [2], [3]]
    assert groups([1, 2, 3], 8) == [[1, 2, 3]]
    with pytest.raises(ValueError, match=">= 1"):
        groups([1], 0)
