"""Where PathRouter's gold-evidence teacher starts its response: first-token probabilities on Gemma-3-270M.

PathRouter's teacher (:func:`gta_verl.algos.teacher.build_teacher_prompt`) scores the student's response after
a context that also holds the gold passages. Gemma-3-270M's base chat template is plain concatenation, so if
the passages follow the question (round 4's layout: appended to the last user message) the teacher's response
begins right after a passage list while the student's begins after ``Question: …?\\n``. This script measures,
on the base model (fp32, CPU), the probability of ``Doc`` (the word that opens each passage line) and of ``<``
(the first character of every protocol action: ``<search>``, ``<answer>``) as the first response token, for

* the student (the row's few-shot prompt, what the Gemma runs train on),
* the teacher with the passages appended after the question (round 4's layout, rebuilt here as it was),
* the teacher with the passages before the question (today's :func:`build_teacher_prompt`),

over the first ``--n`` bundled MuSiQue training questions with their two supporting paragraphs as S_gt.

    python -m experiments.learning.teacher_boundary [--n 4] [--out docs/benchmarks/teacher_boundary.md]
"""

from __future__ import annotations

import argparse
import ast
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gta_verl.algos.teacher import build_teacher_prompt
from gta_verl.protocol import build_messages

#: Round 4's separator: the passages came after the question, at the end of the last user message.
_ROUND4_HEADER = "\n\nGold supporting evidence for this question:\n"


def round4_teacher_prompt(
    messages: Sequence[Mapping[str, Any]], support: Sequence[str]
) -> list[dict[str, str]]:
    """Round 4's ``build_teacher_prompt``: the gold passages appended after the question (the old layout)."""
    out = [{"role": str(m["role"]), "content": str(m["content"])} for m in messages]
    last = max(i for i, m in enumerate(out) if m["role"] == "user")
    lines = []
    for i, text in enumerate(support):
        title, _, body = str(text).partition("\n")
        lines.append(f"Doc {i + 1}(Title: {title}) {body}")
    out[last]["content"] += _ROUND4_HEADER + "\n".join(lines) + "\n"
    return out


def training_rows(n: int) -> list[tuple[str, list[str]]]:
    """(question, S_gt) of the first ``n`` bundled MuSiQue training questions (S_gt: the supporting
    paragraphs)."""
    from gta_verl.bundled import MUSIQUE_QA

    rows = []
    for ex in json.loads(Path(MUSIQUE_QA).read_text())[:n]:
        paragraphs = ex["paragraphs"]
        paragraphs = ast.literal_eval(paragraphs) if isinstance(paragraphs, str) else paragraphs
        support = [f"{p['title']}\n{p['paragraph_text']}" for p in paragraphs if p["is_supporting"]]
        rows.append((str(ex["question"]), support))
    return rows


def first_token_probs(model: Any, tok: Any, messages: list[dict[str, str]], ids: Mapping[str, int]) -> dict:
    """P(first response token = each of ``ids``) after the rendered ``messages`` (generation prompt added)."""
    import torch

    from gta_verl.verl_compat import normalize_token_ids

    context = normalize_token_ids(
        tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    )
    with torch.no_grad():
        logits = model(torch.tensor([context])).logits[0, -1].float()
    probs = torch.softmax(logits, dim=-1)
    top = int(probs.argmax())
    return {
        **{name: float(probs[i]) for name, i in ids.items()},
        "argmax": tok.decode([top]),
        "tokens": len(context),
        "tail": context[-12:],
    }


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=4, help="training questions (each: 3 forward passes)")
    p.add_argument("--out", type=Path, default=None, help="also write the markdown table here")
    args = p.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from gta_verl.policies import resolve_model

    torch.set_num_threads(max(1, torch.get_num_threads()))
    start = time.time()
    path = resolve_model("gemma-3-270m")
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()
    ids = {}
    for word in ("Doc", "<"):
        enc = tok.encode(word, add_special_tokens=False)
        if len(enc) != 1:
            raise SystemExit(f"{word!r} is not one token here: {enc}")
        ids[word] = enc[0]
    layouts = {
        "student": lambda m, s: m,
        "teacher, passages after the question (round 4)": round4_teacher_prompt,
        "teacher, passages before the question (now)": build_teacher_prompt,
    }
    results: dict[str, list[dict]] = {k: [] for k in layouts}
    for question, support in training_rows(args.n):
        msgs = build_messages(question, style="fewshot")
        for name, build in layouts.items():
            results[name].append(first_token_probs(model, tok, build(msgs, support), ids))
    for r_student, r_now in zip(
        results["student"], results["teacher, passages before the question (now)"], strict=True
    ):
        if r_student["tail"] != r_now["tail"]:
            raise SystemExit("the teacher's context does not end with the student's last 12 tokens")
    lines = [
        f"Gemma-3-270M (base, fp32, CPU), first {args.n} bundled MuSiQue training questions, "
        "few-shot prompt, S_gt = their supporting paragraphs. "
        "Mean (per-question values) of P(first response token):",
        "",
        "| context | P(`Doc`) | P(`<`) | most likely first token |",
        "|---|---|---|---|",
    ]
    for name, rows in results.items():
        doc = [r["Doc"] for r in rows]
        lt = [r["<"] for r in rows]
        top = ", ".join(repr(r["argmax"]) for r in rows)
        lines.append(
            f"| {name} | {sum(doc) / len(doc):.3f} ({', '.join(f'{x:.3f}' for x in doc)}) "
            f"| {sum(lt) / len(lt):.3f} ({', '.join(f'{x:.3f}' for x in lt)}) | {top} |"
        )
    lines += [
        "",
        f"Wall time {time.time() - start:.0f} s "
        f"(`python -m experiments.learning.teacher_boundary --n {args.n}`).",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
