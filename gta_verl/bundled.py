"""Files that ship inside the package, located with :mod:`importlib.resources`.

The one module that knows where bundled data lives; everything else imports its paths from here, so
a plain (non-editable) ``pip install`` finds the same files as a repository checkout:

* ``assets/musique/`` — the MuSiQue subset the main job, the CPU recipes and the tests build on
  (100 questions, 1,890 passages, GPT-3.5 OpenIE triples; provenance in ``assets/SOURCES.md``);
* ``recipes/cpu/run.sh`` — every recipe through stock verl ``main_ppo`` on CPU (the quickstart's
  ``verl`` stage and ``gta-verl cpu run``; ``recipes/cpu/run.sh`` in a checkout links here);
* ``config/*.yaml`` — the Hydra training configs.

The other datasets under the repository's ``assets/`` do not ship: the scripts that read them take
their path as an argument.

Stdlib only; importing it reads nothing.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def package_root() -> Path:
    """The installed ``gta_verl`` directory on the file system.

    Raises:
        RuntimeError: when the package is imported from a zip (its data files are not real files then).
    """
    root = resources.files("gta_verl")
    if not isinstance(root, Path):
        raise RuntimeError(f"gta_verl is imported from {root!r}, not a directory: install it with pip")
    return root


_ROOT = package_root()

#: The bundled MuSiQue subset (corpus, questions, GPT-3.5 OpenIE).
MUSIQUE_DIR = _ROOT / "assets" / "musique"
MUSIQUE_CORPUS = MUSIQUE_DIR / "musique_train_corpus.json"
MUSIQUE_QA = MUSIQUE_DIR / "musique_train.json"
MUSIQUE_OPENIE = MUSIQUE_DIR / "openie_musique_train_results_ner_gpt-3.5-turbo-1106_1890.json"
#: Provenance, licenses and sha256 of the bundled data.
SOURCES_MD = _ROOT / "assets" / "SOURCES.md"

#: ``bash CPU_RUN_SH <recipe> [overrides]``: the CPU recipes through verl ``main_ppo``.
CPU_RUN_SH = _ROOT / "recipes" / "cpu" / "run.sh"

#: Hydra config directory (``--config-path`` of ``main_ppo``).
CONFIG_DIR = _ROOT / "config"


def require(path: Path, what: str) -> Path:
    """``path`` if it exists, else one line naming the file and what ships it."""
    if not path.exists():
        raise FileNotFoundError(
            f"{what} not found at {path}: this gta_verl install lacks its package data "
            "(reinstall it with pip)"
        )
    return path
