"""Which PPR solver a retriever runs: the one place that decides, and says why when it substitutes.

``RetrieverConfig.ppr_method`` names the solver the user asked for; :func:`pick_solver` returns
the one that actually runs on the given device and personalization, with the reason whenever the
two differ, and :func:`choose_solver` logs that reason once per process. Nothing else in the
package picks a solver.

Why each solver stays:

* ``linear`` (default): exact PPR by linearity (:mod:`gta_verl.retrieval.ppr.linear`); the
  fastest CPU solver when every document is seeded, which is how HippoRAG 2 seeds.
* ``fused``: the numba power iteration (:mod:`gta_verl.retrieval.ppr.fused_power`); what
  ``linear`` falls back to on CPU when only the best ``passage_seed_top`` documents are seeded,
  and the kernel that solves the passage basis of ``linear``.
* ``cg``: conjugate gradients on torch; the only solver that runs on a GPU ``device``.
* ``power``: the plain power iteration; the only one of ``batched_ppr``'s solvers that accepts a
  directed (raw column-stochastic) transition, and the igraph cross-check's reference.
* ``push``: forward push (:mod:`gta_verl.retrieval.ppr.push`); its cost does not grow with the
  graph when the personalization is sparse (``passage_seed_top > 0``), the choice for KBs too
  large for a per-query pass over every node.

Kept free of numpy and numba so that the config can validate ``ppr_method`` without loading
the solvers.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Literal, TypeGuard, get_args

logger = logging.getLogger(__name__)

Method = Literal["push", "cg", "power", "fused", "linear"]
PPR_METHODS: tuple[str, ...] = get_args(Method)


def is_method(name: str) -> TypeGuard[Method]:
    """``name`` is one of :data:`PPR_METHODS`."""
    return name in PPR_METHODS


@dataclass(frozen=True)
class Solver:
    """The solver that runs, and why it is not the one asked for.

    Attributes:
        method: One of :data:`PPR_METHODS`.
        reason: Why ``method`` differs from the configured ``ppr_method`` (or ignores the
            configured ``device``); ``None`` when it runs as configured.
    """

    method: Method
    reason: str | None = None

    @property
    def uses_passage_basis(self) -> bool:
        """The ``linear`` solver runs, so the KB's passage basis is needed."""
        return self.method == "linear"


def pick_solver(ppr_method: str, passage_seed_top: int, device: str) -> Solver:
    """The solver for a configuration, without logging (see :func:`choose_solver`).

    Args:
        ppr_method: The configured ``RetrieverConfig.ppr_method``.
        passage_seed_top: ``RetrieverConfig.passage_seed_top`` (0 = every document seeded).
        device: ``cpu`` or a torch device.

    Returns:
        The :class:`Solver` that runs.

    Raises:
        ValueError: On an unknown ``ppr_method``.

    >>> pick_solver("linear", 0, "cpu")
    Solver(method='linear', reason=None)
    >>> pick_solver("linear", 20, "cpu").method, pick_solver("fused", 0, "cuda").method
    ('fused', 'cg')
    """
    if not is_method(ppr_method):
        raise ValueError(f"ppr_method={ppr_method!r} must be one of {PPR_METHODS}")
    on_cpu = device == "cpu"
    if ppr_method == "linear":
        if not on_cpu:
            return Solver(
                "cg",
                f"ppr_method='linear' runs on CPU only: device={device!r} solves by "
                "conjugate gradients on torch",
            )
        if passage_seed_top > 0:
            return Solver(
                "fused",
                f"ppr_method='linear' needs every document seeded (its basis is linear "
                f"in them); passage_seed_top={passage_seed_top} solves by the fused power "
                "iteration",
            )
    if ppr_method == "fused" and not on_cpu:
        return Solver(
            "cg",
            f"ppr_method='fused' is a CPU kernel: device={device!r} solves by conjugate gradients on torch",
        )
    if ppr_method == "push" and not on_cpu:
        return Solver("push", f"ppr_method='push' is a CPU kernel: it runs on CPU, not on device={device!r}")
    return Solver(ppr_method)


@functools.cache
def choose_solver(ppr_method: str, passage_seed_top: int, device: str) -> Solver:
    """:func:`pick_solver`, logging the reason of a substitution once per process and configuration."""
    solver = pick_solver(ppr_method, passage_seed_top, device)
    if solver.reason:
        logger.warning("PPR solver %r instead of %r: %s", solver.method, ppr_method, solver.reason)
    return solver
