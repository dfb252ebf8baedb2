"""Model loading: the tiny random Llama and its byte tokenizer, save/load round trip, smollm2."""
from __future__ import annotations

import asyncio

import pytest
import torch

from agent.policy.base import SamplingParams
from agent.policy.models import learner_bf16, load_model, resolve_dtype, save_model


def test_tiny_is_deterministic_per_seed():
    a, _ = load_model("tiny", dtype="float32", seed=0)
    b, _ = load_model("tiny", dtype="float32", seed=0)
    c, _ = load_model("tiny", dtype="float32", seed=1)
    pairs = list(zip(a.state_dict().values(), b.state_dict().values(), c.state_dict().values()))
    assert all(torch.equal(x, y) for x, y, _ in pairs)
    assert not all(torch.equal(x, z) for x, _, z in pairs)


def test_byte_tokenizer_round_trips_bytes_and_speaks_chatml():
    _, tok = load_model("tiny", dtype="float32")
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
    model, tok = load_model("tiny", dtype="float32", seed=3)
    save_model(model, tok, tmp_path / "m")
    again, tok2 = load_model(str(tmp_path / "m"), dtype="float32")
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


def test_auto_dtype_follows_the_cpu_bf16_units():
    assert resolve_dtype("auto", "cpu", flags=frozenset({"avx2", "amx_bf16"})) == torch.bfloat16
    assert resolve_dtype("auto", "cpu", flags=frozenset({"avx512_bf16"})) == torch.bfloat16
    assert resolve_dtype("auto", "cpu", flags=frozenset({"avx2", "avx512f"})) == torch.float32
    assert resolve_dtype("auto", "cuda") == torch.bfloat16
    assert resolve_dtype("float32", "cpu", flags=frozenset({"amx_bf16"})) == torch.float32
    with pytest.raises(ValueError, match="unknown dtype"):
        resolve_dtype("fp8")


def test_learner_bf16_auto_follows_the_served_dtype():
    here = resolve_dtype("auto", "cpu") == torch.bfloat16
    assert learner_bf16("auto", "auto", "cpu") is here
    assert learner_bf16("auto", "float32", "cpu") is False
    assert learner_bf16("auto", "bfloat16", "cpu") is True
    assert learner_bf16(False, "bfloat16") is False and learner_bf16("true", "float32") is True
    with pytest.raises(ValueError, match="true, false or auto"):
        learner_bf16("maybe", "float32")
