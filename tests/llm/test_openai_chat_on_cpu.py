"""The shared chat client against a real local HTTP server."""

import pytest

from gta_verl.llm.openai_chat import ChatClient, ChatError
from tests.support.openai_server import openai_stub_server


def test_complete_returns_text_and_sends_model():
    with openai_stub_server(["hello"]) as (url, log):
        client = ChatClient(url, "stub-model", sleep=lambda s: None)
        assert client.complete([{"role": "user", "content": "hi"}], temperature=0.0) == "hello"
    assert log[0]["model"] == "stub-model"
    assert log[0]["temperature"] == 0.0


def test_retries_transient_errors_then_succeeds():
    delays = []
    with openai_stub_server([503, 429, "ok"]) as (url, log):
        client = ChatClient(url, "m", max_retries=3, backoff=0.5, sleep=delays.append)
        assert client.complete([{"role": "user", "content": "x"}]) == "ok"
    assert len(log) == 3
    assert delays == [0.5, 1.0]  # exponential backoff


def test_gives_up_after_max_retries():
    with openai_stub_server([500]) as (url, log):
        client = ChatClient(url, "m", max_retries=2, sleep=lambda s: None)
        with pytest.raises(ChatError, match="after 3 attempts"):
            client.complete([{"role": "user", "content": "x"}])
    assert len(log) == 3


def test_non_retryable_status_fails_at_once():
    with openai_stub_server([400]) as (url, log):
        client = ChatClient(url, "m", sleep=lambda s: None)
        with pytest.raises(ChatError, match="HTTP 400"):
            client.complete([{"role": "user", "content": "x"}])
    assert len(log) == 1


def test_complete_many_keeps_order_and_reports_failures():
    def reply(body):
        text = body["messages"][0]["content"]
        return 400 if text == "bad" else text.upper()

    with openai_stub_server(reply) as (url, _):
        client = ChatClient(url, "m", sleep=lambda s: None)
        out = client.complete_many(
            [[{"role": "user", "content": c}] for c in ["a", "bad", "c"]], concurrency=3
        )
    assert out[0] == "A" and out[2] == "C"
    assert isinstance(out[1], ChatError)


def test_config_validation():
    with pytest.raises(ValueError, match="http"):
        ChatClient("localhost:8000", "m")
