"""verl SFT dataset (``data.custom_cls``) over conversations in the agent loop's own token layout.

verl's ``MultiTurnSFTDataset`` renders each message through the chat template, so after the first
``</search>`` it trains ``<|im_end|>\\n<|im_start|>user\\n<info>…`` — a context the ``gta_search_agent`` loop
never produces (it appends the observation raw, ``\\n\\n<info>…</info>\\n\\n``, inside one assistant
response). The rows read here were recorded from the real loop replaying τ* (:mod:`gta_verl.cpu.sft_data`):
``input_ids`` = prompt ids + response ids, ``loss_mask`` = 0 on the prompt and on every observation, 1 on
generated tokens.
Item layout is verl's ``no_padding`` mode (``multiturn_sft_dataset.py:404-420``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import Dataset

COLUMNS = ("input_ids", "loss_mask")


class AgentLayoutSFTDataset(Dataset):
    """Rows ``{input_ids: list[int], loss_mask: list[int]}`` from parquet; verl's custom dataset signature.

    Args:
        parquet_files: One path or a list (verl passes ``data.train_files`` / ``data.val_files``).
        tokenizer: Unused beyond a vocabulary check (the ids were produced with this tokenizer).
        config: verl's ``data`` config (``max_length``, ``truncation``).
    """

    def __init__(
        self, parquet_files: Any, tokenizer: Any, config: Any, processor: Any = None, max_samples: int = -1
    ) -> None:
        import pyarrow.parquet as pq

        files = [parquet_files] if isinstance(parquet_files, str) else list(parquet_files)
        self.rows: list[tuple[list[int], list[int]]] = []
        for f in files:
            table = pq.read_table(f)
            missing = [c for c in COLUMNS if c not in table.column_names]
            if missing:
                raise ValueError(f"{f}: SFT parquet needs columns {COLUMNS}, missing {missing}")
            for i, (ids, mask) in enumerate(
                zip(table["input_ids"].to_pylist(), table["loss_mask"].to_pylist(), strict=True)
            ):
                if len(ids) != len(mask):
                    raise ValueError(f"{f}: row {i}: {len(ids)} input_ids but {len(mask)} loss_mask entries")
                if tokenizer is not None and ids and max(ids) >= len(tokenizer):
                    raise ValueError(
                        f"{f}: row {i}: token id {max(ids)} outside the tokenizer ({len(tokenizer)})"
                    )
                self.rows.append((ids, mask))
        if max_samples is not None and max_samples > 0:
            self.rows = self.rows[:max_samples]
        self.max_length = int(config.get("max_length", 1024))
        self.truncation = config.get("truncation", "error")

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        """``input_ids`` [L], ``position_ids`` [L] (0…L-1), ``loss_mask`` [L]."""
        ids, mask = self.rows[i]
        if len(ids) > self.max_length:
            if self.truncation == "error":
                raise ValueError(f"row {i}: {len(ids)} tokens > data.max_length={self.max_length}")
            ids, mask = ids[: self.max_length], mask[: self.max_length]
        input_ids = torch.tensor(ids, dtype=torch.long)
        return {
            "input_ids": input_ids,
            "position_ids": torch.arange(len(ids), dtype=torch.long),
            "loss_mask": torch.tensor(mask, dtype=torch.long),
        }
