"""Research campaigns built on the plugin, one folder each: its drivers, its own helpers and its results.

Run them as modules from the repository root, e.g. ``python -m experiments.learning.pretrained``. They import
``gta_verl`` like any user would; neither ``gta_verl`` nor ``benchmarks`` imports them
(``tests/test_import_direction_on_cpu.py``).
"""
