"""``GraphSearchTool``: the graph retriever as a verl ``BaseTool`` for verl's ``tool_agent`` loop.

verl's ``ToolAgentLoop`` (``verl/experimental/agent_loop/tool_agent_loop.py``) parses the
model's native tool calls (``multi_turn.format: hermes`` = Qwen2.5's ``<tool_call>`` JSON),
calls ``await tool.execute(instance_id, arguments, agent_data=agent_data)`` and appends the
returned text as a ``tool`` message (``response_mask`` 0). ``agent_data.extra_fields``
becomes the trajectory's ``AgentLoopOutput.extra_fields``, which verl hands the reward
manager as ``tool_extra_fields``; so each call records here what ``gta_search_agent``
records per search turn (:mod:`gta_verl.data.schema`): ``gta/turn_queries``,
``gta/turn_doc_ids``, ``gta/turn_texts``, ``gta/num_searches``, ``gta/retrieval_errors``,
and ``gta/invalid_actions`` for a call without a usable query (arguments that are not a JSON
object, a query that is not a non-blank string). The reward managers therefore score both
loops with the same code.

Only documents the policy saw may count. verl's loop ends a rollout without appending a tool
response that would overrun ``rollout.response_length`` (``tool_agent_loop.py``, the
``len(response_mask) >= self.response_length`` return), after ``execute`` recorded its ids;
so each call also records ``gta/turn_obs_start``, the response-token index its response would
start at, and the scorer blanks a search whose response starts at or past the rollout's last
token (:func:`gta_verl.data.schema.drop_unshown_searches`): a miss, as in ``gta_search_agent``,
whose observation is cut to the budget left.

The retriever is the job's named Ray actor, reached through the same process-wide client as
``gta_search_agent`` (:func:`gta_verl.agent.retriever_access.get_retriever_client`). verl
gives a tool only its own YAML ``config`` (not the trainer config), so the actor name and
timeout are set there and must match ``gta.retriever`` (the recipe passes both).

Declared in ``gta_verl/config/tools/graph_search.yaml`` (``multi_turn.tool_config_path``),
with the OpenAI-style function schema ``search(query: str)``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

from gta_verl.agent.config import AgentConfig, RetrieverTransport
from gta_verl.agent.observation import fit_observation
from gta_verl.data import schema
from gta_verl.data.types import RetrievalHit
from gta_verl.protocol import INVALID_ACTION_MESSAGE
from gta_verl.retrieval.config import RetrieverConfig
from gta_verl.retrieval.section import RetrieverSection
from gta_verl.strict_config import StrictConfig
from gta_verl.verl_compat import BaseTool, OpenAIFunctionToolSchema, ToolResponse

__all__ = ["GraphSearchTool", "ToolSettings", "fill_search", "record_invalid", "reserve_search", "tool_query"]


@dataclass(frozen=True)
class ToolSettings(StrictConfig):
    """The tool's YAML ``config`` (besides verl's ``type: native``).

    Attributes:
        actor_name: The retriever service's Ray actor (``gta.retriever.actor_name``).
        kb_dir: KB to load when no actor runs (``inprocess`` transport); None = actor only.
        timeout_s: Per-call timeout (``gta.retriever.timeout_s``); a slow call is shown as a failure.
        transport: ``auto`` | ``ray`` | ``inprocess`` | ``http`` (``gta.agent.retriever_transport``).
        retriever_url: Base URL for ``http``.
        max_obs_chars: Cap on the tool response, in characters: every passage is shortened
            alike to fit (as ``gta.agent.max_obs_tokens`` does in tokens) and only shown
            passages are recorded. Keep ``multi_turn.max_tool_response_length`` at least this
            large, or verl cuts the text after the doc ids were recorded.
        max_query_chars: Longer queries are cut to this many characters before they are
            searched and recorded (the retriever's own cut, ``max_query_chars``).
    """

    WHERE = "GraphSearchTool config"

    # The same service and budget as gta.retriever's, so both loops find one actor by name.
    actor_name: str = RetrieverSection.actor_name
    kb_dir: str | None = None
    timeout_s: float = RetrieverSection.timeout_s
    transport: RetrieverTransport = "auto"
    retriever_url: str | None = None
    max_obs_chars: int = 2048
    max_query_chars: int = RetrieverConfig.max_query_chars

    @classmethod
    def from_tool_config(cls, config: Mapping[str, Any] | None) -> ToolSettings:
        """From verl's tool ``config`` (its ``type`` key is verl's); unknown keys raise, naming the valid
        ones."""
        return cls.from_mapping({k: v for k, v in dict(config or {}).items() if k != "type"})

    def trainer_config(self) -> dict[str, Any]:
        """The slice of a trainer config :func:`get_retriever_client` reads."""
        return {
            "gta": {
                "retriever": {
                    "actor_name": self.actor_name,
                    "kb_dir": self.kb_dir,
                    "timeout_s": float(self.timeout_s),
                }
            }
        }

    def agent_config(self) -> AgentConfig:
        """The transport part of ``gta.agent`` :func:`get_retriever_client` reads."""
        return AgentConfig(retriever_transport=self.transport, retriever_url=self.retriever_url)


def reserve_search(fields: MutableMapping[str, Any], query: str, obs_start: int | None = None) -> int:
    """Open this call's search-turn record before the retriever answers; return its index.

    Reserving first keeps the records in call order when verl runs parallel calls of one
    turn concurrently (``multi_turn.max_parallel_calls`` > 1). ``obs_start`` is the
    response-token index the call's tool response would start at (``len(response_mask)``
    when verl calls the tool), recorded as ``gta/turn_obs_start``.
    """
    if obs_start is not None:
        fields.setdefault(schema.EF_TURN_OBS_START, []).append(int(obs_start))
    fields.setdefault(schema.EF_TURN_QUERIES, []).append(query)
    fields.setdefault(schema.EF_TURN_DOC_IDS, []).append([])
    fields.setdefault(schema.EF_TURN_TEXTS, []).append([])
    fields[schema.EF_NUM_SEARCHES] = len(fields[schema.EF_TURN_QUERIES])
    fields.setdefault(schema.EF_RETRIEVAL_ERRORS, 0)
    fields.setdefault(schema.EF_INVALID_ACTIONS, 0)
    return fields[schema.EF_NUM_SEARCHES] - 1


def fill_search(
    fields: MutableMapping[str, Any], slot: int, shown: Sequence[RetrievalHit], error: str | None
) -> None:
    """Record the passages shown for the search turn ``slot`` (what the policy saw)."""
    fields[schema.EF_TURN_DOC_IDS][slot] = [h.doc_id for h in shown]
    fields[schema.EF_TURN_TEXTS][slot] = [f"{h.title}\n{h.text}" for h in shown]
    if error is not None:
        fields[schema.EF_RETRIEVAL_ERRORS] = int(fields.get(schema.EF_RETRIEVAL_ERRORS, 0)) + 1


def record_invalid(fields: MutableMapping[str, Any]) -> None:
    """A call without a usable query: an invalid action, as in ``gta_search_agent``."""
    fields[schema.EF_INVALID_ACTIONS] = int(fields.get(schema.EF_INVALID_ACTIONS, 0)) + 1
    fields.setdefault(schema.EF_NUM_SEARCHES, len(fields.get(schema.EF_TURN_QUERIES, [])))
    fields.setdefault(schema.EF_TURN_DOC_IDS, [])


def tool_query(parameters: Any, max_chars: int) -> str | None:
    """The call's query, cut to ``max_chars``; None when the arguments hold no usable query.

    Usable: the arguments are a JSON object (a mapping) whose ``query`` is a string with
    something besides whitespace. A list, dict, number or boolean is not searched as its repr.

    >>> tool_query({"query": " film "}, 3), tool_query({"query": ["film"]}, 9), tool_query([1], 9)
    ('fil', None, None)
    """
    if not isinstance(parameters, Mapping):
        return None
    query = parameters.get("query")
    if not isinstance(query, str) or not query.strip():
        return None
    return query.strip()[:max_chars]


def _chars(text: str) -> list[int]:
    return [ord(c) for c in text]


def _unchars(codes: Sequence[int]) -> str:
    return "".join(chr(c) for c in codes)


class GraphSearchTool(BaseTool):
    """``search(query)`` over the GTA retrieval environment R(q) (see the module docstring).

    Args:
        config: The YAML ``config`` (:class:`ToolSettings` keys plus ``type: native``).
        tool_schema: The OpenAI-style schema from the YAML.
    """

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None) -> None:
        super().__init__(config, tool_schema)
        self.settings = ToolSettings.from_tool_config(config)
        self._client: Any = None

    async def _retriever(self) -> Any:
        from gta_verl.agent.retriever_access import get_retriever_client

        # get_retriever_client caches one client per process under a lock (it may load a KB),
        # so concurrent first calls get the same client.
        if self._client is None:
            self._client = await asyncio.get_running_loop().run_in_executor(
                None, get_retriever_client, self.settings.trainer_config(), self.settings.agent_config()
            )
        return self._client

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        """Search and record the call in ``agent_data.extra_fields``; returns verl's triple."""
        from gta_verl.agent.retriever_access import aretrieve_guarded
        from gta_verl.data.types import RetrievalResult

        agent_data = kwargs.get("agent_data")
        fields = agent_data.extra_fields if agent_data is not None else {}
        query = tool_query(parameters, int(self.settings.max_query_chars))
        if query is None:
            record_invalid(fields)
            return ToolResponse(text=INVALID_ACTION_MESSAGE.strip()), 0.0, {"invalid": 1}
        mask = getattr(agent_data, "response_mask", None)
        slot = reserve_search(fields, query, None if mask is None else len(mask))
        try:
            (result,) = await aretrieve_guarded(
                await self._retriever(), [query], float(self.settings.timeout_s)
            )
        except Exception as exc:  # no client: shown to the policy as a failure
            result = RetrievalResult(query=query, error=f"{type(exc).__name__}: {exc}")
        fitted = fit_observation(
            result.hits, result.error, int(self.settings.max_obs_chars), _chars, _unchars
        )
        fill_search(fields, slot, fitted.shown, result.error)
        return ToolResponse(text=_unchars(fitted.ids).strip()), 0.0, {"num_docs": len(fitted.shown)}
