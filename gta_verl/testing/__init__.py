"""Helpers for tests, benchmarks and CPU smoke runs; nothing of the product imports them.

They live inside the package, not under ``tests/``, because Ray workers rebuild the
offline encoder from an import string (``gta_verl.testing.toy_kb:HashEmbedder``) and a
worker's ``sys.path`` holds the installed package, not the checkout's ``tests/``.
"""
