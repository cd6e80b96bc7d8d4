"""The bundled MuSiQue KB as the test suite and the serving benchmarks build and cache it.

The KB is what ``gta-verl kb build`` makes from the bundled corpus and GPT-3.5 OpenIE file
(:func:`gta_verl.kb.build.build_kb_from_files`, default ``KBConfig``). Callers cache it
under ``$GTA_VERL_CACHE/kb/musique-<key>`` with ``key = musique_kb_key()[:16]``, so a change
of the inputs, the KB code or the schema version builds a fresh one.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import gta_verl
from gta_verl.bundled import MUSIQUE_CORPUS, MUSIQUE_OPENIE

#: The ``--openie`` spec of the bundled precomputed triples.
MUSIQUE_OPENIE_SPEC = f"precomputed:{MUSIQUE_OPENIE}"

_PACKAGE = Path(gta_verl.__file__).resolve().parent

# Code that determines the built KB, relative to the package (cli, the Ray build and other
# backends do not).
_KB_CODE = (
    "data/ids.py",
    "data/types.py",
    "data/loaders.py",
    "kb/*.py",
    "kb/openie/base.py",
    "kb/openie/precomputed.py",
)
_NOT_KB_CODE = ("cli.py", "ray_build.py", "ray_shards.py")


def musique_kb_key() -> str:
    """Fingerprint of the MuSiQue KB's inputs.

    Returns:
        The sha256 hex digest over the schema version, the default ``KBConfig``, the
        corpus and OpenIE files and the KB code (each file's name, then its bytes).
    """
    from gta_verl.kb.build import KBConfig

    h = hashlib.sha256(f"schema={gta_verl.SCHEMA_VERSION};config={KBConfig()!r}".encode())
    files = [MUSIQUE_CORPUS, MUSIQUE_OPENIE]
    for pattern in _KB_CODE:
        files += sorted(p for p in _PACKAGE.glob(pattern) if p.name not in _NOT_KB_CODE)
    for f in files:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def build_musique_kb(out: Path) -> Path:
    """Build the MuSiQue KB into ``out`` exactly as ``gta-verl kb build`` does.

    Args:
        out: The KB directory to write.

    Returns:
        ``out``.
    """
    from gta_verl.kb.build import build_kb_from_files

    build_kb_from_files(MUSIQUE_CORPUS, "hipporag", MUSIQUE_OPENIE_SPEC, out, progress=False)
    return out
