"""Model loading: the tiny random Llama and its byte tokenizer, save/load round trip, smollm2."""
from __future__ import annotations

import asyncio

import pytest
import torch

from agent.policy.base import SamplingParams
from agent.policy.models import load_model, save_model


def test_tiny_is_deterministic_per_seed():
    a, _ = load_model("tiny", seed=0)
    b, _ = load_model("tiny", seed=0)
    c, _ = load_model("tiny", seed=1)
    pairs = list(zip(a.state_dict().values(), b.state_dict().values(), c.state_dict().values()))
    assert all(torch.equal(x, y) for x, y, _ in pairs)
    assert not all(torch.equal(x, z) for x, _, z in pairs)


def test_byte_tokenizer_round_trips_bytes_and_speaks_chatml():
    _, tok = load_model("tiny")
    text = "héllo\n\tworld ✓"
    ids = tok(text)["input_ids"]
    assert ids == list(text.encode("utf-8")) and tok.decode(ids) == text
    assert tok.eos_token == "<|im_end|>" and tok.convert_tokens_to_ids("<|im_start|>") >= 256
    rendered = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert rendered == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    ids = tok(rendered)["input_ids"]
    assert ids.count(tok.convert_tokens_to_ids("<|im_start|>")) == 2 and tok.eos_token_id in ids
    assert tok.decode([0xE2, 0x9C]) == "\ufffd"  # a cut multi-byte character decodes, never raises


def test_save_and_load_round_trip(tmp_path):
    model, tok = load_model("tiny", seed=3)
    save_model(model, tok, tmp_path / "m")
    again, tok2 = load_model(str(tmp_path / "m"))
    assert all(torch.equal(x, y) for x, y in zip(model.state_dict().values(), again.state_dict().values()))
    assert tok2("abc")["input_ids"] == tok("abc")["input_ids"] and tok2.chat_template == tok.chat_template


def test_unknown_model_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_model(str(tmp_path / "nothing"))
    with pytest.raises(ValueError, match="dtype"):
        load_model("tiny", dtype="int3")


@pytest.mark.slow
def test_smollm2_loads_offline_with_chatml_and_generates():
    from agent.policy.engine import Engine

    model, tok = load_model("smollm2")
    assert tok.eos_token == "<|im_end|>" and model.config.num_hidden_layers == 30
    assert model.generation_config.eos_token_id == tok.eos_token_id
    rendered = tok.apply_chat_template([{"role": "user", "content": "What is 2+3?"}], tokenize=False,
                                       add_generation_prompt=True)
    assert "<|im_start|>user\nWhat is 2+3?<|im_end|>\n" in rendered and rendered.endswith("<|im_start|>assistant\n")
    engine = Engine("smollm2")
    try:
        ids = tok(rendered)["input_ids"]
        res = asyncio.run(engine.generate(ids, SamplingParams(max_new_tokens=12, temperature=0.0)))
        assert "5" in res.text and len(res.logprobs) == len(res.output_ids)
        assert all(lp <= 0 for lp in res.logprobs)
    finally:
        engine.close()
