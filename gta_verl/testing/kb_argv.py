"""The ``kb build`` command line the tests and benchmarks run: offline spaCy OpenIE, quiet, uncached."""

from __future__ import annotations

from pathlib import Path


def spacy_build_argv(corpus: str | Path, out: str | Path, *extra: str) -> list[str]:
    """``kb build`` of ``corpus`` into ``out`` (argv after the program), then ``extra`` flags.

    >>> spacy_build_argv("c.json", "kb", "--strict")[:3]
    ['kb', 'build', '--corpus']
    """
    build = ["kb", "build", "--corpus", str(corpus), "--openie", "spacy", "--out", str(out)]
    return [*build, "--no-progress", "--no-openie-cache", *extra]
