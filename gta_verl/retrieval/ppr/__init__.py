"""Personalized PageRank (GTA-RAG eq 7) over the KB graph: solvers and the one entry the retriever calls.

* :mod:`.transition`: the graph prepared once per KB (:func:`build_transition`);
* :mod:`.choice`: which solver runs for a config, and why when it is not the configured one;
* :mod:`.solve`: :func:`ppr_top_docs`, the top documents of a batch, whichever solver runs;
* the solvers: :mod:`.linear` (default), :mod:`.batched` (``cg``, ``power``, ``fused`` over
  :mod:`.fused_power`), :mod:`.push`.

Names load on first use, so that reading :data:`PPR_METHODS` (the config does) imports no solver.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "PPR_METHODS": "choice",
    "Solver": "choice",
    "choose_solver": "choice",
    "pick_solver": "choice",
    "ppr_top_docs": "solve",
    "Transition": "transition",
    "build_transition": "transition",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
