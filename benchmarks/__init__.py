"""Measurement scripts; each writes or prints one page of ``docs/benchmarks/``.

Run them as modules from the repository root, e.g. ``python -m benchmarks.retriever``: the root is
then on ``sys.path``, so a benchmark imports its siblings (``benchmarks.replicas``) and the test
suite's helpers (``tests.conftest``'s cached KB) with plain imports.
"""
