"""Warm-start inputs: Stage-I questions split by target document, a corpus tokenizer, SFT rows from τ*
replays.

The SFT rows are recorded from the real ``gta_search_agent`` loop replaying each reference trajectory τ* (a
:class:`~gta_verl.agent.backends.ScriptedServerManager` speaks the reference turns) against the deployed
retriever, so every ``<info>`` block is what that retriever returns for the reference query, fitted to the
loop's observation cap, and the token layout is the one GRPO rollouts will have.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Rollout budget of the warm start and of the learning runs (the loop's layout depends on both).
RESPONSE_LENGTH = 768
PROMPT_LENGTH = 256
MAX_OBS_TOKENS = 160


@dataclass(frozen=True)
class WarmStartModel:
    """Size of the warm-start ``Qwen2ForCausalLM`` (tied embeddings)."""

    hidden: int = 256
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 768


def agent_gta_config(kb_dir: str | Path) -> dict[str, Any]:
    """The ``gta`` section the replay and the learning runs share."""
    return {"agent": {"max_obs_tokens": MAX_OBS_TOKENS}, "retriever": {"kb_dir": str(kb_dir)}}


def tokenizer_texts(passages: Sequence[Any], rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """What the tokenizer is trained on: passages as the observation renders them, prompts and τ* turns."""
    from gta_verl.eval.replay import reference_script

    texts = [f"{p.title}\n{p.text}" for p in passages]
    for row in rows:
        texts.extend(str(m["content"]) for m in row["prompt"])
        texts.extend(reference_script(row))
    return texts


def init_model_dir(out: Path, tokenizer: Any, size: WarmStartModel = WarmStartModel(), seed: int = 0) -> Path:
    """Save a random ``Qwen2ForCausalLM`` over ``tokenizer``'s vocabulary, with the tokenizer, to ``out``."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=size.hidden,
        intermediate_size=size.intermediate,
        num_hidden_layers=size.layers,
        num_attention_heads=size.heads,
        num_key_value_heads=size.kv_heads,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    return out


def replay_rows(
    rows: Sequence[Mapping[str, Any]],
    tokenizer: Any,
    kb_dir: str | Path,
    budgets: tuple[int, int, int] = (PROMPT_LENGTH, RESPONSE_LENGTH, MAX_OBS_TOKENS),
) -> list[dict[str, Any]]:
    """Replay each row's τ* through the real agent loop; return SFT rows in the loop's token layout.

    ``budgets`` = (prompt, response, observation) token budgets of the loop the rows will be trained for.

    Returns:
        Per row: ``input_ids`` = prompt + response ids, ``loss_mask`` = 0 on the prompt and observations,
        1 on generated tokens, and ``n_searches``, ``answered`` of the replay (a check on the data).
    """
    from gta_verl.agent.backends import ScriptedServerManager
    from gta_verl.agent.runner import make_trainer_config, run_agent_rollouts
    from gta_verl.data import schema
    from gta_verl.eval.replay import reference_scripts
    from gta_verl.eval.runner import build_retriever_client

    prompt_length, response_length, max_obs = budgets
    gta = {"agent": {"max_obs_tokens": max_obs}, "retriever": {"kb_dir": str(kb_dir)}}
    cfg = make_trainer_config(prompt_length, response_length, gta=gta)
    client = build_retriever_client(kb_dir, {})
    manager = ScriptedServerManager(tokenizer, reference_scripts(rows), logprob=None)
    out = []
    for r in run_agent_rollouts(rows, manager, tokenizer, client, cfg, validate=True):
        ef = r.extra_fields
        out.append(
            {
                "input_ids": r.prompt_ids + r.response_ids,
                "loss_mask": [0] * len(r.prompt_ids) + [int(m) for m in r.response_mask],
                "n_searches": schema.parse_count(ef[schema.EF_NUM_SEARCHES], schema.EF_NUM_SEARCHES),
                "answered": schema.parse_answer(ef[schema.EF_ANSWER]) is not None,
                "truncated": schema.parse_flag(ef[schema.EF_TRUNCATED], schema.EF_TRUNCATED),
            }
        )
    return out


def write_sft_parquet(rows: Sequence[Mapping[str, Any]], path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table(
        {"input_ids": [list(r["input_ids"]) for r in rows], "loss_mask": [list(r["loss_mask"]) for r in rows]}
    )
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)
    return path
