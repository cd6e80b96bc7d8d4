"""Published numbers to compare against (copied from the papers' tables, percent).

Only the rows a gta-verl user reproduces are kept: the method itself and the
strongest shared baseline. Keys are canonical dataset names (:func:`canonical_dataset`).
"""

from __future__ import annotations

import re

#: GTA-RAG Table 1: (EM, F1) per dataset for each (backbone, method).
GTA_RAG_TABLE1: dict[str, dict[str, tuple[float, float]]] = {
    "GTA-RAG, Qwen2.5-3B": {
        "hotpotqa": (52.9, 63.9),
        "2wiki": (57.3, 64.1),
        "musique": (29.0, 38.2),
        "popqa": (42.7, 51.7),
        "nq": (40.6, 50.3),
        "average": (44.5, 53.6),
    },
    "Search-R1, Qwen2.5-3B": {
        "hotpotqa": (45.2, 56.9),
        "2wiki": (42.4, 50.8),
        "musique": (22.2, 30.9),
        "popqa": (45.8, 53.3),
        "nq": (46.2, 54.8),
        "average": (40.4, 49.3),
    },
    "GTA-RAG, Qwen2.5-7B": {
        "hotpotqa": (57.2, 69.1),
        "2wiki": (55.4, 62.9),
        "musique": (36.5, 46.2),
        "popqa": (50.4, 57.2),
        "nq": (52.9, 61.5),
        "average": (50.5, 59.3),
    },
    "Search-R1, Qwen2.5-7B": {
        "hotpotqa": (51.0, 62.0),
        "2wiki": (51.8, 58.9),
        "musique": (32.0, 40.8),
        "popqa": (51.3, 57.1),
        "nq": (56.8, 65.3),
        "average": (48.6, 56.8),
    },
}

#: GTA-RAG Table 3 (Qwen2.5-7B, 1,000 held-out trajectory questions):
#: (TargetDocCov %, CompleteTrajCov %, zero-target turns (total), avg search turns).
GTA_RAG_TABLE3: dict[str, tuple[float, float, float, float]] = {
    "w/o trajectory-guided reward": (68.1, 54.3, 1094, 2.48),
    "w/o trajectory validation": (72.4, 61.8, 978, 2.46),
    "GTA-RAG": (82.3, 74.1, 755, 2.42),
}

#: PathRouter Table 2, full model (Qwen2.5-7B-Instruct): (F1, SF-F1, UAR, Turns) per dataset.
PATHROUTER_TABLE2: dict[str, tuple[float, float, float, float]] = {
    "hotpotqa": (70.13, 53.09, 16.54, 2.8),
    "2wiki": (71.04, 47.48, 29.89, 3.5),
    "musique": (54.34, 48.20, 39.95, 3.7),
    "nq": (53.84, 53.35, 26.72, 3.2),
}

_ALIASES = {
    "2wikimultihopqa": "2wiki",
    "2wikimqa": "2wiki",
    "wikimultihopqa": "2wiki",
    "nqopen": "nq",
    "naturalquestions": "nq",
    "hotpot": "hotpotqa",
}


def canonical_dataset(name: str) -> str:
    """Map a ``data_source`` to the papers' dataset key (``"2WikiMultihopQA"`` → ``"2wiki"``)."""
    key = re.sub(r"[^a-z0-9]", "", name.lower())
    for suffix in ("dev", "test", "val", "train"):
        if key.endswith(suffix) and len(key) > len(suffix):
            key = key[: -len(suffix)]
    return _ALIASES.get(key, key)
