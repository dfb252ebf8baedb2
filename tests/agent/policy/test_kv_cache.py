"""The engine's KV cache (agent/policy/kv_cache.py) and attention (agent/policy/attention.py):
the same numbers as transformers' own, with decode steps that write in place and unpadded
one-token queries packed per KV head."""
from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from agent.policy.attention import PACKED_SDPA
from agent.policy.kv_cache import SPARE_MIN, RoomyCache, RoomyLayer
from agent.policy.models import load_model


@pytest.fixture(scope="module")
def model():
    m, _ = load_model("tiny", dtype="float32", seed=0)
    return m


def _step(model, cache, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return model(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=cache,
                     use_cache=True).logits


def test_roomy_cache_decodes_exactly_like_dynamic_cache_and_writes_in_place(model):
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, 200, (3, 20), generator=g)
    mask = torch.ones(3, 20, dtype=torch.long)
    mask[1, :5] = 0  # a left-padded row
    caches = [DynamicCache(config=model.config), RoomyCache(model.config)]
    assert all(type(layer) is RoomyLayer for layer in caches[1].layers)
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    outs = [_step(model, c, prompt, mask, pos) for c in caches]
    assert torch.equal(outs[0], outs[1])
    room = caches[1].layers[0]._room[0]
    for i in range(SPARE_MIN + 10):  # past the first room: one regrowth
        if i == 7:  # the engine drops a finished row by assigning new tensors to keys/values
            for c in caches:
                for layer in c.layers:
                    layer.keys, layer.values = layer.keys[[0, 2]], layer.values[[0, 2]]
            mask = mask[[0, 2]]
        mask = torch.cat([mask, mask.new_ones(len(mask), 1)], dim=1)
        ids = torch.randint(3, 200, (len(mask), 1), generator=g)
        pos = mask.sum(1, keepdim=True) - 1
        outs = [_step(model, c, ids, mask, pos) for c in caches]
        assert torch.equal(outs[0], outs[1]), f"step {i}"
        layer = caches[1].layers[0]
        assert layer.keys.shape == caches[0].layers[0].keys.shape
        if 1 <= i < 7:  # steady decoding writes into the same room
            assert layer._room[0] is room
        if i == 8:  # the replaced rows moved into fresh room once
            room = layer._room[0]
        if 8 <= i < SPARE_MIN:
            assert layer._room[0] is room
    assert layer._room[0].shape[2] >= layer.keys.shape[2]


def test_unpadded_decode_takes_the_packed_query_path_and_matches_sdpa(model, monkeypatch):
    prompt = torch.randint(3, 200, (2, 12), generator=torch.Generator().manual_seed(1))
    nxt = torch.tensor([[5], [9]])
    results = {}
    for impl in ("sdpa", PACKED_SDPA):
        model.set_attn_implementation(impl)
        cache = RoomyCache(model.config)
        _step(model, cache, prompt, torch.ones(2, 12, dtype=torch.long), torch.arange(12).expand(2, 12))
        calls = []
        real = torch.nn.functional.scaled_dot_product_attention

        def spy(q, k, v, *args, **kwargs):
            calls.append((tuple(q.shape), kwargs.get("enable_gqa", False)))
            return real(q, k, v, *args, **kwargs)

        monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
        results[impl] = _step(model, cache, nxt, torch.ones(2, 13, dtype=torch.long), torch.tensor([[12], [12]]))
        monkeypatch.undo()
        results[impl + " calls"] = calls
    model.set_attn_implementation("sdpa")
    heads, kv = model.config.num_attention_heads, model.config.num_key_value_heads
    assert all(gqa for _, gqa in results["sdpa calls"])  # transformers' own unpadded form
    assert results[PACKED_SDPA + " calls"] == [((2, kv, heads // kv, 16), False)] * model.config.num_hidden_layers
    assert torch.allclose(results["sdpa"], results[PACKED_SDPA], atol=1e-5)
