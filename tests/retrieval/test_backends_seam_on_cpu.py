"""Every caller opens its retriever through ``gta_verl.retrieval.backends``; none builds a backend class.

Read from the source (AST), not run: the package, the benchmarks and the recipes. A new caller
must be added to :data:`CALLERS` (so the list stays the map of who opens a retriever), and a
module that names a backend class outside the seam and the classes' own modules fails.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("gta_verl", "benchmarks", "recipes")

#: The backend classes and the modules allowed to name them: the seam and their own modules.
BACKEND_CLASSES = {"GraphRetriever", "DenseRetriever", "BM25Retriever", "PassageRanker"}
ALLOWED = {
    "gta_verl/retrieval/backends.py",
    "gta_verl/retrieval/retriever.py",
    "gta_verl/retrieval/dense.py",
    "gta_verl/retrieval/bm25.py",
    "gta_verl/retrieval/passages.py",
}
SEAM = {"open_retriever", "open_kb_retriever"}

#: Who opens a retriever, by role.
CALLERS = {
    # agent loop and tool (in-process transport); the trainer's Ray service reaches the seam in the replicas
    "gta_verl/agent/retriever_access.py",
    # Ray replicas (plain and node-shared arrays)
    "gta_verl/retrieval/serving/replica.py",
    "gta_verl/retrieval/serving/shared_arrays.py",
    # HTTP server
    "gta_verl/retrieval/serving/http.py",
    # evaluation: recall@k (library and CLI) and the out-of-trainer runner
    "gta_verl/retrieval/evaluate.py",
    "gta_verl/retrieval/cli.py",
    "gta_verl/eval/runner.py",
    # synthesis validation: the synth CLI, the CPU recipe inputs, the warm start, the quickstart
    "gta_verl/synth/cli.py",
    "gta_verl/cpu/prepare.py",
    "gta_verl/cpu/warm_start.py",
    "gta_verl/quickstart.py",
    # benchmarks
    "benchmarks/retrieval/fusion_tuning.py",
    "benchmarks/retrieval/graph_recall.py",
    "benchmarks/serving/http_lockout.py",
    "benchmarks/retrieval/inprocess.py",
    "benchmarks/retrieval/linear_eps.py",
    "benchmarks/retrieval/p_distribution.py",
    "benchmarks/retrieval/ppr.py",
    "benchmarks/serving/replicas.py",
    "benchmarks/retrieval/retriever_sweep.py",
    "benchmarks/retrieval/retriever_whole.py",
    "benchmarks/serving/served_throughput.py",
    "benchmarks/serving/stress.py",
    "benchmarks/serving/stress_actor.py",
    "benchmarks/serving/stress_musique.py",
    "benchmarks/synth.py",
}


def _modules() -> dict[str, ast.Module]:
    out = {}
    for root in ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            out[path.relative_to(REPO).as_posix()] = ast.parse(path.read_text(encoding="utf-8"))
    return out


def _named(tree: ast.Module) -> set[str]:
    """Every identifier a module imports or reads (names, attributes, ``from … import`` aliases)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.Name):
            names.add(node.id)
    return names


def test_no_caller_names_a_backend_class() -> None:
    bad = {
        path: sorted(_named(tree) & BACKEND_CLASSES)
        for path, tree in _modules().items()
        if path not in ALLOWED and _named(tree) & BACKEND_CLASSES
    }
    assert not bad, f"open retrievers with gta_verl.retrieval.backends.open_retriever instead: {bad}"


def test_the_callers_of_the_seam_are_the_listed_ones() -> None:
    found = {path for path, tree in _modules().items() if path not in ALLOWED and _named(tree) & SEAM}
    assert found == CALLERS, f"new: {sorted(found - CALLERS)}; gone: {sorted(CALLERS - found)}"


def test_one_spec_creation_path_in_the_package() -> None:
    """The trainer and the agent loop build the service spec from ``gta.retriever`` in one place."""
    builds = {
        path
        for path, tree in _modules().items()
        if path.startswith("gta_verl/")
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", getattr(node.func, "attr", "")) == "RetrieverSpec"
    }
    assert builds == {"gta_verl/retrieval/section.py", "gta_verl/retrieval/serving/service.py"}
