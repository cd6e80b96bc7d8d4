"""Measurement scripts; each writes or prints one page of ``docs/benchmarks/``.

Run them as modules from the repository root, e.g. ``python -m benchmarks.retriever``: the root is
then on ``sys.path``, so a benchmark imports its siblings (``benchmarks.replicas``) with plain
imports. Helpers shared with the test suite (the cached MuSiQue KB, the KB corruptions, the reward
cases' loader) live in :mod:`gta_verl.testing`; no benchmark imports ``tests`` (the reward case
table, ``tests/rewards/reward_cases.yaml``, is data that ``benchmarks/reliability_batch.py`` reads).
"""
