"""Measurement scripts; each writes or prints one page of ``docs/benchmarks/``.

By what they measure: ``benchmarks/retrieval/`` (the retriever's speed, memory and recall, PPR, encoders,
fusion), ``benchmarks/serving/`` (the Ray actor service, Ray Serve, the HTTP shell, their stress sections),
``benchmarks/kb/`` (KB build cost, OpenIE filtering, KB-write reliability). Left at this level: the synthetic
retriever KB that retrieval and serving both time (``retriever_synth.py``), trajectory synthesis
(``synth.py``), tokenizer agreement and the rollout engines. The learning campaign is a sibling,
``experiments/learning/``: no benchmark imports it (``tests/test_import_direction_on_cpu.py``).

Run them as modules from the repository root, e.g. ``python -m benchmarks.retrieval.retriever``: the root is
then on ``sys.path``, so a benchmark imports its siblings (``benchmarks.serving.replicas``) with plain
imports. Helpers shared with the test suite (the cached MuSiQue KB, the KB corruptions, the reward
cases' loader) live in :mod:`gta_verl.testing`; no benchmark imports ``tests`` (the reward case
table, ``tests/rewards/reward_cases.yaml``, is data that ``benchmarks/kb/reliability_batch.py`` reads).
"""
