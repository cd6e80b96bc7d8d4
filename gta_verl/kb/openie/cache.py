"""Resumable OpenIE cache: one jsonl per extractor identity, keyed by passage hash.

Each finished passage is appended as one line and fsynced before extraction
moves on, so a run killed at any point loses at most the passage in flight and
the next run re-extracts only what is missing. A torn last line (killed mid-write)
is ignored on load.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from gta_verl.data.types import Passage
from gta_verl.kb.embed import cache_root
from gta_verl.kb.openie.base import Extraction


def passage_key(p: Passage) -> str:
    """Hash of the passage content (title + text), independent of the doc_id scheme."""
    return hashlib.sha256(f"{p.title}\x1f{p.text}".encode()).hexdigest()[:24]


class ExtractionCache:
    """Append-only jsonl cache of :class:`Extraction` s for one extractor identity.

    Args:
        identity: Extractor identity (backend, model, prompt version).
        path: The jsonl file; default ``$GTA_VERL_CACHE/openie/<sha(identity)>.jsonl``.
    """

    def __init__(self, identity: str, path: str | Path | None = None) -> None:
        slug = hashlib.sha256(identity.encode()).hexdigest()[:16]
        self.path = Path(path) if path else cache_root() / "openie" / f"{slug}.jsonl"
        self.identity = identity
        self._mem: dict[str, dict] = {}
        self.n_torn_lines = 0
        self._load()

    def _load(self) -> None:
        if not self.path.exists():
            return
        with open(self.path, encoding="utf-8") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                    self._mem[rec["key"]] = rec["extraction"]
                except (json.JSONDecodeError, KeyError, TypeError):
                    self.n_torn_lines += 1  # a killed writer's partial last line

    def __len__(self) -> int:
        return len(self._mem)

    def get(self, p: Passage) -> Extraction | None:
        rec = self._mem.get(passage_key(p))
        if rec is None:
            return None
        ex = Extraction.from_json(rec)
        # the cache is keyed by content; re-label with the caller's doc id
        return ex if ex.doc_id == p.doc_id else Extraction.from_json({**rec, "doc_id": p.doc_id})

    def put(self, p: Passage, ex: Extraction) -> None:
        key = passage_key(p)
        line = json.dumps(
            {"key": key, "identity": self.identity, "extraction": ex.to_json()}, ensure_ascii=False
        )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            if f.tell() > 0 and not self._ends_with_newline():
                f.write("\n")  # seal a torn line left by a killed run
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
        self._mem[key] = ex.to_json()

    def _ends_with_newline(self) -> bool:
        with open(self.path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            return f.read(1) == b"\n"
