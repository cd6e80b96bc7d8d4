"""gta-verl: graph-trajectory-augmented RL for LLM search agents, as a plugin for stock verl.

Heavy modules (verl, torch, ray, faiss) are imported lazily by the submodules that
need them, so ``import gta_verl`` is cheap.
"""

__version__ = "0.1.0"

#: Version of every on-disk artifact layout (KB directory, parquet schemas, eval records).
SCHEMA_VERSION = 1
