"""Write the offline spaCy OpenIE of a corpus as a HippoRAG OpenIE file, optionally filtered.

    python -m benchmarks.kb.spacy_triple_filter --corpus CORPUS.json --out OPENIE.json [--filter ner]

``--filter ner`` keeps a triple only if its subject or object is (after
``normalize_entity``) one of the passage's named entities or its title, which is what
HippoRAG's NER-conditioned LLM prompt asks of a triple; ``none`` keeps every triple
(the same triples ``--openie spacy`` builds from). Build a KB from the result with
``gta-verl kb build --corpus CORPUS.json --openie precomputed:OPENIE.json``.
Prints the triple counts kept and dropped.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def keep_triple(triple: tuple[str, str, str], anchors: set[str]) -> bool:
    """Subject or object is an anchor (normalized named entity or title)."""
    from gta_verl.kb.normalize import normalize_entity

    return normalize_entity(triple[0]) in anchors or normalize_entity(triple[2]) in anchors


def main(argv: list[str] | None = None) -> int:
    from gta_verl.data.loaders import read_corpus
    from gta_verl.kb.normalize import normalize_entity
    from gta_verl.kb.openie.spacy_backend import SpacyOpenIE

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--filter", choices=("none", "ner"), default="ner")
    args = p.parse_args(argv)
    passages = list(read_corpus(args.corpus).records)
    by_id = {x.doc_id: x for x in passages}
    docs, kept, dropped = [], 0, 0
    for ex in SpacyOpenIE().extract(passages):
        psg = by_id[ex.doc_id]
        anchors = {normalize_entity(e) for e in ex.entities} | {normalize_entity(psg.title)}
        triples = [list(t) for t in ex.triples if args.filter == "none" or keep_triple(tuple(t), anchors)]
        kept += len(triples)
        dropped += len(ex.triples) - len(triples)
        docs.append(
            {
                "title": psg.title,
                "text": psg.text,
                "passage": psg.contents,
                "extracted_entities": list(ex.entities),
                "extracted_triples": triples,
            }
        )
    Path(args.out).write_text(json.dumps({"docs": docs}), encoding="utf-8")
    print(f"{len(docs)} passages; triples kept {kept}, dropped {dropped} (filter {args.filter})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
