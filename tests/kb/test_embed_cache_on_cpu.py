"""The on-disk embedding cache returns what was stored, for every 20-byte sha1 key."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import pytest

from gta_verl.kb.embed import CachedEmbedder, EmbeddingCache, text_key


def test_keys_ending_in_nul_bytes_hit_after_reload(tmp_path):
    # numpy "S20" strips trailing NULs on read; about 1 sha1 digest in 256 ends in 0x00.
    keys = [b"\x01" * 19 + b"\x00", b"\x02" * 18 + b"\x00\x00", b"\x03" * 20]
    vecs = np.arange(6, dtype=np.float32).reshape(3, 2)
    EmbeddingCache("enc-x", root=tmp_path).put_many(keys, vecs)

    fresh = EmbeddingCache("enc-x", root=tmp_path)  # a new process: reads the shard from disk
    got = fresh.get_many(keys)
    assert all(v is not None for v in got), [k for k, v in zip(keys, got, strict=True) if v is None]
    np.testing.assert_array_equal(np.stack(got), [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]])


def _cut(shard: Path) -> None:
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])


def _nan(shard: Path) -> None:
    with np.load(shard) as z:
        keys, vecs = z["keys"], z["vecs"].copy()
    vecs[0, 0] = np.nan
    with open(shard, "wb") as f:
        np.savez(f, keys=keys, vecs=vecs)


@pytest.mark.parametrize(
    "damage",
    [_cut, lambda p: p.write_bytes(b"not a zip"), lambda p: p.write_bytes(b""), _nan],
    ids=["truncated", "not an npz", "empty", "NaN vector"],
)
def test_a_damaged_shard_is_named_set_aside_and_recomputed(tmp_path, damage, caplog):
    # Before: zipfile.BadZipFile from every later build (naming no shard) until deleted by hand.
    from gta_verl.testing.toy_kb import HashEmbedder

    texts = [f"passage {i}" for i in range(6)]
    inner = HashEmbedder()
    want = inner.encode(texts)
    CachedEmbedder(inner, EmbeddingCache("enc-x", root=tmp_path)).encode(texts)  # type: ignore[arg-type]
    (shard,) = (tmp_path / EmbeddingCache("enc-x", root=tmp_path).dir.name).glob("*.npz")
    damage(shard)

    with caplog.at_level(logging.WARNING, logger="gta_verl.kb.emb_shards"):
        got = CachedEmbedder(inner, EmbeddingCache("enc-x", root=tmp_path)).encode(texts)  # type: ignore[arg-type]
    np.testing.assert_array_equal(got, want)
    assert shard.with_name(shard.name + ".bad").exists() and not shard.exists()
    assert any(shard.name in r.getMessage() and "set aside" in r.getMessage() for r in caplog.records)
    again = EmbeddingCache("enc-x", root=tmp_path)  # the recomputed vectors are a readable shard
    assert all(v is not None for v in again.get_many([text_key(t) for t in texts]))


def test_shards_are_fsynced_before_they_get_their_name(tmp_path, monkeypatch):
    import gta_verl.kb.embed as embed

    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(embed.os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    EmbeddingCache("enc-x", root=tmp_path).put_many([b"\x01" * 20], np.ones((1, 2), np.float32))
    assert synced, "the shard was renamed into place without an fsync"
