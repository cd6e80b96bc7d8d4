"""Memory per component of the graph retriever, for the size sweep
(``benchmarks/retrieval/retriever_sweep.py``).

Two measurements, kept apart because they answer different questions:

* **Resident size of each component** (:class:`Component`): the bytes of the arrays it holds —
  ``ndarray.nbytes`` for numpy arrays (two arrays over the same buffer counted once), and for a
  faiss index the arrays faiss holds, counted from their element counts (:func:`faiss_bytes`:
  codes, ids, graph links, centroids; it equals ``faiss.serialize_index``'s length up to the file's
  headers, without making the serialized copy, which at 1M rows would be a 1.5 GB transient).
  ``mapped`` is the part of it backed by a memory map right now (``np.load(mmap_mode="r")``; 0 in
  the sweep, which builds everything in process); ``served`` says how a Ray replica holds it
  (:mod:`gta_verl.retrieval.serving.shared_arrays`): mapped from the node cache, read into memory,
  or built privately per replica.
* **Process RSS around each build step** (:class:`MemoryLedger.step`): ``psutil`` RSS before and
  after, which adds what the arrays do not show (Python objects of the KB's tables, faiss's
  allocator slack, temporaries still held) and is lowered by anything freed during the step.

Rows: :meth:`MemoryLedger.row_items` flattens both into the sweep's row dict (``mem:<component>``,
``mem_step:<step>``), so rows of one size merge per component (``merge_rows``);
:func:`memory_table` prints them.
"""

from __future__ import annotations

import contextlib
import mmap
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

#: How a served replica holds each kind of component (gta_verl.retrieval.serving.shared_arrays).
MAPPED = "mapped from the node cache (shared by the node's replicas)"
READ = "read from the node cache into each replica's memory (HNSW cannot be mapped)"
PRIVATE = "built in each replica (not in the node cache)"
NOT_HELD = "not held by a replica"


@dataclass(frozen=True)
class Component:
    """One component's resident size.

    Attributes:
        name: What it is, e.g. ``"passage vectors"``.
        bytes: Resident size (see the module docstring; ``how`` says which count).
        how: ``"nbytes"`` (numpy arrays) or ``"faiss arrays"`` (:func:`faiss_bytes`).
        mapped: Bytes of it backed by a memory map now.
        items: How many items it holds (``per`` says of what), for the per-item cost.
        per: The item: ``"doc"``, ``"triple"``, ``"node"`` or ``"edge"`` (CSR non-zeros count edges).
        served: How a Ray replica holds it (:data:`MAPPED`, :data:`READ`, :data:`PRIVATE`).
    """

    name: str
    bytes: int
    how: str
    mapped: int
    items: int
    per: str
    served: str

    @property
    def per_item(self) -> float:
        return self.bytes / max(1, self.items)


def is_mapped(arr: np.ndarray) -> bool:
    """Whether ``arr``'s buffer is a memory map (an ``np.memmap`` or a view of one, or of an ``mmap``)."""
    obj: Any = arr
    while obj is not None:
        if isinstance(obj, (np.memmap, mmap.mmap)):
            return True
        obj = getattr(obj, "base", None)
    return False


def arrays_in(obj: Any) -> list[np.ndarray]:
    """The numpy arrays in ``obj``: an array, a scipy sparse matrix (data, indices, indptr), or a
    tuple/list/dict of those (nested); anything else holds none."""
    if obj is None:
        return []
    if isinstance(obj, np.ndarray):
        return [obj]
    if all(hasattr(obj, a) for a in ("data", "indices", "indptr")):  # scipy CSR/CSC
        return [obj.data, obj.indices, obj.indptr]
    if isinstance(obj, dict):
        return [a for v in obj.values() for a in arrays_in(v)]
    if isinstance(obj, (tuple, list)):
        return [a for v in obj for a in arrays_in(v)]
    return []


def _byte_bounds(a: np.ndarray) -> tuple[int, int]:
    """``numpy.lib.array_utils.byte_bounds`` (numpy ≥ 2), ``np.byte_bounds`` before."""
    try:
        from numpy.lib.array_utils import byte_bounds
    except ImportError:  # numpy < 2
        byte_bounds = np.byte_bounds
    lo, hi = byte_bounds(a)
    return int(lo), int(hi)


def distinct_nbytes(arrays: Iterable[np.ndarray]) -> tuple[int, int]:
    """``(bytes, mapped bytes)`` of ``arrays``, each buffer counted once (views of one buffer share it).

    >>> x = np.zeros((10, 8), np.float32)
    >>> distinct_nbytes([x, x, x[:5]])
    (320, 0)
    """
    spans: dict[tuple[int, int], bool] = {}
    for a in arrays:
        if a.size == 0:
            continue
        lo, hi = _byte_bounds(a)
        spans[(lo, hi)] = is_mapped(a)
    merged: list[list[Any]] = []  # overlapping spans (a view inside another array) count once
    for (lo, hi), m in sorted(spans.items()):
        if merged and lo < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
            merged[-1][2] = merged[-1][2] or m
        else:
            merged.append([lo, hi, m])
    total = sum(hi - lo for lo, hi, _ in merged)
    return int(total), int(sum(hi - lo for lo, hi, m in merged if m))


def faiss_bytes(index: Any) -> int:
    """The bytes of the arrays a faiss index holds, from their element counts (no serialized copy).

    ``IndexFlat``: ``ntotal × code_size``; ``IndexHNSWFlat``: its flat storage plus the links
    (``neighbors`` int32, ``offsets`` uint64, ``levels`` int32); ``IndexIVF*``: every list's codes
    and int64 ids plus the coarse quantizer (and the PQ codebook of ``IndexIVFPQ``). Equals
    ``len(faiss.serialize_index(index))`` up to headers (tests/retrieval/test_retriever_memory_on_cpu.py).
    """
    import faiss

    idx = faiss.downcast_index(index)
    if isinstance(idx, faiss.IndexHNSW):
        h = idx.hnsw
        links = h.neighbors.size() * 4 + h.offsets.size() * 8 + h.levels.size() * 4
        return int(links + faiss_bytes(idx.storage))
    if isinstance(idx, faiss.IndexIVF):
        lists = idx.invlists
        n = sum(lists.list_size(i) for i in range(idx.nlist))
        pq = getattr(idx, "pq", None)
        codebook = pq.centroids.size() * 4 if pq is not None else 0
        return int(n * (idx.code_size + 8) + faiss_bytes(idx.quantizer) + codebook)
    if isinstance(idx, faiss.IndexFlatCodes):
        return int(idx.ntotal * idx.code_size)
    raise TypeError(f"faiss_bytes: no element count for {type(idx).__name__}")


def arrays_component(name: str, obj: Any, items: int, per: str, served: str) -> Component:
    """A :class:`Component` of the numpy arrays in ``obj`` (:func:`arrays_in`)."""
    total, mapped = distinct_nbytes(arrays_in(obj))
    return Component(name, total, "nbytes", mapped, int(items), per, served)


def faiss_component(name: str, index: Any, items: int, per: str, served: str) -> Component:
    return Component(name, faiss_bytes(index), "faiss arrays", 0, int(items), per, served)


def rss_bytes() -> int:
    """This process's resident set size, bytes (psutil)."""
    import psutil

    return int(psutil.Process().memory_info().rss)


@dataclass
class Step:
    """Process RSS before and after one build step (bytes)."""

    name: str
    rss_before: int
    rss_after: int = 0

    @property
    def delta(self) -> int:
        return self.rss_after - self.rss_before


class MemoryLedger:
    """Components and build steps of one sweep size (module docstring)."""

    def __init__(self, rss: Any = rss_bytes) -> None:
        self.components: list[Component] = []
        self.steps: list[Step] = []
        self._rss = rss

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[Step]:
        """Record the process RSS before and after the ``with`` body as step ``name``."""
        s = Step(name, self._rss())
        try:
            yield s
        finally:
            s.rss_after = self._rss()
            self.steps.append(s)

    def add(self, *components: Component | None) -> None:
        """Record components (``None`` and empty ones skipped)."""
        self.components += [c for c in components if c is not None and c.bytes > 0]

    def row_items(self) -> dict[str, Any]:
        """The sweep row's keys: ``mem:<component>`` → its fields, ``mem_step:<step>`` → RSS before/after."""
        out: dict[str, Any] = {f"mem:{c.name}": asdict(c) for c in self.components}
        out.update(
            {f"mem_step:{s.name}": {"rss_before": s.rss_before, "rss_after": s.rss_after} for s in self.steps}
        )
        return out


# ------------------------------------------------------------------ the retriever's components
def kb_components(kb: Any) -> list[Component]:
    """The KB's passage and triple vectors (a replica maps the KB's ``.npy`` files)."""
    return [
        arrays_component("passage vectors (KB, float32)", kb.passage_emb, kb.n_docs, "doc", MAPPED),
        arrays_component("triple vectors (KB, float32)", kb.triple_emb, len(kb.triple_emb), "triple", MAPPED),
    ]


def triple_components(r: Any, kb: Any) -> list[Component | None]:
    """The retriever's unique-fact vectors (counted only where they are a copy of the KB's), its exact
    flat triple index (faiss's own copy of the rows) and the bfloat16 copy of the certified pre-scan."""
    idx = r._fact_index
    if idx is None:
        return []
    n = idx.n
    fact = np.asarray(r._fact_emb)
    copy = not np.may_share_memory(fact, np.asarray(kb.triple_emb)) if fact.size else False  # bounds only
    name = "unique-fact vectors (retriever's copy)"
    out: list[Component | None] = [arrays_component(name, fact, n, "triple", MAPPED) if copy else None]
    if idx.kind == "flat":
        out.append(faiss_component("exact triple index (faiss flat copy)", idx._index, n, "triple", MAPPED))
    if idx._bf16 is not None:
        bf16 = "triple vectors bf16 copy (pre-scan)"
        out.append(arrays_component(bf16, idx._bf16.bits, n, "triple", MAPPED))
    return out


def transition_components(tr: Any) -> list[Component]:
    """The PPR transition's CSR arrays (``M``, ``S``, strength, perm) and the caches the solvers add
    (the push's int64 row-stochastic CSR, per-node thresholds, per-thread scratch; torch tensors of the
    ``cg`` / ``power`` solvers are not counted)."""
    nnz = int(tr.matrix.nnz)
    main = (tr.matrix, tr.sym, tr.strength, tr.perm)
    caches = [a for v in tr._cache.values() for a in arrays_in(v)]
    return [
        arrays_component("PPR transition (CSR M and S, strength, perm)", main, nnz, "edge", MAPPED),
        arrays_component(
            "PPR transition caches (push CSR int64, per-node arrays, scratch)", caches, nnz, "edge", PRIVATE
        ),
    ]


def basis_component(basis: Any) -> Component | None:
    """The linear PPR's passage basis ``[Z | g]`` (+ ``1ᵀGE`` and ``m``), or ``None`` when not solved."""
    if basis is None:
        return None
    parts = (basis.doc_response, basis.ones_response, basis.emb_mass, basis.node_mass)
    return arrays_component("passage basis [Z | g] (linear PPR)", parts, basis.n_docs, "doc", MAPPED)


def approx_components(av: Any, key: str) -> list[Component | None]:
    """The approximate variant ``key``'s three faiss indexes (rescoring reads the exact rows above)."""
    out: list[Component | None] = []
    if av._passage_index is not None:
        pi = av._passage_index
        out.append(faiss_component(f"passage index {pi.kind} [{key}]", pi._index, pi.n, "doc", PRIVATE))
    fi = av._fact_index
    if fi is not None and fi.kind != "flat":
        served = READ if fi.kind == "hnsw" else MAPPED
        out.append(faiss_component(f"triple index {fi.kind} [{key}]", fi._index, fi.n, "triple", served))
    bi = av._basis_index
    if bi is not None:
        name = f"basis index {bi.index.kind} [{key}]"
        out.append(faiss_component(name, bi.index._index, bi.index.n, "doc", PRIVATE))
    return out


# ------------------------------------------------------------------ tables
def _gib(b: float) -> str:
    return f"{b / 2**30:.3f}"


def memory_table(row: dict[str, Any]) -> list[str]:
    """Markdown: every ``mem:`` component of a sweep row, then every ``mem_step:`` step's RSS change."""
    comps = [v for k, v in row.items() if k.startswith("mem:")]
    steps = [(k[len("mem_step:") :], v) for k, v in row.items() if k.startswith("mem_step:")]
    lines = [
        f"\n#### Memory per component at {row['docs']:,} documents ({row.get('triples', 0):,} triples, "
        f"{row.get('nodes', 0):,} nodes, {row.get('edges', 0):,} edges)\n",
        "| component | resident GiB | counted as | bytes per item | items | mapped now GiB "
        "| held by a served replica |",
        "|---|---:|---|---:|---:|---:|---|",
    ]
    for c in comps:
        lines.append(
            f"| {c['name']} | {_gib(c['bytes'])} | {c['how']} | {c['bytes'] / max(1, c['items']):,.1f} / "
            f"{c['per']} | {c['items']:,} | {_gib(c['mapped'])} | {c['served']} |"
        )
    total = sum(c["bytes"] for c in comps)
    lines.append(f"| **all components** | **{_gib(total)}** | | | | | |")
    if steps:
        lines += [
            "\n| build step | RSS before GiB | RSS after GiB | RSS change GiB |",
            "|---|---:|---:|---:|",
        ]
        for name, s in steps:
            d = s["rss_after"] - s["rss_before"]
            lines.append(f"| {name} | {_gib(s['rss_before'])} | {_gib(s['rss_after'])} | {d / 2**30:+.3f} |")
    return lines
