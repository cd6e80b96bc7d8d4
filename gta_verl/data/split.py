"""Train/held-out split of synthetic questions that share no target document across the split.

Two questions are linked when their target sets S(x) intersect; every connected component of that graph goes
wholly to one side, so no held-out question can be answered by recalling a document seen in training. Components
are shuffled with ``seed`` and taken into the held-out side until it reaches ``heldout_fraction`` of the rows.
"""

from __future__ import annotations

import random
from collections.abc import Sequence


def _components(targets: Sequence[Sequence[str]]) -> list[list[int]]:
    parent = list(range(len(targets)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[str, int] = {}
    for i, docs in enumerate(targets):
        for d in docs:
            if d in first:
                parent[find(i)] = find(first[d])
            else:
                first[d] = i
    groups: dict[int, list[int]] = {}
    for i in range(len(targets)):
        groups.setdefault(find(i), []).append(i)
    return sorted(groups.values())


def split_disjoint_targets(targets: Sequence[Sequence[str]], heldout_fraction: float = 0.2,
                           seed: int = 0) -> tuple[list[int], list[int]]:
    """Row indices ``(train, heldout)`` with no target document in both.

    Args:
        targets: Per question, its target document ids S(x).
        heldout_fraction: Share of rows wanted on the held-out side (reached or just passed).
        seed: Shuffle of the components.

    Returns:
        Two sorted index lists partitioning ``range(len(targets))``.
    """
    if not 0.0 < heldout_fraction < 1.0:
        raise ValueError(f"heldout_fraction must be in (0, 1), got {heldout_fraction}")
    comps = _components(targets)
    random.Random(seed).shuffle(comps)
    want = heldout_fraction * len(targets)
    held: list[int] = []
    for comp in comps:
        if len(held) >= want:
            break
        held.extend(comp)
    held_set = set(held)
    return [i for i in range(len(targets)) if i not in held_set], sorted(held)


def split_sft_rl_heldout(targets: Sequence[Sequence[str]], heldout_fraction: float = 0.2, rl_fraction: float = 0.0,
                         seed: int = 0) -> tuple[list[int], list[int], list[int]]:
    """Row indices ``(sft, rl, heldout)``, no target document on two sides.

    The held-out side is cut first (:func:`split_disjoint_targets`), then ``rl_fraction`` of the rest is cut
    the same way for RL prompts that the SFT data never showed; ``rl_fraction = 0`` leaves ``rl`` empty and
    ``sft`` equal to the two-way split's training side.
    """
    train, held = split_disjoint_targets(targets, heldout_fraction, seed)
    if rl_fraction <= 0:
        return train, [], held
    sft_part, rl_part = split_disjoint_targets([targets[i] for i in train], rl_fraction, seed)
    return [train[i] for i in sft_part], [train[i] for i in rl_part], held
