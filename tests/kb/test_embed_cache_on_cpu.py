"""The on-disk embedding cache returns what was stored, for every 20-byte sha1 key."""

from __future__ import annotations

import numpy as np

from gta_verl.kb.embed import EmbeddingCache


def test_keys_ending_in_nul_bytes_hit_after_reload(tmp_path):
    # numpy "S20" strips trailing NULs on read; about 1 sha1 digest in 256 ends in 0x00.
    keys = [b"\x01" * 19 + b"\x00", b"\x02" * 18 + b"\x00\x00", b"\x03" * 20]
    vecs = np.arange(6, dtype=np.float32).reshape(3, 2)
    EmbeddingCache("enc-x", root=tmp_path).put_many(keys, vecs)

    fresh = EmbeddingCache("enc-x", root=tmp_path)  # a new process: reads the shard from disk
    got = fresh.get_many(keys)
    assert all(v is not None for v in got), [k for k, v in zip(keys, got, strict=True) if v is None]
    np.testing.assert_array_equal(np.stack(got), [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]])
