"""Qwen2.5-Instruct's chat template with its tool-calling branches, for verl's ``tool_agent``.

:data:`gta_verl.agent.tokenizer.QWEN25_CHAT_TEMPLATE` (the offline tokenizer's template and so
the tiny CPU model's) drops these branches: ``gta_search_agent`` speaks tags in plain
assistant text. verl's ``tool_agent`` needs them: the system message lists the tools' JSON
schemas, assistant tool calls render as ``<tool_call>{"name": …, "arguments": …}</tool_call>``
(what the ``hermes`` parser reads back) and tool results as a user turn of
``<tool_response>`` blocks. For messages without tools it renders exactly like
``QWEN25_CHAT_TEMPLATE``. A real Qwen2.5-Instruct checkpoint ships this template; the CPU
recipe sets it through ``actor_rollout_ref.model.custom_chat_template``
(``${gta_chat_template:qwen2.5_tools}``, resolver registered by :mod:`gta_verl.verl_plugins`).
"""

from __future__ import annotations

from gta_verl.agent.tokenizer import QWEN25_SYSTEM_TURN

__all__ = ["CHAT_TEMPLATES", "QWEN25_TOOL_CHAT_TEMPLATE", "chat_template", "register_resolver"]

QWEN25_TOOL_CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}"
    "{%- else %}{{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}{%- endif %}"
    "{{- '\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments "
    'within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{"name": <function-name>, '
    '"arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n\' }}'
    "{%- else %}" + QWEN25_SYSTEM_TURN + "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if (message.role == 'user') or (message.role == 'system' and not loop.first)"
    " or (message.role == 'assistant' and not message.tool_calls) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>' + message.role }}"
    "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
    "{%- for tool_call in message.tool_calls %}"
    "{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}"
    '{{- \'\\n<tool_call>\\n{"name": "\' }}{{- tool_call.name }}{{- \'", "arguments": \' }}'
    "{{- tool_call.arguments | tojson }}{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != 'tool') %}"
    "{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' }}{{- message.content }}{{- '\\n</tool_response>' }}"
    "{%- if loop.last or (messages[loop.index0 + 1].role != 'tool') %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

#: name → template, for the ``gta_chat_template`` resolver.
CHAT_TEMPLATES = {"qwen2.5_tools": QWEN25_TOOL_CHAT_TEMPLATE}


def chat_template(name: str) -> str:
    """The template called ``name`` (a key of :data:`CHAT_TEMPLATES`)."""
    if name not in CHAT_TEMPLATES:
        raise KeyError(f"unknown chat template {name!r}; known: {sorted(CHAT_TEMPLATES)}")
    return CHAT_TEMPLATES[name]


def register_resolver() -> None:
    """Register ``${gta_chat_template:<name>}`` with OmegaConf (idempotent)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("gta_chat_template"):
        OmegaConf.register_new_resolver("gta_chat_template", chat_template)
