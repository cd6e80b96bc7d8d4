"""Column and key names shared between data prep, synthesis, the agent loop, rewards and evaluation.

verl-format parquet rows (read by ``verl.utils.dataset.rl_dataset.RLHFDataset``)::

    data_source: str                      # e.g. "musique", "hotpotqa", "gta_synth"
    prompt: list[{role, content}]         # gta_verl.protocol.build_messages(question)
    ability: str                          # "multihop_qa"
    agent_name: str                       # "gta_search_agent"
    reward_model: {"style": "rule", "ground_truth": {
        "target": list[str],              # gold answer + aliases (Search-R1 compatible key)
        "target_doc_ids": list[str],      # S(x) / gold supporting doc ids (may be empty)
        "support_texts": list[str],       # "title\ntext" of each gold doc (PathRouter's P)
    }}
    extra_info: {"index": int, "split": str, "question": str, "hops": int, "qid": str,
                 "supporting_doc_ids": list[str], ...stage-specific keys}

Agent-loop ``extra_fields`` (arrive in reward managers as ``non_tensor_batch["tool_extra_fields"]``)
use the ``gta/`` namespace below; all values are plain lists / scalars / strings.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gta_verl.data.types import QAExample, RolloutRecord
from gta_verl.protocol import build_messages, build_tool_messages

ABILITY = "multihop_qa"
DEFAULT_AGENT_NAME = "gta_search_agent"

# ground_truth keys
GT_ANSWERS = "target"
GT_DOC_IDS = "target_doc_ids"
GT_SUPPORT_TEXTS = "support_texts"

# agent-loop extra_fields keys
EF_TURN_QUERIES = "gta/turn_queries"  # list[str], one per search turn
EF_TURN_DOC_IDS = "gta/turn_doc_ids"  # list[list[str]], R(q_t) ids per search turn
EF_TURN_TEXTS = "gta/turn_texts"  # list[list[str]], "title\ntext" per retrieved doc
EF_RETRIEVAL_ERRORS = "gta/retrieval_errors"  # int
EF_NUM_SEARCHES = "gta/num_searches"  # int
EF_INVALID_ACTIONS = "gta/invalid_actions"  # int
EF_ANSWER = "gta/answer"  # str | None
EF_TURN_SPANS = "gta/turn_spans"  # list[[kind, start, end]] response-token spans, end exclusive
EF_BUDGET_EXHAUSTED = "gta/budget_exhausted"  # bool: action budget B used up without answer
EF_TRUNCATED = "gta/truncated"  # bool: hit rollout.response_length
EF_PLACE_TURN_REWARDS = "gta/place_turn_rewards"  # bool: as_dict places per-turn rewards (opt-in)
EF_TRAILING_DROPPED = "gta/trailing_dropped"  # int: turns whose text ran past the closing tag (verl #935)
# list[list[list[str]]]: per search turn, the shown ids of each of its queries (K > 1 only)
EF_TURN_QUERY_DOC_IDS = "gta/turn_query_doc_ids"
EF_TURN_OBS_START = "gta/turn_obs_start"  # list[int]: response index each tool response would start at

SPAN_KINDS = ("reasoning", "query", "observation", "answer", "invalid")
#: One ``gta/turn_spans`` entry as :func:`parse_turn_spans` returns it: (kind, start, end), end exclusive.
Span = tuple[str, int, int]

#: The ``extra_fields`` key under which a trajectory's ``reward_extra_info`` rides to the trainer
#: (verl's name: written by verl's reward loop and :func:`gta_verl.agent.runner.ascore_rollout`).
EF_REWARD_EXTRA_INFO = "reward_extra_info"

# reward_extra_info keys read outside the reward manager that wrote them (the trainer's route
# weights, its step metrics, the teacher). Writers and readers both name these constants: a key
# renamed on one side only would read as absent, and the reader's default (route weight 1.0,
# route -1) would hide it.
RI_ACC = "acc"  # float: exact match of the answer (verl's val-core metric)
RI_TARGET_DOC_COV = "target_doc_cov"  # float: TargetDocCov
RI_COMPLETE_CHAIN = "complete_chain"  # float: 1 = every target document retrieved
RI_HAS_TARGETS = "has_targets"  # float: 1 = the row names target documents
RI_HAS_ANSWER = "has_answer"  # float: 1 = the response gave an <answer>
RI_C = "C"  # int: PathRouter correctness C
RI_P = "P"  # float: PathRouter evidence overlap P (0 without gold evidence)
RI_ROUTE = "route"  # int: PathRouter route id (index into ROUTE_NAMES)
RI_ROUTE_WEIGHT = "route_weight"  # float: PathRouter's advantage weight of the route
RI_HAS_GOLD_EVIDENCE = "has_gold_evidence"  # int: 1 = the row carries gold evidence passages
RI_DISTILL_SELECT = "distill_select"  # float: 1 = the gold-evidence teacher distils this trajectory
RI_REWARD_ERROR = "reward_error"  # float: 1 = the reward could not be computed (scored 0, out of its group)
#: The one default of ``distill_select``: a trajectory no reward manager selected is never
#: distilled (only the ``path_router`` manager selects, and only rows with gold evidence).
DISTILL_SELECT_DEFAULT = 0.0


def plain_value(value: Any) -> Any:
    """``value.tolist()`` for numpy arrays, scalars and tensors, else ``value`` unchanged.

    Parquet rows and verl's ``np.array(..., dtype=object)`` batches hand back numpy where the
    writer put lists and numbers.

    >>> import numpy as np
    >>> plain_value(np.array([[1, 2], [3]], dtype=object)), plain_value(np.float32(0.5)), plain_value(None)
    ([[1, 2], [3]], 0.5, None)
    """
    return value.tolist() if hasattr(value, "tolist") else value


def distill_select(reward_extra_info: Mapping[str, Any] | None) -> float:
    """``reward_extra_info["distill_select"]``, or :data:`DISTILL_SELECT_DEFAULT` when absent.

    Read by the agent loop (``distill_mask``), the gold-evidence teacher worker and the
    PathRouter trainer, so the three agree on rows a manager did not mark.
    """
    value = (reward_extra_info or {}).get(RI_DISTILL_SELECT)
    if value is None:
        return DISTILL_SELECT_DEFAULT
    value = value.item() if hasattr(value, "item") else value
    return float(value)


def make_ground_truth(
    answers: Sequence[str], doc_ids: Sequence[str] = (), support_texts: Sequence[str] = ()
) -> dict[str, list[str]]:
    """Build the ``reward_model.ground_truth`` dict."""
    if not answers:
        raise ValueError("ground truth needs at least one gold answer")
    return {
        GT_ANSWERS: [str(a) for a in answers],
        GT_DOC_IDS: [str(d) for d in doc_ids],
        GT_SUPPORT_TEXTS: [str(t) for t in support_texts],
    }


def parse_ground_truth(gt: Mapping[str, Any] | Sequence[str] | str) -> tuple[list[str], list[str], list[str]]:
    """Return (answers, target_doc_ids, support_texts) from a ground-truth value.

    Accepts our dict, Search-R1's ``{"target": [...]}``, a bare list of answers or
    a single answer (string or finite number), so third-party parquet files score too.

    Raises:
        ValueError: A string where a list of doc ids / support texts belongs (it would be split into
            characters), or a non-finite or missing gold answer (NaN would become the answer "nan").
    """
    if isinstance(gt, Mapping):
        answers = gt.get(GT_ANSWERS, gt.get("answers", gt.get("answer", [])))
        return (
            _answers(answers),
            _str_list(gt.get(GT_DOC_IDS, []), GT_DOC_IDS),
            _str_list(gt.get(GT_SUPPORT_TEXTS, []), GT_SUPPORT_TEXTS),
        )
    return _answers(gt), [], []


def _answer(value: Any) -> str:
    if isinstance(value, bool) or value is None or isinstance(value, (Mapping, list, tuple, set)):
        raise ValueError(f"ground truth: gold answer must be a string or number, got {value!r}")
    if isinstance(value, (int, float)) or type(value).__module__ == "numpy":
        number = float(value)
        if not math.isfinite(number):
            raise ValueError(f"ground truth: gold answer is not a finite number ({value!r})")
        return str(value.item() if hasattr(value, "item") else value)
    return str(value)


def _answers(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        raise ValueError(f"ground truth: gold answers must be a string or a list, got a dict {value!r:.80}")
    if value is not None and not hasattr(value, "__len__") and not hasattr(value, "tolist"):
        return [_answer(value)]  # a bare scalar: one answer
    if hasattr(value, "ndim") and value.ndim == 0:
        return [_answer(value.item())]
    return [_answer(a) for a in _as_list(value)]


def _str_list(value: Any, name: str) -> list[str]:
    if isinstance(value, (str, bytes)):
        raise ValueError(f"ground truth: {name} must be a list of strings, got the string {value!r:.80}")
    return [str(d) for d in _as_list(value)]


def _as_list(value: Any) -> list[Any]:
    """numpy arrays come back from parquet; make them plain lists."""
    if value is None:
        return []
    if hasattr(value, "tolist"):
        value = value.tolist()
    return list(value)


def parse_turn_doc_ids(value: Any, name: str = EF_TURN_DOC_IDS) -> list[list[str]]:
    """``gta/turn_doc_ids`` as R(q_t) per search turn: a list of lists of string ids.

    The only reader of per-turn doc ids: the reward (:mod:`gta_verl.rewards.scoring`), the
    evaluation's records (:func:`rollout_record_from_fields`, :func:`gta_verl.eval.records.from_row`)
    and verl's validation dumps (:mod:`gta_verl.eval.verl_dumps`) all read them here, so a record
    one of them refuses is refused by all, with the same message.

    None (no gta loop) is no search. numpy arrays (parquet, ``np.array(..., dtype=object)``)
    become lists first.

    Raises:
        ValueError: any other shape: a string (``"d1d2"`` would be 4 one-character turns), a
            flat list of ids, a dict, a third level of nesting, or an id that is not a string
            (bytes included).

    >>> parse_turn_doc_ids([["d1"], []])
    [['d1'], []]
    """
    return _string_lists(value, name, "id")


def parse_turn_texts(value: Any, name: str = EF_TURN_TEXTS) -> list[list[str]]:
    """``gta/turn_texts``: per search turn, each shown document's title and text.

    The only reader of the field: the evaluation's record (:func:`rollout_record_from_fields`),
    PathRouter's evidence overlap P (:func:`gta_verl.rewards.path_router_manager.retrieved_texts`)
    and :func:`drop_unshown_searches` read it here. None is no search.

    Raises:
        ValueError: the shapes :func:`parse_turn_doc_ids` refuses: a string (its characters would be
            read as passages), a flat list, a third level, or a text that is not a string.

    >>> parse_turn_texts([["Paris: the capital"], []])
    [['Paris: the capital'], []]
    """
    return _string_lists(value, name, "text")


def _string_lists(value: Any, name: str, item: str) -> list[list[str]]:
    turns = plain_value(value)
    if turns is None:
        return []
    if not isinstance(turns, (list, tuple)):
        raise ValueError(
            f"{name} must be a list of lists of {item}s, got {type(turns).__name__} {turns!r:.80}"
        )
    out: list[list[str]] = []
    for i, turn in enumerate(turns):
        values = plain_value(turn)
        if not isinstance(values, (list, tuple)):
            raise ValueError(
                f"{name}[{i}] must be a list of {item}s, got {type(values).__name__} {values!r:.80}"
            )
        bad = next((d for d in values if not isinstance(d, str)), None)
        if bad is not None:
            kind = type(bad).__name__
            raise ValueError(f"{name}[{i}] holds a {kind} {item} {bad!r:.80}; {item}s are strings")
        out.append([str(d) for d in values])
    return out


def parse_turn_queries(value: Any, name: str = EF_TURN_QUERIES) -> list[str]:
    """``gta/turn_queries``: the query text of each search turn (None: no search).

    The only reader of the field: the evaluation's record (:func:`rollout_record_from_fields`) and
    PathRouter's redundancy count (:mod:`gta_verl.rewards.path_router_manager`).

    Raises:
        ValueError: not a list (a string would be one query a character), or a query that is not
            a string.

    >>> parse_turn_queries(["capital of France"])
    ['capital of France']
    """
    queries = plain_value(value)
    if queries is None:
        return []
    if not isinstance(queries, (list, tuple)):
        raise ValueError(f"{name} must be a list of queries, got {type(queries).__name__} {queries!r:.80}")
    bad = next((q for q in queries if not isinstance(q, str)), None)
    if bad is not None:
        raise ValueError(f"{name} holds a {type(bad).__name__} query {bad!r:.80}; queries are strings")
    return [str(q) for q in queries]


def parse_answer(value: Any, name: str = EF_ANSWER) -> str | None:
    """``gta/answer``: the answer the loop parsed, None when the rollout never answered.

    The only reader of the field: the reward's ŷ (:attr:`gta_verl.rewards.scoring.ScoringRequest.prediction`),
    the evaluation's record (:func:`rollout_record_from_fields`), the step metrics' answer rate and
    the SFT data's ``answered`` column.

    Raises:
        ValueError: anything but a string or None (a number or list is no parsed answer).

    >>> parse_answer("Paris"), parse_answer(None)
    ('Paris', None)
    """
    answer = plain_value(value)
    if answer is not None and not isinstance(answer, str):
        raise ValueError(f"{name} must be a string or None, got {type(answer).__name__} {answer!r:.80}")
    return answer


def parse_count(value: Any, name: str) -> int:
    """A counter of the loop (``gta/num_searches``, ``gta/retrieval_errors``, ``gta/invalid_actions``).

    The only reader of the three: the reward's ``reward_extra_info``, the evaluation's record, the
    step metrics, the SFT data and verl's validation dumps read them here. None (not recorded) is 0;
    a whole float (``2.0``, what a numpy round trip can make of an int) is its int.

    Raises:
        ValueError: a bool, string, NaN, infinity, fraction or negative number.

    >>> parse_count(2, "gta/num_searches"), parse_count(None, "gta/num_searches")
    (2, 0)
    """
    count = plain_value(value)
    if count is None:
        return 0
    if isinstance(count, bool) or not isinstance(count, (int, float)):
        raise ValueError(f"{name} must be a count, got {type(count).__name__} {count!r:.80}")
    if not math.isfinite(count) or count != int(count) or count < 0:
        raise ValueError(f"{name} must be a whole number >= 0, got {count!r}")
    return int(count)


def parse_flag(value: Any, name: str) -> bool:
    """A yes/no field of the loop (``gta/budget_exhausted``, ``gta/truncated``,
    ``gta/place_turn_rewards``); None (not recorded) is False.

    Raises:
        ValueError: anything but a bool or None (the string ``"False"`` would read as true).

    >>> parse_flag(True, "gta/truncated"), parse_flag(None, "gta/truncated")
    (True, False)
    """
    flag = plain_value(value)
    if flag is None:
        return False
    if not isinstance(flag, bool):
        raise ValueError(f"{name} must be a bool, got {type(flag).__name__} {flag!r:.80}")
    return flag


def parse_turn_query_doc_ids(value: Any, name: str = EF_TURN_QUERY_DOC_IDS) -> list[list[list[str]]]:
    """``gta/turn_query_doc_ids`` (K > 1): per search turn, the ids each query showed.

    None (not recorded) is ``[]``; each turn is read by :func:`parse_turn_doc_ids`.

    Raises:
        ValueError: not a list per search turn, or a turn :func:`parse_turn_doc_ids` refuses.

    >>> parse_turn_query_doc_ids([[["d1"], ["d2"]], [[]]])
    [[['d1'], ['d2']], [[]]]
    """
    turns = plain_value(value)
    if turns is None:
        return []
    if not isinstance(turns, (list, tuple)):
        raise ValueError(f"{name} must be a list per search turn, got {type(turns).__name__} {turns!r:.80}")
    return [parse_turn_doc_ids(t, f"{name}[{i}]") for i, t in enumerate(turns)]


def parse_turn_spans(spans: Iterable[Sequence[Any]], response_length: int | None = None) -> list[Span]:
    """``gta/turn_spans``: validate ``[kind, start, end]`` spans and return them as tuples.

    The only reader of the field: the loop's masks (:mod:`gta_verl.agent.spans`) and the reward's
    placement (:func:`gta_verl.rewards.placement.query_end_positions`) read the spans here.

    Spans come back from parquet/JSON as lists (or numpy arrays), so this accepts
    any 3-sequence. Spans must be sorted, non-overlapping, with a known kind.

    Args:
        spans: The recorded spans.
        response_length: If given, every ``end`` must be ≤ it.

    Raises:
        ValueError: On an unknown kind, a negative or reversed span, overlap, or
            a span past ``response_length``.
    """
    out: list[Span] = []
    prev_end = 0
    for i, span in enumerate(spans):
        if len(span) != 3:
            raise ValueError(f"turn span #{i} {span!r} is not [kind, start, end]")
        kind, start, end = str(span[0]), int(span[1]), int(span[2])
        if kind not in SPAN_KINDS:
            raise ValueError(f"turn span #{i} has unknown kind {kind!r}; expected one of {SPAN_KINDS}")
        if start < prev_end or end < start:
            raise ValueError(f"turn span #{i} {span!r} overlaps the previous span or is reversed")
        if response_length is not None and end > response_length:
            raise ValueError(f"turn span #{i} {span!r} ends past response_length={response_length}")
        out.append((kind, start, end))
        prev_end = end
    return out


def drop_unshown_searches(fields: Mapping[str, Any], response_tokens: int) -> dict[str, Any]:
    """``extra_fields`` with the documents of searches the policy never saw blanked.

    A search whose tool response would start at or past the rollout's last response token
    (``gta/turn_obs_start[t] >= response_tokens``: verl's ``tool_agent`` ended the rollout
    instead of appending it) keeps its query but shows nothing: ``gta/turn_doc_ids[t]`` and
    ``gta/turn_texts[t]`` become ``[]``, so eq 15–17 and P count it as a miss. Fields
    without ``gta/turn_obs_start`` (the ``gta_search_agent`` loop, which records only what it
    rendered) come back unchanged.

    >>> drop_unshown_searches({EF_TURN_OBS_START: [10, 40], EF_TURN_DOC_IDS: [["a"], ["b"]]}, 40)
    {'gta/turn_obs_start': [10, 40], 'gta/turn_doc_ids': [['a'], []]}
    """
    starts = plain_value(fields.get(EF_TURN_OBS_START))
    if starts is None:
        return dict(fields)
    out = dict(fields)
    for key in (EF_TURN_DOC_IDS, EF_TURN_TEXTS):
        if key in out and out[key] is not None:
            turns = parse_turn_doc_ids(out[key]) if key == EF_TURN_DOC_IDS else parse_turn_texts(out[key])
            out[key] = [
                [] if t < len(starts) and int(starts[t]) >= response_tokens else turn
                for t, turn in enumerate(turns)
            ]
    return out


def make_verl_row(
    example: QAExample,
    index: int,
    agent_name: str = DEFAULT_AGENT_NAME,
    extra_info: Mapping[str, Any] | None = None,
    max_queries_per_turn: int = 1,
) -> dict[str, Any]:
    """Turn a :class:`QAExample` into one verl parquet row (see module docstring).

    ``max_queries_per_turn`` is the loop's K (``gta.agent.max_queries_per_turn``): above 1
    the prompt tells the policy how to put several queries in one search.
    """
    info: dict[str, Any] = {
        "index": int(index),
        "split": example.split,
        "question": example.question,
        "hops": int(example.hops),
        "qid": example.qid,
        "supporting_doc_ids": list(example.supporting_doc_ids),
    }
    if extra_info:
        info.update(extra_info)
    return {
        "data_source": example.data_source,
        "prompt": build_messages(example.question, max_queries_per_turn),
        "ability": ABILITY,
        "agent_name": agent_name,
        "reward_model": {
            "style": "rule",
            "ground_truth": make_ground_truth(
                example.answers, example.supporting_doc_ids, example.supporting_texts
            ),
        },
        "extra_info": info,
    }


#: verl's native tool-calling loop (``verl/experimental/agent_loop/tool_agent_loop.py``).
TOOL_AGENT_NAME = "tool_agent"


def tool_agent_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """The same training row for verl's ``tool_agent`` loop (``agent_name`` + tool prompt).

    Ground truth and ``extra_info`` are unchanged, so the reward managers score both loops
    alike; only the prompt differs (search as a tool call, :func:`build_tool_messages`).

    Raises:
        KeyError: the row has no ``extra_info.question`` (not made by :func:`make_verl_row`).
    """
    info = row.get("extra_info") or {}
    if "question" not in info:
        raise KeyError(f"row has no extra_info.question to build the tool prompt from (keys: {sorted(info)})")
    return {**dict(row), "agent_name": TOOL_AGENT_NAME, "prompt": build_tool_messages(str(info["question"]))}


def rollout_record_from_fields(
    extra_fields: Mapping[str, Any],
    ground_truth: Mapping[str, Any] | Sequence[str] | str,
    question: str = "",
    data_source: str = "",
    hops: int = 0,
    qid: str = "",
    sample_idx: int = 0,
    response_tokens: int = 0,
) -> RolloutRecord:
    """Build a :class:`RolloutRecord` from agent-loop ``extra_fields`` and the row's ground truth.

    Every ``gta/*`` field is read by its one reader (``parse_*`` above), the reward's too.

    Raises:
        ValueError: a malformed ground truth or ``gta/*`` field.
    """
    answers, doc_ids, texts = parse_ground_truth(ground_truth)
    return RolloutRecord(
        question=question,
        gold_answers=tuple(answers),
        target_doc_ids=tuple(doc_ids),
        turn_queries=tuple(parse_turn_queries(extra_fields.get(EF_TURN_QUERIES))),
        turn_doc_ids=tuple(tuple(ids) for ids in parse_turn_doc_ids(extra_fields.get(EF_TURN_DOC_IDS))),
        answer=parse_answer(extra_fields.get(EF_ANSWER)),
        retrieval_errors=parse_count(extra_fields.get(EF_RETRIEVAL_ERRORS), EF_RETRIEVAL_ERRORS),
        invalid_actions=parse_count(extra_fields.get(EF_INVALID_ACTIONS), EF_INVALID_ACTIONS),
        response_tokens=int(response_tokens),
        data_source=data_source,
        hops=int(hops),
        qid=qid,
        sample_idx=int(sample_idx),
        retrieved_texts=tuple(t for turn in parse_turn_texts(extra_fields.get(EF_TURN_TEXTS)) for t in turn),
        gold_texts=tuple(texts),
        turn_query_doc_ids=tuple(
            tuple(tuple(q) for q in turn)
            for turn in parse_turn_query_doc_ids(extra_fields.get(EF_TURN_QUERY_DOC_IDS))
        ),
    )
