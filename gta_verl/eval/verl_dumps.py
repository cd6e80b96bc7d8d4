"""Score a training run's validation generations from verl's dump, without re-running the policy.

verl 0.9.1 (V1 ``PPOTrainer._validate``, ``trainer/ppo/v1/trainer_base.py:1031-1283``, and the
classic ``RayPPOTrainer._validate``, both → ``_dump_generations`` → ``_write_generations``)
writes, when ``trainer.validation_data_dir`` is set, one file ``<dir>/<global_step>.jsonl``
per validation (``0.jsonl`` for ``trainer.val_only=True``) with one JSON object per rollout
(V1 adds ``uid`` = ``<prompt uid>_<session>_<output>``)::

    input   decoded prompt (chat template applied, special tokens skipped)
    output  decoded response: policy text *and* the <info> observations
    gts     reward_model.ground_truth ({"target", "target_doc_ids", "support_texts"})
    score   the reward
    step    global step
    <key>   every reward_extra_info key with one value per rollout (gta managers: acc,
            f1, num_searches, target_doc_cov, complete_chain, zero_target_turns,
            retrieval_errors, invalid_actions, …; ``reward`` = score)

The dump has no ``data_source``, doc ids or token counts, so this module rebuilds the
:class:`~gta_verl.data.types.RolloutRecord` from the text: the question from the prompt,
each ``<search>`` query and the ``Doc i(Title: …) …`` lines of the ``<info>`` block that
follows it, and the answer, all with the agent loop's own parser
(:func:`gta_verl.protocol.parse_turns` / :func:`~gta_verl.protocol.final_answer`). Doc ids: with
the KB (:func:`kb_doc_index`) each shown passage is looked up by title and text, which
also resolves titles containing ``") "`` and passages cut off by
``gta.agent.max_obs_tokens``; without it the id is ``make_doc_id(title, text)`` of the
text as shown (exact unless the passage was cut). Passages the cut hid entirely are not
in the dump, so coverage from a dump counts only what the policy saw. ``data_source``/``hops``/``qid`` come
from reward_extra_info keys of those names when present, else from the validation
parquet(s) joined on the question text, else ``"unknown"``.
"""

from __future__ import annotations

import ast
import contextlib
import json
import logging
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gta_verl.data.ids import make_doc_id
from gta_verl.data.schema import EF_TURN_DOC_IDS, parse_count, parse_ground_truth, parse_turn_doc_ids
from gta_verl.data.types import RolloutRecord
from gta_verl.eval.records import EvalRecord
from gta_verl.protocol import SEARCH_FAILED_PREFIX, build_user_prompt, final_answer, parse_turns

logger = logging.getLogger(__name__)

REQUIRED_KEYS = ("input", "output", "gts")
_QUESTION_RE = re.compile(r"Question: (.*?)\s*(?:\n|$)")
_DOC_SPLIT_RE = re.compile(r"(?:^|\n)Doc \d+\(Title: ")


@dataclass(frozen=True)
class QuestionInfo:
    """What the validation parquet knows about a question (joined on the question text)."""

    data_source: str = "unknown"
    hops: int = 0
    qid: str = ""


@dataclass
class DumpReadResult:
    """Records rebuilt from one dump file, and the rejected lines.

    Counts reconcile: ``n_in == len(records) + len(rejected)``.
    """

    path: Path
    step: int | None
    records: list[EvalRecord] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    n_in: int = 0


def find_dump_file(path: Path | str, step: int | None = None) -> Path:
    """Resolve a dump file: a ``.jsonl`` path, or ``<dir>/<step>.jsonl`` (latest step when None)."""
    p = Path(path)
    if p.is_file():
        return p
    if not p.is_dir():
        raise FileNotFoundError(f"{p}: no verl validation dump (file or trainer.validation_data_dir)")
    files = {int(f.stem): f for f in p.glob("*.jsonl") if f.stem.isdigit()}
    if not files:
        raise FileNotFoundError(f"{p}: no <step>.jsonl files (is this trainer.validation_data_dir?)")
    if step is None:
        return files[max(files)]
    if step not in files:
        raise FileNotFoundError(f"{p}: no {step}.jsonl; steps present: {sorted(files)}")
    return files[step]


def question_from_prompt(prompt_text: str) -> str:
    """The question of :func:`gta_verl.protocol.build_user_prompt` (last ``Question: …`` line)."""
    matches = _QUESTION_RE.findall(prompt_text)
    return matches[-1].strip() if matches else ""


#: title → [(doc_id, NFC text)] of a KB, to resolve observed passages to their ids.
DocIndex = Mapping[str, Sequence[tuple[str, str]]]


def _nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)  # Qwen's tokenizer NFC-normalizes what it encodes


def _resolve(title: str, visible: str, index: DocIndex) -> tuple[str, str] | None:
    """(doc_id, full text) of the KB passage shown as ``title``/``visible``: an exact match, or
    the passage ``visible`` is a prefix of (the agent loop cuts long observations at
    ``gta.agent.max_obs_tokens``)."""
    cands = index.get(_nfc(title), ())
    vis = _nfc(visible).rstrip()
    for doc_id, text in cands:
        if text == vis or text.rstrip() == vis:
            return doc_id, text
    for doc_id, text in cands:
        if vis and text.startswith(vis):
            return doc_id, text
    return None


def _split_doc(chunk: str, index: DocIndex | None) -> tuple[str, str, str]:
    """(doc_id, title, text) of one ``"<title>) <text>"`` chunk.

    A title may contain ``") "``, so each split point is tried against the KB index;
    without an index (or no match) the first split point is taken and the id is the
    content hash of what was shown (wrong only for a cut-off passage).
    """
    cuts = [m.start() for m in re.finditer(re.escape(") "), chunk)]
    if not cuts:
        title = chunk.rstrip(")")
        return make_doc_id(title, ""), title, ""
    if index:
        for c in cuts:
            hit = _resolve(chunk[:c], chunk[c + 2 :], index)
            if hit is not None:
                return hit[0], chunk[:c], hit[1]
    title, text = chunk[: cuts[0]], chunk[cuts[0] + 2 :]
    return make_doc_id(title, text), title, text


def parse_observation(body: str, index: DocIndex | None = None) -> tuple[list[tuple[str, str, str]], bool]:
    """Parse one ``<info>`` body into ``[(doc_id, title, text)]`` and whether it reports a failed search."""
    body = body.strip("\n")
    if body.startswith(SEARCH_FAILED_PREFIX):
        return [], True
    chunks = _DOC_SPLIT_RE.split("\n" + body)[1:]
    return [_split_doc(c, index) for c in chunks], False


def parse_response(
    response_text: str, index: DocIndex | None = None
) -> tuple[list[str], list[list[tuple[str, str, str]]], int]:
    """Pair each search action with the ``<info>`` block after it (the loop's own parser).

    Returns:
        (queries, per-turn [(doc_id, title, text)], number of failed searches). A search
        without a following observation (truncated response) gets no documents.
    """
    queries: list[str] = []
    docs: list[list[tuple[str, str, str]]] = []
    failed = 0
    for turn in parse_turns(response_text):
        if turn.action.kind != "search":
            continue
        queries.append(turn.action.content)
        parsed, err = ([], False) if turn.observation is None else parse_observation(turn.observation, index)
        docs.append(parsed)
        failed += int(err)
    return queries, docs, failed


def _ground_truth(value: Any) -> Any:
    """``gts`` is a dict in JSON; tolerate ``default=str`` renderings of Python/numpy values."""
    if isinstance(value, str):
        for parse in (json.loads, ast.literal_eval):
            try:
                return parse(value)
            except (ValueError, SyntaxError):
                continue
    return value


def _dumped_turn_doc_ids(entry: Mapping[str, Any]) -> list[list[str]] | None:
    """The per-turn doc ids a manager dumped (``gta/turn_doc_ids``, or ``turn_doc_ids``), None if none.

    verl writes each value as JSON (``default=str``); a value a manager sent as JSON text is decoded
    once, and whatever comes out is read by the reward's own reader,
    :func:`gta_verl.data.schema.parse_turn_doc_ids`: a string that is no JSON list (``"d1d2"``), a
    flat list of ids … rejects the line with its message instead of being read as something else.
    """
    key = EF_TURN_DOC_IDS if EF_TURN_DOC_IDS in entry else "turn_doc_ids"
    value = _dumped(entry, key)
    return None if value is None else parse_turn_doc_ids(value, key)


def _dumped(entry: Mapping[str, Any], key: str) -> Any:
    """``entry[key]`` with a JSON text decoded once (``default=str`` writes a numpy int as ``"3"``)."""
    value = entry.get(key)
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = json.loads(value)
    return value


def record_from_entry(
    entry: Mapping[str, Any], sample_idx: int, info: QuestionInfo, index: DocIndex | None = None
) -> EvalRecord:
    """Rebuild one :class:`EvalRecord` from a dump line (see module docstring)."""
    answers, target_ids, support = parse_ground_truth(_ground_truth(entry["gts"]))
    if not answers:
        raise ValueError("ground truth has no gold answer")
    output = str(entry["output"])
    queries, docs, failed = parse_response(output, index)
    turn_ids = [[d for d, _, _ in turn] for turn in docs]
    dumped_ids = _dumped_turn_doc_ids(entry)
    if dumped_ids is not None and len(dumped_ids) == len(queries):
        turn_ids = dumped_ids  # exact ids when the manager dumped them
    question = question_from_prompt(str(entry["input"]))
    errors = _dumped(entry, "retrieval_errors")
    return EvalRecord(
        rollout=RolloutRecord(
            question=question,
            gold_answers=tuple(answers),
            target_doc_ids=tuple(target_ids),
            turn_queries=tuple(queries),
            turn_doc_ids=tuple(tuple(t) for t in turn_ids),
            answer=final_answer(output),
            retrieval_errors=parse_count(errors, "retrieval_errors") if errors is not None else failed,
            invalid_actions=parse_count(_dumped(entry, "invalid_actions"), "invalid_actions"),
            data_source=str(entry.get("data_source") or info.data_source),
            hops=int(entry.get("hops") or info.hops),
            qid=str(entry.get("qid") or info.qid or question),
            sample_idx=sample_idx,
            retrieved_texts=tuple(f"{t}\n{x}" for turn in docs for _, t, x in turn),
            gold_texts=tuple(support),
        ),
        response_text=output,
    )


def read_verl_dump(
    path: Path | str,
    step: int | None = None,
    questions: Mapping[str, QuestionInfo] | None = None,
    index: DocIndex | None = None,
) -> DumpReadResult:
    """Read one validation dump into :class:`EvalRecord` s.

    Args:
        path: A ``<step>.jsonl`` file or ``trainer.validation_data_dir``.
        step: Which step's file in a directory (default: the latest).
        questions: question text → :class:`QuestionInfo` (see :func:`question_index`).
        index: :func:`kb_doc_index` of the KB, to resolve titles containing ``") "`` and
            passages cut off by ``max_obs_tokens`` to their exact ids.
    """
    file = find_dump_file(path, step)
    result = DumpReadResult(path=file, step=int(file.stem) if file.stem.isdigit() else step)
    seen: Counter[str] = Counter()
    for lineno, line in enumerate(file.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        result.n_in += 1
        try:
            entry = json.loads(line)
            missing = [k for k in REQUIRED_KEYS if k not in entry]
            if missing:
                raise ValueError(f"missing keys {missing}")
            q = question_from_prompt(str(entry["input"]))
            rec = record_from_entry(entry, seen[q], (questions or {}).get(q, QuestionInfo()), index)
        except (ValueError, TypeError, KeyError) as exc:
            result.rejected.append(f"{file}:{lineno}: {exc}")
            continue
        seen[q] += 1  # verl repeats each prompt val_kwargs.n times, interleaved
        result.records.append(rec)
    if result.rejected:
        logger.warning(
            "%s: %d of %d lines rejected, first: %s",
            file,
            len(result.rejected),
            result.n_in,
            result.rejected[0],
        )
    return result


def question_index(parquet_paths: Iterable[Path | str]) -> dict[str, QuestionInfo]:
    """Map question text (as :func:`question_from_prompt` reads it back) → (data_source, hops, qid)
    from verl-format parquet files."""
    out: dict[str, QuestionInfo] = {}
    for path in parquet_paths:
        for i, row in enumerate(_question_rows(path)):
            info = row.get("extra_info") or {}
            if info.get("question"):
                key = question_from_prompt(build_user_prompt(str(info["question"])))
            else:
                prompt = row.get("prompt")
                key = question_from_prompt(str(prompt[-1]["content"])) if prompt is not None else ""
            if key:
                out[key] = QuestionInfo(
                    data_source=str(row.get("data_source") or "unknown"),
                    hops=int(info.get("hops") or 0),
                    qid=str(info.get("qid") or f"{Path(path).stem}:{i}"),
                )
    return out


def _question_rows(path: Path | str) -> list[dict[str, Any]]:
    """The rows of one ``--data`` file, refused in one line when it cannot name a question.

    Raises:
        DataFormatError: unreadable, or neither a ``prompt`` nor an ``extra_info`` column
            (the dump's rollouts would silently keep ``data_source`` "unknown" and no qid).
    """
    import pandas as pd

    from gta_verl.data.loaders import DataFormatError

    try:
        df = pd.read_parquet(path)
    except Exception as exc:  # not parquet, missing, cut: pyarrow raises several types
        raise DataFormatError(f"{path}: --data is not a readable parquet ({exc})".splitlines()[0]) from None
    if "prompt" not in df.columns and "extra_info" not in df.columns:
        raise DataFormatError(
            f"{path}: --data needs a verl QA parquet (a prompt or extra_info column), "
            f"got columns {sorted(map(str, df.columns))}"
        )
    return list(df.to_dict("records"))


def kb_doc_index(kb_dir: Path | str) -> dict[str, list[tuple[str, str]]]:
    """:data:`DocIndex` of a KB directory (reads ``passages.parquet``)."""
    import pyarrow.parquet as pq

    path = Path(kb_dir) / "passages.parquet"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not a KB directory (built by `gta-verl kb build`)")
    cols = pq.read_table(path, columns=["doc_id", "title", "text"]).to_pydict()
    index: dict[str, list[tuple[str, str]]] = {}
    for doc_id, title, text in zip(cols["doc_id"], cols["title"], cols["text"], strict=True):
        index.setdefault(_nfc(title), []).append((doc_id, _nfc(text)))
    return index


def score_verl_dump(
    dump: Path | str,
    out_dir: Path | str,
    *,
    step: int | None = None,
    data_paths: Iterable[Path | str] = (),
    kb_dir: Path | str | None = None,
    metrics_log: Path | str | None = None,
    name: str = "policy",
) -> tuple[DumpReadResult, Any]:
    """Rebuild records from a verl validation dump, write them to ``<out>/records`` and report.

    Returns:
        (the :class:`DumpReadResult`, the :class:`~gta_verl.eval.report.ReportPaths`).

    Raises:
        ValueError: ``out_dir`` already holds records of another dump file or step.
    """
    from gta_verl.eval.records import RecordWriter, read_records
    from gta_verl.eval.report import write_report

    out = Path(out_dir)
    data_paths = [str(p) for p in data_paths]
    res = read_verl_dump(
        dump,
        step,
        question_index(data_paths) if data_paths else None,
        kb_doc_index(kb_dir) if kb_dir else None,
    )
    if not res.records:
        from gta_verl.data.loaders import DataFormatError

        first = f"; first: {res.rejected[0]}" if res.rejected else ""
        raise DataFormatError(
            f"{res.path}: none of its {res.n_in} lines could be scored{first}; nothing written"
        )
    run_file, source = out / "run.json", {"source": "verl_dump", "file": str(res.path.resolve())}
    if run_file.is_file() and json.loads(run_file.read_text()).get("file") != source["file"]:
        raise ValueError(f"{run_file}: {out} holds records of another run; use a new --out")
    out.mkdir(parents=True, exist_ok=True)
    run_file.write_text(json.dumps(source))
    with RecordWriter(out / "records", chunk_size=1024) as writer:
        writer.add_all(res.records)
    meta = {
        "verl dump": str(res.path),
        "step": res.step,
        "lines": res.n_in,
        "rejected lines": len(res.rejected),
        "data": ", ".join(data_paths) or "(none: data_source from dump)",
    }
    report = write_report(
        read_records(out / "records"),
        out,
        name=name,
        meta=meta,
        metrics_log=metrics_log,
        title="gta-verl evaluation report (verl validation dump)",
    )
    return res, report


#: Metrics two evaluations of the same policy on the same questions must agree on.
COMPARED_METRICS = (
    "n",
    "em",
    "f1",
    "answered",
    "target_doc_cov",
    "complete_traj_cov",
    "search_turns",
    "retrieval_errors",
    "invalid_actions",
)


def compare_reports(a: Path | str, b: Path | str, tol: float = 1e-9) -> list[str]:
    """Differences between the pooled metrics (``overall``) of two ``report.json`` files.

    Used to check that verl's validation dump, scored here, matches our runner on the same
    policy and questions (``recipes/cpu/val_only.sh``). Returns one line per metric that
    differs by more than ``tol`` or is missing on one side; empty when they agree.
    """
    ra, rb = (json.loads((Path(p) / "report.json").read_text())["overall"] for p in (a, b))
    diffs = []
    for key in COMPARED_METRICS:
        va, vb = ra.get(key), rb.get(key)
        if va is None and vb is None:
            continue
        if va is not None and vb is not None and math.isnan(float(va)) and math.isnan(float(vb)):
            continue
        if va is None or vb is None or not abs(float(va) - float(vb)) <= tol:
            diffs.append(f"{key}: {va} vs {vb}")
    return diffs


def _main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m gta_verl.eval.verl_dumps")
    sub = parser.add_subparsers(dest="cmd", required=True)
    cmp_ = sub.add_parser("compare", help="compare two gta-verl eval outputs (report.json)")
    cmp_.add_argument("a")
    cmp_.add_argument("b")
    args = parser.parse_args(argv)
    diffs = compare_reports(args.a, args.b)
    for line in diffs:
        print(f"MISMATCH {line}")
    if not diffs:
        print(f"verl validation dump and runner agree on {', '.join(COMPARED_METRICS)}")
    return 1 if diffs else 0


if __name__ == "__main__":
    raise SystemExit(_main())
