"""The ``reward_extra_info`` keys the trainer side reads are keys the reward managers write.

Both sets come from the code: the written keys from running every manager's scoring function on one
rollout, the read keys from the ``schema.RI_*`` constants the trainer-side modules name. A reader
that spelled a key as a bare string instead would escape that scan, so the readers are also held to
naming no written key as a literal where they look a value up.
"""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

from gta_verl.data import schema
from gta_verl.rewards.path_router import PathRouterConfig
from gta_verl.rewards.path_router_manager import score_path_router
from gta_verl.rewards.scoring import ScoringRequest, score_exact_match, score_trajectory_guided

PACKAGE = Path(schema.__file__).resolve().parents[1]
#: Where ``reward_extra_info`` is read once a manager has written it: the trainers, their step
#: metrics and route weights, the teacher, and the agent loop's distillation mask.
READER_DIRS = ("algos", "agent")


def _request() -> ScoringRequest:
    text = "Paris is the capital of France."
    return ScoringRequest(
        response_text="<search>capital of France</search><answer>Paris</answer>",
        answers=("Paris",),
        target_doc_ids=("d1",),
        support_texts=(text,),
        extra_fields={
            schema.EF_TURN_QUERIES: ["capital of France"],
            schema.EF_TURN_DOC_IDS: [["d1"]],
            schema.EF_TURN_TEXTS: [[text]],
            schema.EF_NUM_SEARCHES: 1,
            schema.EF_ANSWER: "Paris",
        },
    )


def _written_keys() -> set[str]:
    request, cfg = _request(), PathRouterConfig()
    infos = [
        score_trajectory_guided(request)[1],
        score_exact_match(request)[1],
        score_path_router(request, cfg)[1],
        score_path_router(request, replace(cfg, base_reward="trajectory_guided"))[1],
    ]
    # run_single adds reward_error to every row, scored or not (tests/rewards/test_managers_on_cpu.py).
    from gta_verl.rewards.managers import REWARD_ERROR_KEY

    return {key for info in infos for key in info} | {REWARD_ERROR_KEY}


def _reader_trees() -> dict[str, ast.Module]:
    files = sorted(p for d in READER_DIRS for p in (PACKAGE / d).rglob("*.py"))
    return {str(p.relative_to(PACKAGE)): ast.parse(p.read_text(encoding="utf-8")) for p in files}


def _named_constants(tree: ast.Module) -> set[str]:
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    return {n for n in names if n.startswith("RI_")}


def _lookup_literals(tree: ast.Module) -> set[str]:
    """String literals used to look a value up: ``x.get("k")``, ``x["k"]``, ``"k" in x``."""
    found: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            found += node.args[:1]
        elif isinstance(node, ast.Subscript):
            found.append(node.slice)
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            found.append(node.left)
    return {n.value for n in found if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def test_every_key_the_trainer_reads_is_written_by_a_manager():
    read = {
        name: getattr(schema, name) for tree in _reader_trees().values() for name in _named_constants(tree)
    }
    # The scan must see the route weight, or a renamed key could again set every weight to 1.0.
    assert "RI_ROUTE_WEIGHT" in read and "RI_HAS_ANSWER" in read, sorted(read)
    missing = {name: key for name, key in read.items() if key not in _written_keys()}
    assert missing == {}, f"read by the trainer side, written by no manager: {missing}"


def test_readers_look_written_keys_up_through_the_constants():
    written = _written_keys()
    bare = {
        path: sorted(_lookup_literals(tree) & written)
        for path, tree in _reader_trees().items()
        if _lookup_literals(tree) & written
    }
    assert bare == {}, f"reward_extra_info keys spelled as literals (use schema.RI_*): {bare}"
