"""The engine's attention: transformers' SDPA with every one-token query packed per KV head.

For a decode step (one query token per row) of a grouped-query model, transformers packs the
query heads that share a key/value head into one [batch, kv_heads, group, dim] query when the
batch carries a padding mask, but hands SDPA `enable_gqa=True` when it does not (no row is
padded). torch's CPU kernel runs the second form several times slower in bf16 (SmolLM2-135M at
8 x 800 tokens: 3.7 ms vs 0.5 ms per layer, the bigger half of a decode step), so an unpadded
batch was the slow case. Here both take the packed form; everything else is transformers' SDPA.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

PACKED_SDPA = "sdpa_packed_decode"


def packed_sdpa(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                attention_mask: torch.Tensor | None, **kwargs) -> tuple[torch.Tensor, None]:
    groups = getattr(module, "num_key_value_groups", 1)
    if query.shape[2] != 1 or attention_mask is not None or groups == 1 or kwargs.get("dropout", 0.0):
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    b, heads, _, dim = query.shape
    # query head h reads KV head h // groups (transformers' repeat_kv order), so heads fold per KV head
    out = F.scaled_dot_product_attention(query.reshape(b, heads // groups, groups, dim), key, value,
                                         scale=kwargs.get("scaling"))
    return out.reshape(b, heads, 1, dim).transpose(1, 2).contiguous(), None


AttentionInterface.register(PACKED_SDPA, packed_sdpa)
AttentionMaskInterface.register(PACKED_SDPA, sdpa_mask)
