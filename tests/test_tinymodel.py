"""The tiny model directory is what vLLM needs for --load-format dummy: config + a working tokenizer."""

from __future__ import annotations

import json

import pytest

from pytest_p2p.errors import ServerError
from pytest_p2p.serve.tinymodel import main, write_tiny_model

tokenizers = pytest.importorskip("tokenizers")


def test_writes_a_servable_llama_directory(tmp_path):
    out = write_tiny_model(tmp_path / "m", hidden=512, layers=2, heads=8, kv_heads=4)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["head_dim"] == 64
    tok = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    enc = tok.encode("peer access over nvlink")
    assert enc.ids[0] == cfg["bos_token_id"] and tok.decode(enc.ids) == "peer access over nvlink"
    assert cfg["vocab_size"] >= tok.get_vocab_size()
    assert json.loads((out / "tokenizer_config.json").read_text())["chat_template"].startswith("{% for")


def test_inconsistent_shape_is_a_clear_error(tmp_path):
    with pytest.raises(ServerError, match="must divide"):
        write_tiny_model(tmp_path / "m", hidden=500, heads=16)
    assert main([str(tmp_path / "n"), "--hidden", "100", "--heads", "16"]) == 2


def test_zero_heads_is_a_clear_error_not_a_division_by_zero(tmp_path):
    with pytest.raises(ServerError, match="at least 1, got heads 0"):
        write_tiny_model(tmp_path / "m", heads=0)
    assert main([str(tmp_path / "n"), "--kv-heads", "0"]) == 2
    assert not (tmp_path / "n").exists()
