"""Rewards: pure answer / trajectory scoring plus thin verl reward managers.

* :mod:`gta_verl.rewards.qa` — SQuAD normalization, EM, F1, ``<answer>`` extraction, verl score fn.
* :mod:`gta_verl.rewards.trajectory` — GTA-RAG trajectory-guided reward (eqs 15–18) and R_EM (eq 19).
* :mod:`gta_verl.rewards.scoring` — ``DataProto`` → :class:`ScoringRequest`, per-manager scorers.
* :mod:`gta_verl.rewards.placement` — opt-in per-turn reward placement.
* :mod:`gta_verl.rewards.managers` — verl managers ``trajectory_guided`` / ``exact_match``
  (imports verl; loaded by the ``verl.plugins`` entry point, not by this package).
"""
