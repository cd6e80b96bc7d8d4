"""``evaluate_policy``: run a policy through the training agent loop on test questions, then report.

The rollouts go through :func:`gta_verl.agent.runner.run_agent_rollouts`, i.e. the
real ``gta_search_agent`` loop the trainer runs (same prompt, action parser, budget B,
observation format), against the same :class:`~gta_verl.retrieval.retriever.GraphRetriever`
built from ``gta.retriever`` settings. Generation backends: HF ``transformers`` (CPU
or GPU, small models), vLLM (GPU, import-guarded), the special policy
``tiny-random-qwen2`` (random tiny model + the real Qwen2.5 tokenizer, CPU smoke
runs), or any server manager passed in (tests use a scripted one).

Resumable: records go to ``<out>/records/`` in atomic chunks; a rerun with the same
settings skips every (data_source, qid, sample) already written. ``<out>/run.json``
pins the settings, so a rerun with a different policy cannot mix into old records.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gta_verl import SCHEMA_VERSION
from gta_verl.data import schema
from gta_verl.data.io import read_parquet_frame, write_text_atomic
from gta_verl.data.types import RetrievalResult
from gta_verl.eval.metrics import EvalSummary, score_record, summarize
from gta_verl.eval.records import EvalRecord, RecordKey, RecordWriter, read_records
from gta_verl.eval.report import ReportPaths, write_report
from gta_verl.eval.verl_dumps import question_from_prompt
from gta_verl.protocol import PROMPT_STYLES, build_messages

logger = logging.getLogger(__name__)

TINY_POLICY = "tiny-random-qwen2"
BACKENDS = ("hf", "vllm")
SAMPLERS = ("per_rollout", "batched")
DTYPES = ("auto", "float32", "bfloat16")


#: Training config whose rollout budget the evaluation uses by default (GTA-RAG Stage I / II recipes).
TRAINING_CONFIG = "gta_grpo.yaml"


@functools.cache
def training_budget(config_name: str = TRAINING_CONFIG) -> tuple[int, int]:
    """``(data.max_prompt_length, data.max_response_length)`` of a packaged training config.

    The evaluation's default budget is read from here, so a rollout that training lets finish is not cut
    short (and scored EM 0) in evaluation.
    """
    from omegaconf import OmegaConf

    from gta_verl.bundled import CONFIG_DIR

    cfg = OmegaConf.load(CONFIG_DIR / config_name)
    return int(cfg.data.max_prompt_length), int(cfg.data.max_response_length)


def _default_prompt_length() -> int:
    return training_budget()[0]


def _default_response_length() -> int:
    return training_budget()[1]


@dataclass(frozen=True)
class EvalSettings:
    """What makes two evaluation runs comparable (pinned in ``<out>/run.json``).

    Attributes:
        policy: HF model path / hub id, or ``tiny-random-qwen2``.
        backend: ``hf`` or ``vllm``.
        n_samples: Rollouts per question (metrics are pooled = avg@n).
        temperature: Sampling temperature; None = greedy (0.0) for one sample, 1.0 otherwise.
        max_actions: Action budget B of the agent loop (default 5, ours: GTA-RAG names B but gives no value).
        max_obs_tokens: Cap on one observation (``gta.agent.max_obs_tokens``; must match the policy's
            training).
        prompt_length, response_length: Token budgets, as ``actor_rollout_ref.rollout``; default: the
            training config's (:func:`training_budget`, ``gta_grpo.yaml``: 1,024 / 3,072).
        retriever: ``gta.retriever`` knobs (e.g. ``{"mode": "dense"}`` for the w/o-graph ablation).
        seed: Sampling seed (HF backend, tiny model init).
        prompt_style: None keeps each row's ``prompt``; a :data:`gta_verl.protocol.PROMPT_STYLES` key rewrites
            it from the row's question (``fewshot`` for a pretrained base model).
        sampler: How the HF backend samples at T > 0: ``per_rollout`` (each rollout its own seeded stream,
            one rollout per model call: the same tokens whatever the batching) or ``batched`` (the rollouts in
            flight share model calls and torch's stream seeded once with ``seed``, as verl's ``hf_cpu``
            rollout samples in training: many times faster, reproducible only with the same batching).
        dtype: The HF backend's weights and compute: ``auto`` (as saved), ``float32`` or ``bfloat16`` (what
            verl's ``hf_cpu`` rollout generates in with ``engine_kwargs.hf_cpu.dtype=bfloat16``; about half
            the time where the CPU has bf16 units).
    """

    policy: str
    backend: str = "hf"
    n_samples: int = 1
    temperature: float | None = None
    max_actions: int = 5
    max_obs_tokens: int = 512
    prompt_length: int = field(default_factory=_default_prompt_length)
    response_length: int = field(default_factory=_default_response_length)
    retriever: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0
    prompt_style: str | None = None
    sampler: str = "per_rollout"
    dtype: str = "auto"
    gold_evidence: bool = False

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype={self.dtype!r}; use one of {DTYPES}")
        if self.sampler not in SAMPLERS:
            raise ValueError(f"sampler={self.sampler!r}; use one of {SAMPLERS}")
        if self.prompt_style is not None and self.prompt_style not in PROMPT_STYLES:
            raise ValueError(f"prompt_style={self.prompt_style!r}; use one of {PROMPT_STYLES}")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend={self.backend!r}; use one of {BACKENDS}")
        if self.policy == TINY_POLICY and self.backend != "hf":
            raise ValueError(f"--policy {TINY_POLICY} runs on the hf backend only")
        if self.n_samples < 1:
            raise ValueError(f"n_samples must be >= 1, got {self.n_samples}")
        if self.temperature is not None and self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.prompt_length < 64 or self.response_length < 16:
            raise ValueError("prompt_length must be >= 64 and response_length >= 16 tokens")

    @property
    def effective_temperature(self) -> float:
        if self.temperature is not None:
            return float(self.temperature)
        return 0.0 if self.n_samples == 1 else 1.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["retriever"] = dict(self.retriever)
        d["temperature"] = self.effective_temperature
        if d["prompt_style"] is None:  # runs pinned before the knob existed stay resumable
            del d["prompt_style"]
        for knob, default in (("sampler", "per_rollout"), ("dtype", "auto"), ("gold_evidence", False)):
            if d[knob] == default:  # likewise
                del d[knob]
        return d


@dataclass(frozen=True)
class EvalResult:
    """What :func:`evaluate_policy` produced."""

    out_dir: Path
    records_dir: Path
    report: ReportPaths
    summary: EvalSummary
    n_records: int
    n_new: int
    n_skipped: int


# ------------------------------------------------------------------ inputs
def load_rows(data_paths: Sequence[Path | str], max_questions: int | None = None) -> list[dict[str, Any]]:
    """Read verl-format parquet rows; ``max_questions`` keeps the first N rows *of each file*."""
    from gta_verl.data.loaders import DataFormatError

    rows: list[dict[str, Any]] = []
    for path in data_paths:
        p = Path(path)
        if not p.is_file():
            raise DataFormatError(f"{p}: no such parquet file (expected verl QA rows from data prep)")
        df = read_parquet_frame(p)
        missing = {"prompt", "reward_model"} - set(df.columns)
        if missing:
            raise DataFormatError(f"{p}: not a verl QA parquet, missing columns {sorted(missing)}")
        part = df.to_dict("records")
        rows += part[:max_questions] if max_questions is not None else part
    return rows


def restyle_prompt(row: Mapping[str, Any], style: str) -> dict[str, Any]:
    """``row`` with its ``prompt`` rewritten in ``style`` from its question (:func:`row_identity`)."""
    _, _, question, _ = row_identity(row)
    if not question:
        raise ValueError(f"row {dict(row).get('extra_info')!r} has no question to rebuild its prompt from")
    return {**row, "prompt": build_messages(question, style=style)}


def with_gold_evidence(row: Mapping[str, Any]) -> dict[str, Any]:
    """``row`` as PathRouter's teacher sees it: its gold passages S_gt (``ground_truth.support_texts``) before
    the question (:func:`gta_verl.algos.teacher_prompt.build_teacher_prompt`), the rest of the prompt as is.

    Raises:
        ValueError: the row carries no gold passage (a teacher with nothing to read measures nothing).
    """
    from gta_verl.algos.teacher_prompt import build_teacher_prompt
    from gta_verl.data.schema import parse_ground_truth

    _, _, support = parse_ground_truth((row.get("reward_model") or {}).get("ground_truth"))
    if not any(str(t).strip() for t in support):
        _, qid, _, _ = row_identity(row)
        raise ValueError(
            f"row {qid!r}: --gold-evidence needs reward_model.ground_truth.support_texts (Stage-I rows and "
            "data prep's QA rows carry them)"
        )
    prompt = row.get("prompt")
    messages = list(prompt.tolist() if hasattr(prompt, "tolist") else prompt or [])
    return {**row, "prompt": build_teacher_prompt(messages, list(support))}


def row_identity(row: Mapping[str, Any]) -> tuple[str, str, str, int]:
    """(data_source, qid, question, hops) of a verl row (qid falls back to the question)."""
    info = row.get("extra_info") or {}
    question = str(info.get("question") or "")
    if not question:
        prompt = row.get("prompt")
        prompt = list(prompt.tolist() if hasattr(prompt, "tolist") else prompt or [])
        question = question_from_prompt(str(prompt[-1]["content"])) if prompt else ""
    return (
        str(row.get("data_source") or "unknown"),
        str(info.get("qid") or question),
        question,
        int(info.get("hops") or 0),
    )


# ------------------------------------------------------------------ adapters
class TimedRetrieverClient:
    """Wrap an ``AsyncRetriever`` and record each query's end-to-end latency (ms).

    Latencies are kept per query text in call order, so a record can claim the
    latencies of its own queries afterwards (:meth:`pop`); identical queries of
    concurrent rollouts may swap latencies, which leaves every percentile unchanged.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self._lat: dict[str, list[float]] = {}

    async def aretrieve(self, queries: Sequence[str]) -> list[RetrievalResult]:
        tic = time.perf_counter()
        results = await self.inner.aretrieve(queries)
        ms = 1000 * (time.perf_counter() - tic)
        for q in queries:
            self._lat.setdefault(q, []).append(ms)
        return results

    def pop(self, query: str) -> float:
        vals = self._lat.get(query)
        return vals.pop(0) if vals else float("nan")


class _GlobalIndexManager:
    """Map chunk-local row indices to global ones, so per-rollout scripts/seeds do not depend on chunking."""

    def __init__(self, inner: Any, global_rows: Sequence[int]) -> None:
        self.inner, self.global_rows = inner, list(global_rows)

    def for_rollout(self, row_index: int, sample_index: int, n_samples: int = 1) -> Any:
        if hasattr(self.inner, "for_rollout"):
            return self.inner.for_rollout(self.global_rows[row_index], sample_index, n_samples)
        return self.inner

    async def generate(self, *args: Any, **kwargs: Any) -> Any:
        return await self.inner.generate(*args, **kwargs)


def build_policy(settings: EvalSettings) -> tuple[Any, Any]:
    """Return (server_manager, tokenizer) for the settings' policy and backend."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never download weights at run time
    if settings.policy == TINY_POLICY:
        from gta_verl.agent.backends import HFServerManager
        from gta_verl.agent.tokenizer import load_qwen_tokenizer, tiny_qwen2

        tok = load_qwen_tokenizer()
        return HFServerManager(tiny_qwen2(settings.seed), tok, seed=settings.seed), tok
    from transformers import AutoTokenizer

    from gta_verl.policies import resolve_model

    policy = resolve_model(settings.policy)
    tok = AutoTokenizer.from_pretrained(policy)
    if settings.backend == "vllm":
        from gta_verl.eval.vllm_backend import VLLMServerManager

        return VLLMServerManager(
            policy,
            seed=settings.seed,
            max_model_len=settings.prompt_length + settings.response_length,
        ), tok
    import torch
    from transformers import AutoModelForCausalLM

    from gta_verl.agent.backends import BatchedHFServerManager, HFServerManager

    model = AutoModelForCausalLM.from_pretrained(policy, torch_dtype=settings.dtype)
    model.to("cuda" if torch.cuda.is_available() else "cpu").eval()
    if settings.effective_temperature == 0:  # greedy: batched rows equal one-by-one generation
        return BatchedHFServerManager(model, tok, settings.response_length), tok
    if settings.sampler == "batched":
        torch.manual_seed(settings.seed)
        return BatchedHFServerManager(model, tok, settings.response_length), tok
    return HFServerManager(model, tok, seed=settings.seed), tok


def build_retriever_client(kb_dir: Path | str, knobs: Mapping[str, Any]) -> Any:
    """The in-process client over the training retriever (``gta.retriever`` knobs)."""
    from gta_verl.retrieval.backends import open_retriever
    from gta_verl.retrieval.section import RetrieverSection
    from gta_verl.retrieval.serving.clients import InProcessRetrieverClient

    section = RetrieverSection.from_mapping({**dict(knobs), "kb_dir": str(kb_dir)})
    return InProcessRetrieverClient(open_retriever(str(kb_dir), section.retrieval))


# ------------------------------------------------------------------ conversion
def to_eval_record(rollout: Any, row: Mapping[str, Any], timer: TimedRetrieverClient | None) -> EvalRecord:
    """One :class:`~gta_verl.agent.runner.AgentRollout` → :class:`EvalRecord`."""
    data_source, qid, question, hops = row_identity(row)
    gt = (row.get("reward_model") or {}).get("ground_truth", {})
    fields = rollout.extra_fields
    rec = schema.rollout_record_from_fields(
        fields,
        gt,
        question=question,
        data_source=data_source,
        hops=hops,
        qid=qid,
        sample_idx=rollout.sample_index,
        response_tokens=len(rollout.response_ids),
    )
    lat = tuple(timer.pop(q) for q in rec.turn_queries) if timer is not None else ()
    return EvalRecord(
        rollout=rec,
        prompt_tokens=len(rollout.prompt_ids),
        retrieval_latency_ms=lat,
        response_text=rollout.response_text,
        generated_tokens=int(sum(rollout.response_mask)),
    )


def records_from_rollouts(rollouts: Sequence[Any]) -> list[EvalRecord]:
    """Convert :func:`gta_verl.agent.runner.run_agent_rollouts` output (each carries its ``row``)
    into :class:`EvalRecord` s, e.g. to :func:`~gta_verl.eval.report.write_report` them."""
    return [to_eval_record(r, r.row, None) for r in rollouts]


def _check_run_file(out: Path, settings: EvalSettings, data_paths: Sequence[str], kb_dir: str) -> None:
    """Pin the settings of ``out``; refuse to resume records made with different ones."""
    run = {"schema_version": SCHEMA_VERSION, "settings": settings.to_dict(), "kb": str(kb_dir)}
    path = out / "run.json"
    if path.is_file():
        old = json.loads(path.read_text())
        if {k: old.get(k) for k in run} != json.loads(json.dumps(run)):
            raise ValueError(
                f"{path}: this output directory holds records from different settings "
                f"({old.get('settings')}); use a new --out or delete it"
            )
    else:
        write_text_atomic(path, json.dumps({**run, "data": [str(p) for p in data_paths]}, indent=2))


# ------------------------------------------------------------------ main entry
def evaluate_policy(
    policy: str,
    data_paths: Sequence[Path | str],
    kb_dir: Path | str,
    backend: str = "hf",
    n_samples: int = 1,
    out_dir: Path | str = "eval_out",
    *,
    max_questions: int | None = None,
    settings: EvalSettings | None = None,
    server_manager: Any = None,
    tokenizer: Any = None,
    retriever_client: Any = None,
    batch_size: int = 16,
    concurrency: int = 8,
    metrics_log: Path | str | None = None,
    name: str | None = None,
    progress: bool = True,
) -> EvalResult:
    """Evaluate ``policy`` on verl-format test parquet(s) and write records + report to ``out_dir``.

    Args:
        policy: HF model path, or ``tiny-random-qwen2``; only a label when ``server_manager`` is given.
        data_paths: verl QA parquet files (one per dataset usually).
        kb_dir: KB directory of the retrieval environment.
        backend: ``hf`` (transformers) or ``vllm`` (GPU).
        n_samples: Rollouts per question.
        out_dir: Output directory (``records/``, ``report.md``, ``report.json``, ``plots/``).
        max_questions: Keep the first N questions of each file.
        settings: Full :class:`EvalSettings` (overrides policy/backend/n_samples).
        server_manager, tokenizer: Inject a generation backend (e.g. ``ScriptedServerManager``).
        retriever_client: Inject an ``AsyncRetriever`` (default: in-process over ``kb_dir``).
        batch_size: Questions per chunk (records are flushed after each chunk).
        concurrency: Rollouts in flight.
        metrics_log: Training metrics log for the route-shares plot (optional).
        name: Row label of the policy in the tables (default: the policy's last path part).
        progress: Show a tqdm progress bar.
    """
    settings = settings or EvalSettings(policy=policy, backend=backend, n_samples=n_samples)
    out = Path(out_dir)
    data = [str(p) for p in data_paths]
    _check_run_file(out, settings, data, str(kb_dir))
    rows = load_rows(data, max_questions)
    if settings.prompt_style is not None:
        rows = [restyle_prompt(r, settings.prompt_style) for r in rows]
    if settings.gold_evidence:
        rows = [with_gold_evidence(r) for r in rows]
    writer = RecordWriter(out / "records", chunk_size=max(1, batch_size * settings.n_samples))
    done = writer.done_keys()
    todo = [i for i, r in enumerate(rows) if any(_key(r, s) not in done for s in range(settings.n_samples))]
    logger.info(
        "eval: %d questions × %d samples, %d questions left", len(rows), settings.n_samples, len(todo)
    )
    n_new = 0
    if todo:
        manager, tok, timer, cfg = _prepare(settings, server_manager, tokenizer, retriever_client, kb_dir)
        run = (settings, manager, tok, timer, cfg, writer, batch_size, concurrency, progress)
        n_new = _run_chunks(rows, todo, *run)
    writer.flush()
    label = name or Path(settings.policy).name or settings.policy
    return _report(out, label, _report_meta(settings, data, kb_dir), metrics_log, n_new, writer.n_skipped)


def _report(
    out: Path, name: str, meta: dict[str, Any], metrics_log: Path | str | None, n_new: int, n_skipped: int
) -> EvalResult:
    """Every record under ``out/records`` (this run's and earlier ones') scored, reported and summarized."""
    records = read_records(out / "records")
    report = write_report(records, out, name=name, meta=meta, metrics_log=metrics_log)
    summary = summarize([score_record(r.rollout) for r in records])
    return EvalResult(
        out_dir=out,
        records_dir=out / "records",
        report=report,
        summary=summary,
        n_records=len(records),
        n_new=n_new,
        n_skipped=n_skipped,
    )


def _report_meta(settings: EvalSettings, data: Sequence[str], kb_dir: Path | str) -> dict[str, Any]:
    return {
        "policy": settings.policy,
        "backend": settings.backend,
        "data": ", ".join(data),
        "kb": str(kb_dir),
        "n_samples": settings.n_samples,
        "temperature": settings.effective_temperature,
        "action budget B": settings.max_actions,
    }


def _key(row: Mapping[str, Any], sample_idx: int) -> RecordKey:
    data_source, qid, _, _ = row_identity(row)
    return (data_source, qid, sample_idx)


def _prepare(
    settings: EvalSettings, server_manager: Any, tokenizer: Any, retriever_client: Any, kb_dir: Path | str
) -> tuple[Any, Any, TimedRetrieverClient, Any]:
    """Backend, tokenizer, timed retriever client and the agent loop's trainer config."""
    from gta_verl.agent.runner import make_trainer_config

    if server_manager is None:
        server_manager, tokenizer = build_policy(settings)
    if tokenizer is None:
        raise ValueError("pass tokenizer= together with server_manager=")
    timer = TimedRetrieverClient(retriever_client or build_retriever_client(kb_dir, settings.retriever))
    cfg = make_trainer_config(
        prompt_length=settings.prompt_length,
        response_length=settings.response_length,
        gta={
            "agent": {
                "max_actions": settings.max_actions,
                "max_obs_tokens": settings.max_obs_tokens,
                "retriever_transport": "inprocess",
            }
        },
        temperature=settings.effective_temperature,
    )
    return server_manager, tokenizer, timer, cfg


def _run_chunks(
    rows, todo, settings, server_manager, tokenizer, timer, cfg, writer, batch_size, concurrency, progress
) -> int:
    """Roll out the pending questions chunk by chunk, flushing records after each chunk."""
    from tqdm.auto import tqdm

    from gta_verl.agent.runner import run_agent_rollouts

    n_new = 0
    bar = tqdm(
        total=len(todo) * settings.n_samples, desc="eval rollouts", unit="rollout", disable=not progress
    )
    try:
        for start in range(0, len(todo), batch_size):
            idx = todo[start : start + batch_size]
            chunk = [rows[i] for i in idx]
            manager = _GlobalIndexManager(server_manager, idx)
            rollouts = run_agent_rollouts(
                chunk, manager, tokenizer, timer, cfg, n_samples=settings.n_samples, concurrency=concurrency
            )
            for ro in rollouts:
                n_new += int(writer.add(to_eval_record(ro, chunk[ro.row_index], timer)))
            writer.flush()
            bar.update(len(rollouts))
    finally:
        bar.close()
    return n_new
