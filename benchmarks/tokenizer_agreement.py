"""Does the Gemma tokenizer rebuilt from the GGUF split text as a reference tokenizer does?

Usage:
    python -m benchmarks.tokenizer_agreement --reference REF/tokenizer.json

The reference is any ``tokenizer.json`` of Gemma 3 (e.g. what transformers >= 5.25, whose GGUF conversion is
fixed, saves: in a scratch venv, ``AutoTokenizer.from_pretrained(dir, gguf_file=...).save_pretrained(REF)``;
verl 0.9.1 pins transformers < 5.11, so that venv stays apart from the project's). The texts are the repo's
own data: every bundled MuSiQue passage (title + text) and question prompt, the other ``assets/*/*.json*``
files, and a few edge cases (space runs, tabs, bytes outside the vocabulary, Gemma's turn markers). Prints the
number of texts, tokens and texts whose ids differ, with the first differences.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

EDGE_CASES = (
    "a  b   c\tz\t\td",
    "  leading",
    "trail  ",
    "emoji \U0001f389 é ü 中文 \x00 x",
    "<start_of_turn>user\nhi<end_of_turn>\n",
    "123456 3.14",
    "<search> x </search>\n\n<info>Doc 1(Title: A) b</info>",
)


def repository_texts(root: Path) -> list[str]:
    from gta_verl.bundled import MUSIQUE_CORPUS, MUSIQUE_QA
    from gta_verl.protocol import build_user_prompt

    texts = [f"{d['title']}\n{d['text']}" for d in json.loads(Path(MUSIQUE_CORPUS).read_text())]
    for q in json.loads(Path(MUSIQUE_QA).read_text()):
        texts += [build_user_prompt(q["question"]), str(q.get("answer", ""))]
    texts += [p.read_text()[:200_000] for p in sorted(root.glob("assets/*/*.json*"))]
    return texts + list(EDGE_CASES)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reference", type=Path, required=True, help="a Gemma 3 tokenizer.json")
    args = ap.parse_args()
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    from gta_verl.policies.gemma import prepare_gemma_tokenizer

    ours = AutoTokenizer.from_pretrained(str(prepare_gemma_tokenizer())).backend_tokenizer
    ref = Tokenizer.from_file(str(args.reference))
    texts = repository_texts(Path(__file__).resolve().parents[1])
    n_tokens, differ = 0, []
    for text in texts:
        a, b = ours.encode(text).ids, ref.encode(text).ids
        n_tokens += len(a)
        if a != b:
            differ.append(text[:60])
    print(f"texts {len(texts)}  tokens {n_tokens}  texts whose ids differ {len(differ)}")
    for text in differ[:5]:
        print(f"  differs: {text!r}")


if __name__ == "__main__":
    main()
