"""OpenIE prompts (HippoRAG 2 style: NER first, then NER-conditioned triples), written for gta-verl.

Both prompts ask for one JSON object; :mod:`gta_verl.kb.openie.parse` copes
when the model does not comply. Bump ``PROMPT_VERSION`` on any change: it is
part of the extractor identity, so cached extractions from old prompts are not reused.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from gta_verl.data.types import Passage

PROMPT_VERSION = "v1"

NER_SYSTEM = (
    "You are an information extraction system. Read the passage and list every named entity in it: "
    "people, organizations, places, works, events, dates, quantities and other specific names. "
    "Copy each entity as it appears in the passage. "
    'Reply with a single JSON object {"named_entities": [...]} and nothing else.'
)

_EXAMPLE_PASSAGE = (
    "Lake Baikal\nLake Baikal is a rift lake in the south of Siberia, Russia. Holding about 23,600 cubic "
    "kilometres of water, it is the deepest lake in the world. The Selenga River is its largest inflow."
)
_EXAMPLE_NER = {
    "named_entities": ["Lake Baikal", "Siberia", "Russia", "23,600 cubic kilometres", "Selenga River"]
}
_EXAMPLE_TRIPLES = {
    "triples": [
        ["Lake Baikal", "is a", "rift lake"],
        ["Lake Baikal", "located in", "Siberia"],
        ["Siberia", "part of", "Russia"],
        ["Lake Baikal", "holds", "23,600 cubic kilometres of water"],
        ["Lake Baikal", "is", "deepest lake in the world"],
        ["Selenga River", "largest inflow of", "Lake Baikal"],
    ]
}

TRIPLE_SYSTEM = (
    "You are an information extraction system. Turn the passage into a knowledge graph of "
    "[subject, relation, object] triples. Rules: every triple should contain at least one of the given "
    "named entities, and preferably two; replace pronouns with the entity they refer to; keep relations "
    "short (a verb phrase); one fact per triple. Reply with a single JSON object "
    '{"triples": [[subject, relation, object], ...]} and nothing else.'
)


def ner_messages(passage: Passage) -> list[dict[str, str]]:
    """Chat messages asking for the passage's named entities (one worked example)."""
    return [
        {"role": "system", "content": NER_SYSTEM},
        {"role": "user", "content": f"Passage:\n{_EXAMPLE_PASSAGE}"},
        {"role": "assistant", "content": json.dumps(_EXAMPLE_NER)},
        {"role": "user", "content": f"Passage:\n{passage.contents}"},
    ]


def triple_messages(passage: Passage, entities: Sequence[str]) -> list[dict[str, str]]:
    """Chat messages asking for triples, conditioned on the NER output."""
    return [
        {"role": "system", "content": TRIPLE_SYSTEM},
        {
            "role": "user",
            "content": f"Passage:\n{_EXAMPLE_PASSAGE}\n\nNamed entities: "
            f"{json.dumps(_EXAMPLE_NER['named_entities'])}",
        },
        {"role": "assistant", "content": json.dumps(_EXAMPLE_TRIPLES)},
        {
            "role": "user",
            "content": f"Passage:\n{passage.contents}\n\nNamed entities: "
            f"{json.dumps(list(entities), ensure_ascii=False)}",
        },
    ]
