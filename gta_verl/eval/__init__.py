"""Evaluation: answer quality, evidence-chain metrics, routes and costs, per dataset and per hop.

Modules (import what you need; nothing heavy is imported here):
    * :mod:`~gta_verl.eval.metrics`: pure metric functions over ``RolloutRecord`` s;
    * :mod:`~gta_verl.eval.records`: the resumable per-rollout records parquet;
    * :mod:`~gta_verl.eval.runner`: ``evaluate_policy`` through the training agent loop;
    * :mod:`~gta_verl.eval.verl_dumps`: score verl validation-generation dumps;
    * :mod:`~gta_verl.eval.report` / :mod:`~gta_verl.eval.plots`: markdown, JSON and PNG outputs;
    * :mod:`~gta_verl.eval.cli`: ``gta-verl eval``.
"""
