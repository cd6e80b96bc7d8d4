"""Atomic artifact writes shared by every stage (temp file in the target folder + rename), and the
checked parquet read of the stages' inputs."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

if TYPE_CHECKING:
    import pandas as pd


@contextmanager
def atomic_path(path: str | Path, suffix: str = ".tmp") -> Iterator[Path]:
    """Yield a temp path to write; on success it is renamed onto ``path``, on failure removed.

    The temp file lives in the destination folder, so ``os.replace`` is an atomic rename on
    the same filesystem: readers see the old file or the complete new one, never a partial
    write, and an existing ``path`` survives any failure (including KeyboardInterrupt).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def write_table_atomic(table: pa.Table, path: str | Path) -> Path:
    """Write ``table`` as parquet to ``path`` atomically (see :func:`atomic_path`)."""
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
    return Path(path)


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write UTF-8 ``text`` to ``path`` atomically (see :func:`atomic_path`)."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def read_parquet_frame(path: str | Path) -> pd.DataFrame:
    """Read the parquet file ``path`` into a DataFrame.

    Raises:
        DataFormatError: Not a readable parquet file (names the file and the reader's first line).
    """
    import pandas as pd

    from gta_verl.data.loaders import DataFormatError

    try:
        return pd.read_parquet(path)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise DataFormatError(
            f"{path}: not a readable parquet file ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})"
        ) from None
