"""megatron-core in this process: process groups, the GPTModel of an HF config, its loss-token
forward, distributed gradient clipping and gathering the pieces of a sharded state dict.

megatron-core 0.16.1 assumes CUDA in a few places. On a CPU-only torch (docs/architecture.md, "Machines")
`torch.cuda.current_device()` (where it puts rotary tables and p2p buffers) answers "cpu",
`torch.cuda.synchronize()` does nothing, and inside `on_device()` the tensors it creates with
device="cuda" (its pipeline schedules' token counters) are made on the CPU. Its RNG tracker is
the no-op one: every dropout is 0, so no random numbers are drawn.
"""
from __future__ import annotations

import contextlib
import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.overrides import TorchFunctionMode
from transformers import PretrainedConfig

from learner.mcore.convert import Shape, Tensors, merge, rope_theta, shape_of, transformer_config

CUDA = torch.cuda.is_available()


class _CudaOnCpu(TorchFunctionMode):
    """Tensors megatron creates with device="cuda", and `.cuda()` copies, stay on the CPU."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.cuda:
            return args[0]
        device = kwargs.get("device")
        if device is not None and torch.device(device).type == "cuda":
            kwargs["device"] = "cpu"
        return func(*args, **kwargs)


def on_device() -> contextlib.AbstractContextManager:
    """Wrap megatron calls that create tensors (model build, schedules) in this."""
    return contextlib.nullcontext() if CUDA else _CudaOnCpu()


def init_parallel(tp: int, pp: int, timeout_s: float) -> None:
    """Join (or start) the process group and set megatron's parallel state; idempotent for the same sizes.
    World size 1 without a launcher gets an in-process store; under torchrun every rank joins by env://."""
    from megatron.core import parallel_state, tensor_parallel

    if not CUDA:
        torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment]
        torch.cuda.synchronize = lambda *a, **k: None  # type: ignore[assignment]
    if not dist.is_initialized():
        if CUDA:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        backend = "nccl" if CUDA else "gloo"
        timeout = timedelta(seconds=timeout_s)
        if int(os.environ.get("WORLD_SIZE", "1")) == 1 and "MASTER_ADDR" not in os.environ:
            dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
        else:
            dist.init_process_group(backend, timeout=timeout)
    world = dist.get_world_size()
    if world != tp * pp:
        raise ValueError(f"learner=megatron: world size {world} is not tensor_model_parallel_size {tp} x "
                         f"pipeline_model_parallel_size {pp} (no data parallelism; launch with torchrun --nproc-per-node {tp * pp})")
    if parallel_state.model_parallel_is_initialized():
        have = (parallel_state.get_tensor_model_parallel_world_size(), parallel_state.get_pipeline_model_parallel_world_size())
        if have != (tp, pp):
            raise ValueError(f"learner=megatron: this process already runs tensor/pipeline parallel {have}, not {(tp, pp)}")
        return
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp)
    tensor_parallel.random.initialize_rng_tracker(inference_rng_tracker=True)


def ranks() -> tuple[int, int]:
    """(pipeline stage, tensor-parallel rank) of this process."""
    from megatron.core import parallel_state as ps

    return ps.get_pipeline_model_parallel_rank(), ps.get_tensor_model_parallel_rank()


def build_gpt(cfg: PretrainedConfig, tp: int, pp: int, device: torch.device, recompute: bool = False):
    """This rank's stage of the GPTModel for `cfg` (local spec, no Transformer Engine); weights unset."""
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    s = shape_of(cfg)
    with on_device():
        model = GPTModel(
            config=transformer_config(cfg, tp, pp, cuda=CUDA, recompute=recompute),
            transformer_layer_spec=get_gpt_layer_local_spec(normalization="RMSNorm", qk_layernorm=s.qk_norm),
            vocab_size=s.padded_vocab(tp), max_sequence_length=cfg.max_position_embeddings,
            pre_process=ps.is_pipeline_first_stage(), post_process=ps.is_pipeline_last_stage(),
            share_embeddings_and_output_weights=s.tied, position_embedding_type="rope", rotary_base=rope_theta(cfg),
        )
    return model.to(device)


def loss_logits(model, ids: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, vocab: int) -> torch.Tensor:
    """This stage's forward of a right-padded batch `ids` [b, w]. The last stage returns the
    logits [N, vocab] of the hidden states at (rows, cols) only (gathered over TP ranks); the
    others return the hidden states [w, b, h] for the next stage."""
    w = ids.shape[1]
    # causal attention alone is exact for right padding: real tokens never see the pad after them
    mask = torch.ones(w, w, dtype=torch.bool, device=ids.device).triu(1)[None, None]
    x = model.embedding(input_ids=ids, position_ids=None) if model.pre_process else None
    hidden = model.decoder(hidden_states=x, attention_mask=mask, rotary_pos_emb=model.rotary_pos_emb(w))
    if not model.post_process:
        return hidden.float()  # the p2p buffers are float32
    picked = hidden.transpose(0, 1)[rows, cols].unsqueeze(1)  # [N, 1, h]
    weight = model.shared_embedding_or_output_weight() if model.share_embeddings_and_output_weights else None
    logits, _ = model.output_layer(picked, weight=weight, runtime_gather_output=True)
    return logits.squeeze(1)[:, :vocab]


def sync_grads(model) -> None:
    """Sum the gradient parts megatron leaves apart (its DDP wrapper would): the query/key norms
    each TP rank applies to its own heads, and a tied embedding whose copies live on the first
    and the last pipeline stage."""
    from megatron.core import parallel_state as ps

    if ps.get_tensor_model_parallel_world_size() > 1:
        for name, p in model.named_parameters():
            if p.grad is not None and ("q_layernorm" in name or "k_layernorm" in name):
                dist.all_reduce(p.grad, group=ps.get_tensor_model_parallel_group())
    if model.share_embeddings_and_output_weights and ps.get_pipeline_model_parallel_world_size() > 1 \
            and ps.is_rank_in_embedding_group():
        dist.all_reduce(model.shared_embedding_or_output_weight().grad, group=ps.get_embedding_group())


def clip_grad_norm(params: list[torch.nn.Parameter], max_norm: float | None) -> float:
    """torch.nn.utils.clip_grad_norm_ over the whole (sharded) model: each gradient counted once."""
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel import param_is_not_tensor_parallel_duplicate
    from megatron.core.transformer.module import param_is_not_shared

    grads = [p.grad for p in params if p.grad is not None]
    counted = [p.grad for p in params if p.grad is not None and param_is_not_shared(p) and param_is_not_tensor_parallel_duplicate(p)]
    sq = torch.zeros((), dtype=torch.float32, device=grads[0].device if grads else None)
    for g in counted:
        sq += g.float().pow(2).sum()
    dist.all_reduce(sq, group=ps.get_model_parallel_group())
    norm = sq.sqrt()
    if max_norm is not None:
        coef = (max_norm / (norm + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coef.to(g.dtype))
    return float(norm)


def gather_whole(local: Tensors, s: Shape, tp: int, pp: int) -> Tensors | None:
    """The whole Megatron state dict on global rank 0 from every rank's `local` piece (None elsewhere)."""
    piece = (ranks(), {k: v.detach().cpu() for k, v in local.items()})
    if dist.get_world_size() == 1:
        return merge(dict([piece]), s, tp, pp)
    box = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(piece, box, dst=0)
    return merge(dict(box), s, tp, pp) if box is not None else None

