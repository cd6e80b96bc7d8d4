"""Backend 4: read a precomputed HippoRAG OpenIE file instead of extracting.

Accepted layouts: HippoRAG v1 ``{"docs": [{title, text, passage, extracted_entities,
extracted_triples}]}`` and HippoRAG 2 ``{"docs": [{idx, passage, extracted_entities,
extracted_triples}]}`` (also a bare list of such docs). Docs are matched to corpus
passages by ``make_doc_id(title, text)`` when the file has titles, else by the
``passage`` string (``"title\\ntext"`` or the bare text).

The bundled MuSiQue file has 185 malformed triples (2 or 4 elements) and 2
passages without triples: they are counted (``n_malformed``, status ``empty``)
and skipped, never fatal.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from gta_verl.data.ids import make_doc_id
from gta_verl.data.types import Passage
from gta_verl.kb.openie.base import Extraction, make_extraction


class PrecomputedOpenIE:
    """OpenIE results loaded from a HippoRAG-format JSON file.

    Args:
        path: The OpenIE JSON file.

    Raises:
        ValueError: The file is not a HippoRAG OpenIE file (message names the file).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise FileNotFoundError(f"precomputed OpenIE file not found: {self.path}")
        raw = self.path.read_bytes()
        self.identity = f"precomputed:{self.path.name}:{hashlib.sha256(raw).hexdigest()[:12]}"
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{self.path}:{exc.lineno}: not valid JSON: {exc.msg}") from exc
        docs = data.get("docs") if isinstance(data, dict) else data
        if not isinstance(docs, list):
            raise ValueError(  # a file-format error, reported like the JSON error above
                f"{self.path}: expected {{'docs': [...]}} (HippoRAG OpenIE output)"
            )
        self.by_id: dict[str, dict[str, Any]] = {}
        self.by_passage: dict[str, dict[str, Any]] = {}
        self.n_bad_docs = 0
        for doc in docs:
            if not isinstance(doc, dict):
                self.n_bad_docs += 1
                continue
            if isinstance(doc.get("title"), str) and isinstance(doc.get("text"), str):
                self.by_id[make_doc_id(doc["title"], doc["text"])] = doc
            if isinstance(doc.get("passage"), str):
                self.by_passage[doc["passage"]] = doc

    def record(self, p: Passage) -> dict[str, Any] | None:
        """The file's raw doc for ``p`` (malformed triples included), or ``None`` if the file lacks it."""
        return self.by_id.get(p.doc_id) or self.by_passage.get(p.contents) or self.by_passage.get(p.text)

    def extract(self, passages: Sequence[Passage]) -> Iterator[Extraction]:
        for p in passages:
            doc = self.record(p)
            if doc is None:
                yield Extraction(p.doc_id, status="error", error=f"passage not in {self.path.name}")
                continue
            yield make_extraction(
                p.doc_id, doc.get("extracted_entities") or (), doc.get("extracted_triples") or ()
            )
