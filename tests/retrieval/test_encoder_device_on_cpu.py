"""``RetrieverConfig.encoder_device``: where the retriever's query encoder loads (``cuda`` on a GPU node)."""

from __future__ import annotations

import types

import pytest

from gta_verl.retrieval.backends import open_kb_retriever
from gta_verl.retrieval.config import RetrieverConfig
from gta_verl.retrieval.section import RetrieverSection


class _Loaded(Exception):
    pass


@pytest.mark.parametrize(
    ("config", "device"),
    [(None, "cpu"), (RetrieverConfig(), "cpu"), (RetrieverConfig(encoder_device="cuda:1"), "cuda:1")],
)
def test_open_kb_retriever_loads_the_encoder_on_the_configured_device(monkeypatch, config, device):
    seen = {}

    def fake_load(name, device="cpu", cache=True, allow_download=False):
        seen.update(name=name, device=device, cache=cache)
        raise _Loaded

    monkeypatch.setattr("gta_verl.kb.embed.load_embedder", fake_load)
    with pytest.raises(_Loaded):
        open_kb_retriever(types.SimpleNamespace(embedder_name="enc"), config)
    assert seen == {"name": "enc", "device": device, "cache": False}


def test_gta_retriever_section_accepts_encoder_device():
    section = RetrieverSection.from_mapping({"kb_dir": "/kb", "encoder_device": "cuda"})
    assert section.retriever_config().encoder_device == "cuda"
    assert RetrieverSection.from_mapping({"kb_dir": "/kb"}).retriever_config().encoder_device == "cpu"
