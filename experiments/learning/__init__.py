"""The learning campaign: does GRPO through verl teach evidence retrieval on CPU (``README.md`` here).

The verdict and the reproduce commands are on ``docs/learning.md``; the experiment log and each experiment's
data are under ``results/``.
"""
