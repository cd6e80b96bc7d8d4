"""The action protocol module: bottom of the import graph, one parser for every consumer."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from gta_verl import protocol
from gta_verl.protocol import INVALID_ACTION_MESSAGE, final_answer, parse_turns

REPO = Path(__file__).resolve().parents[1]
TAGS = ("<search>", "</search>", "<answer>", "</answer>", "<info>", "</info>")


def test_protocol_imports_no_gta_module():
    tree = ast.parse((REPO / "gta_verl" / "protocol.py").read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not any(m.startswith("gta_verl") for m in imported), imported


def test_schema_and_qa_do_not_load_the_agent_package():
    # data/ and rewards/qa.py sit below agent/: importing them must not pull the agent package in.
    code = (
        "import sys, gta_verl.data.schema, gta_verl.rewards.qa;"
        "print(sorted(m for m in sys.modules if m.startswith('gta_verl.agent')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"


def test_no_other_module_defines_the_tags():
    # One definition: no module outside protocol.py spells the tag literals as constants.
    offenders = []
    for path in (REPO / "gta_verl").rglob("*.py"):
        if path.name == "protocol.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                if node.value.value in TAGS:
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert offenders == []


def test_parse_turns_replays_the_loop():
    text = (
        "I think <answer> maybe Paris, check <search> capital of France </search>"
        "\n\n<info>Doc 1(Title: Paris) text <search> inner </search></info>\n\n"
        "no closer here" + INVALID_ACTION_MESSAGE + "<answer> Lyon </answer>"
    )
    turns = parse_turns(text)
    # turn 1: first closer is </search> → search "capital of France" (opener after the stray
    # "<answer>"); its observation is skipped whole (the passage's tags are not actions);
    # turn 2: no closer before the invalid message → invalid; turn 3: the answer.
    assert [t.action.kind for t in turns] == ["search", "invalid", "answer"]
    assert turns[0].action.content == "capital of France"
    assert turns[0].observation == "Doc 1(Title: Paris) text <search> inner </search>"
    assert turns[2].action.content == "Lyon" and final_answer(text) == "Lyon"


@pytest.mark.parametrize("text", ["", "   ", "just thinking", "<search> q </search>\n\n<info>cut off"])
def test_no_answer(text):
    assert final_answer(text) is None


def test_public_names():
    for name in protocol.__all__:
        assert hasattr(protocol, name), name


def test_fewshot_prompt_renders_observations_as_the_loop_does():
    from gta_verl.eval.verl_dumps import question_from_prompt
    from gta_verl.protocol import PROMPT_STYLES, build_messages, format_observation, parse_turns

    content = build_messages("who wrote Hamlet", style="fewshot")[0]["content"]
    # The examples' observations are the loop's own rendering; the question comes last, "?" added.
    assert "<search> director of the film Jaws </search>\n\n<info>Doc 1(Title: Jaws (film)) " in content
    assert content.endswith("Question: who wrote Hamlet?\n")
    assert question_from_prompt(content) == "who wrote Hamlet?"
    # Every example parses, with the protocol's one parser, as 2 searches then an answer (4 examples' turns).
    example = content.split("Question: ")[1].split("\n", 1)[1]
    kinds = [t.action.kind for t in parse_turns(example)]
    assert kinds == ["search", "search", "answer"]
    assert format_observation([]) not in content
    assert PROMPT_STYLES == ("instructions", "fewshot")
    with pytest.raises(ValueError, match="unknown prompt style 'chat'"):
        build_messages("q", style="chat")
