"""Inputs of the CPU recipes, built once from the bundled MuSiQue data and cached.

``recipes/cpu/run.sh`` needs a model directory, a KB, the Stage-I parquet and a QA parquet;
:func:`prepare_cpu_inputs` builds whichever is missing with the same library calls as the
quickstart (``gta-verl kb build`` / ``gta-verl synth`` / data prep) and returns the paths.
``gta-verl cpu prepare`` prints them as shell assignments for the recipe script.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

#: Graph paths the template generator draws for the CPU Stage-I set (a few rows suffice).
N_SYNTH = 40


@dataclass(frozen=True)
class CPUInputs:
    """Paths a CPU recipe run reads (all absolute)."""

    model: Path
    kb: Path
    stage1: Path
    qa: Path

    def shell(self) -> str:
        """``MODEL_PATH=… KB_DIR=… STAGE1_TRAIN=… QA_FILES=…`` lines for ``eval`` in a shell."""
        pairs = {
            "MODEL_PATH": self.model,
            "KB_DIR": self.kb,
            "STAGE1_TRAIN": self.stage1,
            "QA_FILES": self.qa,
        }
        return "\n".join(f"{k}={shlex.quote(str(v.resolve()))}" for k, v in pairs.items())


def default_root() -> Path:
    """``$GTA_VERL_CACHE/cpu_recipes``."""
    from gta_verl.agent.tokenizer import cache_dir

    return cache_dir() / "cpu_recipes"


def ensure_kb(kb_dir: Path) -> Path:
    from gta_verl.bundled import MUSIQUE_CORPUS, MUSIQUE_OPENIE
    from gta_verl.kb.build import KBConfig, build_kb_from_files

    if not (kb_dir / "manifest.json").is_file():
        build_kb_from_files(MUSIQUE_CORPUS, "hipporag", f"precomputed:{MUSIQUE_OPENIE}", kb_dir, KBConfig())
    return kb_dir


def _ensure_stage1(kb_dir: Path, out: Path, seed: int) -> Path:
    from gta_verl.retrieval.backends import open_retriever
    from gta_verl.synth.generators.registry import make_generator
    from gta_verl.synth.pipeline import synthesize
    from gta_verl.synth.writer import write_stage1_parquet

    if out.is_file():
        return out
    retriever = open_retriever(kb_dir)  # the deployed default config, as in training
    kb = retriever.kb
    result = synthesize(
        kb, retriever, make_generator("template", seed=seed), n=N_SYNTH, seed=seed, progress=False
    )
    if not result.validated:
        raise RuntimeError(f"synthesis over {kb_dir} kept no trajectory; funnel {result.funnel.to_dict()}")
    passages = {p.doc_id: p for p in kb.passages}
    write_stage1_parquet(
        result.validated, out, passages, validated=True, metadata={"funnel": result.funnel.to_dict()}
    )
    return out


def prepare_cpu_inputs(root: Path | None = None, kb_dir: Path | None = None, seed: int = 0) -> CPUInputs:
    """Build (or reuse) every input of the CPU recipes.

    Args:
        root: Where to put them (default :func:`default_root`).
        kb_dir: An existing KB to use instead of ``root/kb_musique`` (e.g. the test suite's cached KB).
        seed: Seed of the tiny model and of the Stage-I synthesis.
    """
    from gta_verl.cpu.tiny_model import TINY_MODEL_VERSION, build_corpus_tiny_model
    from gta_verl.data.prep import prepare_musique
    from gta_verl.kb.store import manifest_digest, read_manifest

    root = Path(root or default_root())
    root.mkdir(parents=True, exist_ok=True)
    kb = ensure_kb(Path(kb_dir) if kb_dir else root / "kb_musique")
    qa = root / "data" / "musique_train.parquet"
    if not qa.is_file():
        qa = Path(prepare_musique(root / "data", verbose=False)["qa"])
    stage1 = _ensure_stage1(kb, root / f"stage1_template_s{seed}.parquet", seed)
    # The tokenizer is trained on this KB and Stage-I set: a model built over another KB is not reused.
    name = f"tiny_corpus_s{seed}_v{TINY_MODEL_VERSION}_{manifest_digest(read_manifest(kb))}"
    model = build_corpus_tiny_model(kb, stage1, root / "models" / name, seed=seed)
    return CPUInputs(model=model, kb=kb, stage1=stage1, qa=qa)


def tool_agent_parquet(src: Path, out: Path | None = None) -> Path:
    """``src``'s rows for verl's ``tool_agent`` loop (:func:`gta_verl.data.schema.tool_agent_row`).

    Written next to ``src`` as ``<stem>.tool_agent.parquet`` and reused while newer than ``src``.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from gta_verl.data.io import write_table_atomic
    from gta_verl.data.schema import tool_agent_row

    src = Path(src)
    out = Path(out) if out else src.with_name(f"{src.stem}.tool_agent.parquet")
    if out.is_file() and out.stat().st_mtime >= src.stat().st_mtime:
        return out
    rows = [tool_agent_row(r) for r in pq.read_table(src).to_pylist()]
    return write_table_atomic(pa.Table.from_pylist(rows), out)


def prompt_style_parquet(src: Path, style: str, out: Path | None = None) -> Path:
    """``src``'s rows with each ``prompt`` rewritten in ``style`` (:data:`gta_verl.protocol.PROMPT_STYLES`)
    from the row's question; written next to ``src`` as ``<stem>.<style>.parquet``, reused while newer."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from gta_verl.data.io import write_table_atomic
    from gta_verl.eval.runner import restyle_prompt

    src = Path(src)
    out = Path(out) if out else src.with_name(f"{src.stem}.{style}.parquet")
    if out.is_file() and out.stat().st_mtime >= src.stat().st_mtime:
        return out
    rows = [restyle_prompt(r, style) for r in pq.read_table(src).to_pylist()]
    return write_table_atomic(pa.Table.from_pylist(rows), out)
