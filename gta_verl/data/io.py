"""Atomic artifact writes shared by every stage (temp file in the target folder + rename)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def write_table_atomic(table: pa.Table, path: str | Path) -> Path:
    """Write ``table`` as parquet to ``path`` so readers never see a half-written file.

    The temp file lives in the destination folder, so ``os.replace`` is an atomic rename on
    the same filesystem; on any failure (including KeyboardInterrupt) the temp file is removed
    and an existing ``path`` is left untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
