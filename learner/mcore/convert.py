"""HF Llama/Qwen2/Qwen3 <-> megatron-core GPTModel: the config mapping and the weight conversion.

Megatron keeps one fused QKV matrix per layer, interleaved per query group
([q heads of group 0, k0, v0, q heads of group 1, k1, v1, ...]) so that a contiguous tensor-parallel
slice holds whole groups, and one fc1 matrix [gate; up] whose TP slice r is [gate_r; up_r].
Every step here is a reshape, split or concatenation, so HF -> Megatron -> HF is exact.
The vocabulary is padded with zero rows to a multiple of the TP size (megatron splits it
evenly); the padding is dropped on the way back and its logits are never used.

State dicts here map names to tensors: `to_megatron`/`to_hf` work on whole (unsharded) models,
`shard`/`merge` cut a whole Megatron state dict into the pieces of each (pipeline stage, TP rank)
and put them back. The same functions convert gradients and Adam moments (they are elementwise
companions of the weights).
"""
from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from transformers import PretrainedConfig

SUPPORTED = ("llama", "qwen2", "qwen3")
Tensors = dict[str, torch.Tensor]


@dataclasses.dataclass(frozen=True)
class Shape:
    """What the conversion needs to know of a model."""

    layers: int
    heads: int
    groups: int  # key/value heads
    head_dim: int
    vocab: int
    tied: bool
    qkv_bias: bool  # Qwen2
    qk_norm: bool  # Qwen3: RMSNorm over each head's queries and keys

    def padded_vocab(self, tp: int) -> int:
        return math.ceil(self.vocab / tp) * tp


def rope_theta(cfg: PretrainedConfig) -> float:
    params = getattr(cfg, "rope_parameters", None) or {}
    return float(params.get("rope_theta", getattr(cfg, "rope_theta", 10000.0)))


def shape_of(cfg: PretrainedConfig) -> Shape:
    """The model's Shape; a one-line ValueError for what megatron's local GPT layers cannot express."""
    kind = getattr(cfg, "model_type", None)
    if kind not in SUPPORTED:
        raise ValueError(f"learner=megatron supports Llama, Qwen2 and Qwen3 models, not model_type={kind!r}")
    if cfg.hidden_act != "silu":
        raise ValueError(f"learner=megatron: hidden_act={cfg.hidden_act!r} is not supported (SwiGLU with silu only)")
    rope = getattr(cfg, "rope_parameters", None) or {}
    if rope.get("rope_type", "default") != "default":
        raise ValueError(f"learner=megatron: rope_type={rope['rope_type']!r} (RoPE scaling) is not supported")
    if getattr(cfg, "attention_bias", False) or getattr(cfg, "mlp_bias", False):
        raise ValueError("learner=megatron: attention_bias / mlp_bias are not supported")
    if getattr(cfg, "use_sliding_window", False):
        raise ValueError("learner=megatron: sliding-window attention is not supported")
    if getattr(cfg, "attention_dropout", 0.0):
        raise ValueError("learner=megatron: attention_dropout must be 0 (the learner draws no random numbers)")
    heads = cfg.num_attention_heads
    return Shape(
        layers=cfg.num_hidden_layers, heads=heads, groups=cfg.num_key_value_heads or heads,
        head_dim=getattr(cfg, "head_dim", None) or cfg.hidden_size // heads, vocab=cfg.vocab_size,
        tied=bool(cfg.tie_word_embeddings), qkv_bias=kind == "qwen2", qk_norm=kind == "qwen3",
    )


def check_parallel(shape: Shape, tp: int, pp: int) -> None:
    if tp < 1 or pp < 1:
        raise ValueError(f"learner=megatron: parallel sizes must be >= 1 (tensor {tp}, pipeline {pp})")
    if shape.groups % tp or shape.heads % tp:
        raise ValueError(f"learner=megatron: tensor_model_parallel_size={tp} must divide the {shape.heads} attention "
                         f"and {shape.groups} key/value heads")
    if shape.layers % pp:
        raise ValueError(f"learner=megatron: pipeline_model_parallel_size={pp} must divide the {shape.layers} layers")


def transformer_config(cfg: PretrainedConfig, tp: int, pp: int, cuda: bool, recompute: bool = False):
    """The megatron TransformerConfig of an HF Llama/Qwen2 config (float32 parameters)."""
    from megatron.core.transformer import TransformerConfig

    s = shape_of(cfg)
    check_parallel(s, tp, pp)
    return TransformerConfig(
        num_layers=s.layers, hidden_size=cfg.hidden_size, ffn_hidden_size=cfg.intermediate_size,
        num_attention_heads=s.heads, num_query_groups=s.groups, kv_channels=s.head_dim,
        normalization="RMSNorm", layernorm_epsilon=cfg.rms_norm_eps,
        gated_linear_unit=True, activation_func=F.silu, add_bias_linear=False, add_qkv_bias=s.qkv_bias,
        qk_layernorm=s.qk_norm,
        hidden_dropout=0.0, attention_dropout=0.0,
        tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, pipeline_dtype=torch.float32,
        # the weights come from HF, but without initialisation megatron leaves the tensor-parallel
        # attributes unset, and the gradient norm needs them to count each shard once
        params_dtype=torch.float32, use_cpu_initialization=True, perform_initialization=True,
        # the fused kernels are CUDA-only (and not in the local spec)
        bias_activation_fusion=False, masked_softmax_fusion=False, bias_dropout_fusion=False,
        apply_rope_fusion=False, persist_layer_norm=False, gradient_accumulation_fusion=False,
        # our loss is already normalised over the whole batch: the schedule must not divide it again
        calculate_per_token_loss=True,
        # micro-batches have different shapes; stages tell each other (megatron's config check
        # wants the alltoall dispatcher for that, though there are no experts here)
        variable_seq_lengths=pp > 1, moe_token_dispatcher_type="alltoall",
        batch_p2p_comm=cuda,
        recompute_granularity="full" if recompute else None,
        recompute_method="uniform" if recompute else None,
        recompute_num_layers=1 if recompute else None,
    )


# ---- whole models --------------------------------------------------------------------------
_PER_LAYER = {  # HF suffix -> Megatron suffix, one tensor each
    "input_layernorm.weight": "input_layernorm.weight",
    "post_attention_layernorm.weight": "pre_mlp_layernorm.weight",
    "self_attn.o_proj.weight": "self_attention.linear_proj.weight",
    "mlp.down_proj.weight": "mlp.linear_fc2.weight",
}


def _per_layer(s: Shape) -> dict[str, str]:
    if not s.qk_norm:
        return _PER_LAYER
    return {**_PER_LAYER, "self_attn.q_norm.weight": "self_attention.q_layernorm.weight",
            "self_attn.k_norm.weight": "self_attention.k_layernorm.weight"}


def _pad_rows(t: torch.Tensor, rows: int) -> torch.Tensor:
    return t if t.shape[0] == rows else torch.cat([t, t.new_zeros(rows - t.shape[0], *t.shape[1:])])


def _fuse_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, groups: int) -> torch.Tensor:
    rest = q.shape[1:]
    return torch.cat([x.reshape(groups, -1, *rest) for x in (q, k, v)], dim=1).reshape(-1, *rest)


def _split_qkv(qkv: torch.Tensor, s: Shape) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rest = qkv.shape[1:]
    sizes = [s.heads // s.groups * s.head_dim, s.head_dim, s.head_dim]
    parts = qkv.reshape(s.groups, -1, *rest).split(sizes, dim=1)
    return tuple(p.reshape(-1, *rest).contiguous() for p in parts)  # type: ignore[return-value]


def _qkv_kinds(s: Shape) -> tuple[str, ...]:
    return ("weight", "bias") if s.qkv_bias else ("weight",)


def to_megatron(hf: Tensors, s: Shape, tp: int = 1) -> Tensors:
    """A whole HF state dict as a whole Megatron one (vocabulary padded for `tp`)."""
    vocab = s.padded_vocab(tp)
    out = {
        "embedding.word_embeddings.weight": _pad_rows(hf["model.embed_tokens.weight"], vocab),
        "decoder.final_layernorm.weight": hf["model.norm.weight"],
    }
    if not s.tied:
        out["output_layer.weight"] = _pad_rows(hf["lm_head.weight"], vocab)
    for i in range(s.layers):
        h, m = f"model.layers.{i}.", f"decoder.layers.{i}."
        for a, b in _per_layer(s).items():
            out[m + b] = hf[h + a]
        for kind in _qkv_kinds(s):
            out[m + f"self_attention.linear_qkv.{kind}"] = _fuse_qkv(
                *(hf[h + f"self_attn.{p}_proj.{kind}"] for p in "qkv"), s.groups)
        out[m + "mlp.linear_fc1.weight"] = torch.cat([hf[h + "mlp.gate_proj.weight"], hf[h + "mlp.up_proj.weight"]])
    return out


def to_hf(mg: Tensors, s: Shape) -> Tensors:
    """A whole Megatron state dict as a whole HF one (tied models get lm_head = embed_tokens)."""
    embed = mg["embedding.word_embeddings.weight"][: s.vocab]
    out = {"model.embed_tokens.weight": embed, "model.norm.weight": mg["decoder.final_layernorm.weight"],
           "lm_head.weight": embed if s.tied else mg["output_layer.weight"][: s.vocab]}
    for i in range(s.layers):
        h, m = f"model.layers.{i}.", f"decoder.layers.{i}."
        for a, b in _per_layer(s).items():
            out[h + a] = mg[m + b]
        for kind in _qkv_kinds(s):
            for p, t in zip("qkv", _split_qkv(mg[m + f"self_attention.linear_qkv.{kind}"], s)):
                out[h + f"self_attn.{p}_proj.{kind}"] = t
        gate, up = mg[m + "mlp.linear_fc1.weight"].chunk(2)
        out[h + "mlp.gate_proj.weight"], out[h + "mlp.up_proj.weight"] = gate.contiguous(), up.contiguous()
    return out


# ---- pieces per (pipeline stage, tensor-parallel rank) -------------------------------------
def _split_dim(name: str) -> int | None:
    """The dimension megatron splits a tensor along over TP ranks; None: every rank holds it all."""
    if name.endswith(("linear_qkv.weight", "linear_qkv.bias", "word_embeddings.weight", "output_layer.weight",
                      "linear_fc1.weight")):
        return 0
    if name.endswith(("linear_proj.weight", "linear_fc2.weight")):
        return 1
    return None


def _tp_piece(name: str, t: torch.Tensor, tp: int, rank: int) -> torch.Tensor:
    dim = _split_dim(name)
    if dim is None or tp == 1:
        return t
    if name.endswith("linear_fc1.weight"):  # each rank holds [gate_r; up_r]
        return torch.cat([half.chunk(tp)[rank] for half in t.chunk(2)]).contiguous()
    return t.chunk(tp, dim=dim)[rank].contiguous()


def _tp_join(name: str, pieces: list[torch.Tensor]) -> torch.Tensor:
    dim = _split_dim(name)
    if dim is None or len(pieces) == 1:
        return pieces[0]
    if name.endswith("linear_fc1.weight"):
        halves = [p.chunk(2) for p in pieces]
        return torch.cat([h[0] for h in halves] + [h[1] for h in halves])
    return torch.cat(pieces, dim=dim)


def _stage_name(name: str, s: Shape, pp: int, stage: int) -> str | None:
    """The name a whole-model tensor has on pipeline `stage`, None if that stage lacks it."""
    if name.startswith("decoder.layers."):
        per = s.layers // pp
        i, rest = name[len("decoder.layers."):].split(".", 1)
        local = int(i) - stage * per
        return f"decoder.layers.{local}.{rest}" if 0 <= local < per else None
    if name.startswith("embedding."):
        return name if stage == 0 else None
    return name if stage == pp - 1 else None  # final norm, output layer


def shard(full: Tensors, s: Shape, tp: int, pp: int, tp_rank: int, pp_rank: int) -> Tensors:
    """The part of a whole Megatron state dict that rank (pp_rank, tp_rank) holds, under its local names."""
    out = {}
    for name, t in full.items():
        local = _stage_name(name, s, pp, pp_rank)
        if local is not None:
            out[local] = _tp_piece(name, t, tp, tp_rank)
    if s.tied and pp > 1 and pp_rank == pp - 1:  # the last stage keeps its own copy of the tied embedding
        out["output_layer.weight"] = _tp_piece("output_layer.weight", full["embedding.word_embeddings.weight"], tp, tp_rank)
    return out


def merge(pieces: dict[tuple[int, int], Tensors], s: Shape, tp: int, pp: int) -> Tensors:
    """Inverse of `shard`: pieces[(pp_rank, tp_rank)] -> the whole Megatron state dict."""
    out = {}
    per = s.layers // pp
    for stage in range(pp):
        ranks = [pieces[(stage, r)] for r in range(tp)]
        for local, t in ranks[0].items():
            if s.tied and local == "output_layer.weight":
                continue  # the copy of the embedding
            name = local
            if local.startswith("decoder.layers."):
                i, rest = local[len("decoder.layers."):].split(".", 1)
                name = f"decoder.layers.{int(i) + stage * per}.{rest}"
            out[name] = _tp_join(local, [r[local] for r in ranks])
    return out
