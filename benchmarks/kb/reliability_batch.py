"""The malformed-batch case of ``benchmarks/kb/reliability_stress.py``: bad rows in a gathered batch.

64 rows scored by each gta reward manager's real ``run_single``, all awaited in one
``asyncio.gather`` as verl's agent loop does; k rows replaced by the malformed variants of
:data:`KINDS` and compared with the clean batch. Run it through
``python -m benchmarks.kb.reliability_stress --cases batch``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
from collections import Counter
from pathlib import Path
from typing import Any

#: The hand-computed reward cases the clean batch cycles through (the reward tests' table).
CASES_TABLE = Path(__file__).resolve().parents[2] / "tests/rewards/reward_cases.yaml"

# ----------------------------------------------------------------------------- case 3: malformed batch
# name -> (gt override or None, tool_extra_fields patch, extra_info patch, drop reward_model / ground_truth,
#          expected: "error" (scores 0, reward_error 1) or "clean" (scores as its clean row), or the managers
#          that read the field (error there, clean elsewhere: a NaN nobody reads changes nothing))
GTA = ("trajectory_guided", "exact_match")
KINDS: dict[str, tuple[Any, dict | None, dict | None, str | None, str | tuple[str, ...]]] = {
    "NaN scalar gold": (float("nan"), None, None, None, "error"),
    "NaN gold in the dict": ({"target": [float("nan")], "target_doc_ids": ["d1"]}, None, None, None, "error"),
    "dict gold answer": ({"target": {"nested": "dict"}}, None, None, None, "error"),
    "string id list": ({"target": ["Paris"], "target_doc_ids": "d1"}, None, None, None, "error"),
    "string support texts": ({"target": ["Paris"], "support_texts": "some text"}, None, None, None, "error"),
    "no ground_truth": (None, None, None, "ground_truth", "error"),
    "no reward_model": (None, None, None, "reward_model", "error"),
    "NaN `gta/invalid_actions`": (None, {"gta/invalid_actions": float("nan")}, None, None, GTA),
    "NaN `gta/num_searches`": (None, {"gta/num_searches": float("nan")}, None, None, ("path_router",)),
    "NaN in the row's `extra_info`": (None, None, {"index": float("nan")}, None, "clean"),
}


def _malformed_row(tok, prompt_ids, case, kind: str):
    import numpy as np

    from gta_verl.testing.reward_data import make_reward_data

    gt, fields, extra, drop, _ = KINDS[kind]
    data = make_reward_data(tok, prompt_ids, case)
    ntb = data.non_tensor_batch
    if gt is not None:
        ntb["reward_model"] = np.array([{"style": "rule", "ground_truth": gt}], dtype=object)
    if drop == "ground_truth":
        ntb["reward_model"] = np.array([{"style": "rule"}], dtype=object)
    elif drop == "reward_model":
        ntb.pop("reward_model")
    if fields:
        ntb["tool_extra_fields"][0].update(fields)
    if extra:
        ntb["extra_info"] = np.array([{**ntb["extra_info"][0], **extra}], dtype=object)
    return data


def _expected(kind: str, manager: str) -> str:
    exp = KINDS[kind][4]
    return exp if isinstance(exp, str) else ("error" if manager in exp else "clean")


def describe_kind(kind: str) -> str:
    exp = KINDS[kind][4]
    if isinstance(exp, str):
        return f"{kind} → {'error' if exp == 'error' else 'scored as the clean row (no reward reads it)'}"
    return f"{kind} → error in {', '.join(exp)} (which read it), scored as the clean row in the others"


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    def eq(x: Any, y: Any) -> bool:
        return x == y or (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y))

    ai, bi = a["reward_extra_info"], b["reward_extra_info"]
    return (
        eq(a["reward_score"], b["reward_score"])
        and ai.keys() == bi.keys()
        and all(eq(v, bi[k]) for k, v in ai.items())
    )


class BatchCase:
    """Clean 64-row batch scored once per manager; each trial swaps k random rows for malformed ones."""

    def __init__(self, rows: int) -> None:
        import gta_verl.rewards.managers  # registers trajectory_guided, exact_match
        import gta_verl.rewards.path_router_manager  # registers path_router
        import gta_verl.verl_compat  # noqa: F401 - verl first, as the tests import it
        from gta_verl.agent.tokenizer import load_qwen_tokenizer
        from gta_verl.protocol import build_messages
        from gta_verl.testing.reward_cases import load_cases
        from gta_verl.testing.reward_data import make_reward_data, make_reward_manager

        logging.getLogger("gta_verl.rewards.managers").setLevel(logging.ERROR)  # one warning per bad row
        self.tok = load_qwen_tokenizer()
        text = self.tok.apply_chat_template(
            build_messages("Which city?"), add_generation_prompt=True, tokenize=False
        )
        self.prompt_ids = self.tok.encode(text, add_special_tokens=False)
        cases = load_cases(CASES_TABLE)
        self.cases = [cases[i % len(cases)] for i in range(rows)]
        self.clean_rows = [make_reward_data(self.tok, self.prompt_ids, c) for c in self.cases]
        self.managers = {
            n: make_reward_manager(n, self.tok) for n in ("trajectory_guided", "exact_match", "path_router")
        }
        self.clean = {n: asyncio.run(self._score(m, self.clean_rows)) for n, m in self.managers.items()}

    @staticmethod
    async def _score(mgr, rows) -> list[dict[str, Any]]:
        return await asyncio.gather(*(mgr.run_single(r) for r in rows))  # one raise fails all, as in verl

    def trial(self, k: int, rng: random.Random) -> dict[str, Any]:
        """One batch with k malformed rows, through each manager."""
        recs = [self.trial_one(name, k, rng) for name in self.managers]
        return {
            "ok": all(r["ok"] for r in recs),
            "returned": sum(r["returned"] for r in recs),
            "rows": sum(len(self.cases) for _ in recs),
            "raised": [r["raised"] for r in recs if "raised" in r],
            **{
                key: sum(r.get(key, 0) for r in recs)
                for key in ("errors", "expected_errors", "good_equal", "n_good")
            },
            "wrong": [w for r in recs for w in r.get("wrong", [])],
        }

    def trial_one(self, name: str, k: int, rng: random.Random) -> dict[str, Any]:
        positions = rng.sample(range(len(self.cases)), k)
        kinds = list(KINDS)
        offset = rng.randrange(len(kinds))
        bad = {p: kinds[(offset + i) % len(kinds)] for i, p in enumerate(positions)}
        rows = [
            (_malformed_row(self.tok, self.prompt_ids, self.cases[i], bad[i]) if i in bad else r)
            for i, r in enumerate(self.clean_rows)
        ]
        try:
            got = asyncio.run(self._score(self.managers[name], rows))
        except Exception as exc:  # the failure this case looks for
            return {"ok": False, "raised": f"{type(exc).__name__}: {exc}"[:200], "returned": 0}
        clean = self.clean[name]
        errors, good_equal, wrong = 0, 0, []
        for i, (g, c) in enumerate(zip(got, clean, strict=False)):
            err = g["reward_extra_info"].get("reward_error") == 1.0
            errors += err
            expected = _expected(bad[i], name) if i in bad else "clean"
            if expected == "error":
                ok = (
                    err
                    and g["reward_score"] == 0.0
                    and g["reward_extra_info"].keys() == c["reward_extra_info"].keys()
                )
            else:
                ok = _same(g, c)
                good_equal += ok and i not in bad
            if not ok:
                wrong.append(f"{bad.get(i, 'good row')} ({name})")
        n_good = len(clean) - k
        return {
            "ok": not wrong and len(got) == len(clean),
            "returned": len(got),
            "errors": errors,
            "expected_errors": sum(_expected(b, name) == "error" for b in bad.values()),
            "good_equal": good_equal,
            "n_good": n_good,
            "wrong": wrong,
            "kinds": Counter(bad.values()),
        }


def batch_outcome(recs: list[dict[str, Any]]) -> str:
    raised = sorted({x for r in recs for x in r["raised"]})
    parts = [
        f"rows returned: {sum(r['returned'] for r in recs):,}/{sum(r['rows'] for r in recs):,}",
        f"`reward_error` = 1: {sum(r['errors'] for r in recs):,} (expected "
        f"{sum(r['expected_errors'] for r in recs):,}); good rows equal to the clean batch: "
        f"{sum(r['good_equal'] for r in recs):,}/{sum(r['n_good'] for r in recs):,}",
    ]
    wrong = Counter(w for r in recs for w in r.get("wrong", []))
    if wrong:
        parts.append("wrong: " + ", ".join(f"{w} ×{n}" for w, n in wrong.most_common()))
    if raised:
        parts.append("raised: " + "; ".join(raised))
    return "; ".join(parts)
