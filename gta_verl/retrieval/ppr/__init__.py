"""Personalized PageRank (GTA-RAG eq 7) over the KB graph: solvers and the one entry the retriever calls.

* :mod:`.transition`: the graph prepared once per KB (:func:`build_transition`);
* :mod:`.choice`: which solver runs for a config, and why when it is not the configured one;
* :mod:`.solve`: :func:`ppr_top_docs`, the top documents of a batch, whichever solver runs;
* :mod:`.basis_index`, :mod:`.linear_approx`: the opt-in ``basis_index`` of the ``linear`` solver;
* the solvers: :mod:`.linear` (default), :mod:`.batched` (``cg``, ``power``, ``fused`` over
  :mod:`.fused_power`), :mod:`.push`.

Names load on first use, so that reading :data:`PPR_METHODS` (the config does) imports no solver.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the checker sees the real names; at run time __getattr__ loads them
    from gta_verl.retrieval.ppr.basis_index import (
        BasisIndex as BasisIndex,
    )
    from gta_verl.retrieval.ppr.basis_index import (
        build_basis_index as build_basis_index,
    )
    from gta_verl.retrieval.ppr.choice import (
        PPR_METHODS as PPR_METHODS,
    )
    from gta_verl.retrieval.ppr.choice import (
        Solver as Solver,
    )
    from gta_verl.retrieval.ppr.choice import (
        choose_solver as choose_solver,
    )
    from gta_verl.retrieval.ppr.choice import (
        pick_solver as pick_solver,
    )
    from gta_verl.retrieval.ppr.linear import (
        PassageBasis as PassageBasis,
    )
    from gta_verl.retrieval.ppr.linear import (
        build_passage_basis as build_passage_basis,
    )
    from gta_verl.retrieval.ppr.solve import (
        minmax_rows as minmax_rows,
    )
    from gta_verl.retrieval.ppr.solve import (
        passage_part as passage_part,
    )
    from gta_verl.retrieval.ppr.solve import (
        ppr_top_docs as ppr_top_docs,
    )
    from gta_verl.retrieval.ppr.solve import (
        topk_stable as topk_stable,
    )
    from gta_verl.retrieval.ppr.transition import (
        Transition as Transition,
    )
    from gta_verl.retrieval.ppr.transition import (
        build_transition as build_transition,
    )

_EXPORTS = {
    "BasisIndex": "basis_index",
    "build_basis_index": "basis_index",
    "PPR_METHODS": "choice",
    "Solver": "choice",
    "choose_solver": "choice",
    "pick_solver": "choice",
    "PassageBasis": "linear",
    "build_passage_basis": "linear",
    "minmax_rows": "solve",
    "passage_part": "solve",
    "ppr_top_docs": "solve",
    "topk_stable": "solve",
    "Transition": "transition",
    "build_transition": "transition",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
