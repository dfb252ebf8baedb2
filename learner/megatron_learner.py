"""The megatron-core learner (`learner=megatron`): the torch learner's loss and interface on a
megatron-core GPTModel, with tensor and pipeline parallel sizes from config.

The model is built from the HF config of a Llama, Qwen2 or Qwen3 model and loaded from its HF
weights (learner/mcore/convert.py); micro-batches go through megatron's forward_backward_func
(1F1B over pipeline stages) and the loss is learner/loss.py's, on the logits of the loss
tokens only, exactly as in the torch learner. The optimizer is torch AdamW over this rank's
parameters (megatron's own optimizer factory assumes CUDA): AdamW is elementwise, so stepping
each shard equals stepping the whole model, provided every rank sees the global gradient norm
for clipping (learner/mcore/model.py).

Processes: the world is tensor x pipeline parallel ranks (no data parallelism). World size 1
lives in-process. Larger worlds are launched with torchrun; global rank 0 runs the experiment
and every learner call it makes is broadcast to the other ranks, which run `follow()` until
rank 0 calls `close()`:

    torchrun --nproc-per-node 2 -m experiments.run learner=megatron learner.tensor_model_parallel_size=2 ...

Weights and checkpoints are written in HF layout by rank 0: save_weights is a folder the engine
and `load_model` read; a checkpoint is that folder plus the Adam moments in HF parameter order
(optimizer.pt), so the torch learner resumes a megatron checkpoint and the other way round, and
a run can resume with other parallel sizes.
"""
from __future__ import annotations

import functools
import os
import threading
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from transformers import AutoModelForCausalLM, PretrainedConfig

from agent.policy.models import learner_bf16, load_model, save_model
from envs.progress import Progress
from learner.batching import Batch, micro_batches, step_metrics, trainable, with_advantage
from learner.checkpoints import checkpoint_commit, checkpoint_info, checkpoint_tmp
from learner.loss import EPS_HIGH, EPS_LOW, behaviour, check_old_logprobs, logprobs_and_entropy, ppo_loss
from learner.mcore import convert
from learner.mcore.model import (build_gpt, clip_grad_norm, gather_whole, init_parallel, loss_logits, on_device, ranks,
                                 sync_grads)
from learner.samples import Sample

_MOMENTS = ("exp_avg", "exp_avg_sq")


def _collective(method):
    """Every rank runs this call: on rank 0 it is first broadcast to the ranks in `follow()`."""

    @functools.wraps(method)
    def call(self: MegatronLearner, *args: Any, **kwargs: Any) -> Any:
        with self._lock:  # the run calls from worker threads; the ranks must see one call at a time
            if self.world > 1 and dist.get_rank() == 0:
                dist.broadcast_object_list([(method.__name__, args, kwargs)], src=0)
            return method(self, *args, **kwargs)

    return call


class MegatronLearner:
    """A `Learner` (learner/protocol.py) on a megatron-core GPTModel over tensor x pipeline ranks."""

    def __init__(
        self,
        model_name_or_path: str,
        lr: float = 1e-5,
        betas: tuple[float, float] = (0.9, 0.98),
        weight_decay: float = 0.1,
        adam_eps: float = 1e-8,
        max_tokens_per_micro_batch: int = 8192,
        bf16: bool = False,
        gradient_checkpointing: bool = False,
        kl_coef: float = 0.0,
        eps_low: float = EPS_LOW,
        eps_high: float = EPS_HIGH,
        max_grad_norm: float | None = 1.0,
        old_logprobs: str = "rollout",
        tis_cap: float | None = None,
        seed: int = 0,
        tensor_model_parallel_size: int = 1,
        pipeline_model_parallel_size: int = 1,
        dist_timeout_s: float = 7200.0,
    ) -> None:
        torch.manual_seed(seed)
        self._lock = threading.RLock()
        hf, self.tokenizer = load_model(model_name_or_path, dtype="float32", seed=seed)
        self.hf_config: PretrainedConfig = hf.config
        self.generation_config = hf.generation_config
        self.shape = convert.shape_of(hf.config)
        self.tp, self.pp = int(tensor_model_parallel_size), int(pipeline_model_parallel_size)
        convert.check_parallel(self.shape, self.tp, self.pp)
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        if gradient_checkpointing and self.device.type != "cuda":
            raise ValueError("learner=megatron: gradient_checkpointing needs CUDA (megatron's recompute saves the CUDA RNG state)")
        init_parallel(self.tp, self.pp, dist_timeout_s)
        self.world = dist.get_world_size()
        whole = convert.to_megatron(hf.state_dict(), self.shape, self.tp)
        del hf
        self.model = build_gpt(self.hf_config, self.tp, self.pp, self.device, recompute=gradient_checkpointing)
        self._load(self.model, whole)
        self.ref_model = None
        if kl_coef > 0:
            self.ref_model = build_gpt(self.hf_config, self.tp, self.pp, self.device)
            self._load(self.ref_model, whole)
            self.ref_model.eval().requires_grad_(False)
        del whole
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=lr, betas=tuple(betas), eps=adam_eps,
                                           weight_decay=weight_decay)
        self.max_tokens = int(max_tokens_per_micro_batch)
        self.bf16 = bf16
        self.kl_coef = kl_coef
        self.eps_low, self.eps_high = eps_low, eps_high
        self.max_grad_norm = max_grad_norm
        self.old_logprobs, self.tis_cap = check_old_logprobs(old_logprobs), tis_cap
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.step = 0

    @classmethod
    def from_config(cls, cfg: Any) -> MegatronLearner:
        """From the run config (experiments/conf/learner/megatron.yaml)."""
        lc = cfg.learner
        return cls(str(cfg.model.path), lr=float(lc.lr), betas=tuple(lc.betas), weight_decay=float(lc.weight_decay),
                   adam_eps=float(lc.adam_eps),
                   max_tokens_per_micro_batch=int(lc.max_tokens_per_micro_batch), bf16=learner_bf16(lc.bf16, str(cfg.model.dtype)),
                   gradient_checkpointing=bool(lc.gradient_checkpointing), kl_coef=float(lc.kl_coef),
                   old_logprobs=str(lc.old_logprobs), tis_cap=None if lc.tis_cap is None else float(lc.tis_cap),
                   seed=int(cfg.seed), tensor_model_parallel_size=int(lc.tensor_model_parallel_size),
                   pipeline_model_parallel_size=int(lc.pipeline_model_parallel_size),
                   dist_timeout_s=float(lc.dist_timeout_s))

    # ---- processes ---------------------------------------------------------------------------
    def follow(self) -> None:
        """Ranks other than 0: run the calls rank 0 broadcasts until it calls close()."""
        while True:
            box: list[Any] = [None]
            dist.broadcast_object_list(box, src=0)
            name, args, kwargs = box[0]
            if name == "close":
                return
            getattr(MegatronLearner, name).__wrapped__(self, *args, **kwargs)

    def close(self) -> None:
        """On rank 0: release the ranks in follow() (a no-op at world size 1)."""
        with self._lock:
            if self.world > 1 and dist.get_rank() == 0:
                dist.broadcast_object_list([("close", (), {})], src=0)

    def _from_last_stage(self, value: Any) -> Any:
        """`value` as computed on the last pipeline stage, on every rank."""
        from megatron.core import parallel_state as ps

        if self.pp == 1:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=ps.get_pipeline_model_parallel_last_rank(), group=ps.get_pipeline_model_parallel_group())
        return box[0]

    # ---- weights -----------------------------------------------------------------------------
    def _load(self, model: torch.nn.Module, whole: convert.Tensors) -> None:
        """Copy this rank's piece of a whole Megatron state dict into `model`'s parameters."""
        local = self._shard(whole)
        params = dict(model.named_parameters())
        if set(params) != set(local):
            raise RuntimeError(f"megatron parameters and converted weights differ: {sorted(set(params) ^ set(local))}")
        with torch.no_grad():
            for name, p in params.items():
                p.copy_(local[name])

    def _shard(self, whole: convert.Tensors) -> convert.Tensors:
        pp_rank, tp_rank = ranks()
        return convert.shard(whole, self.shape, self.tp, self.pp, tp_rank, pp_rank)

    def _gather_hf(self, local: convert.Tensors) -> convert.Tensors | None:
        """Whole HF-layout tensors on rank 0 from every rank's piece (named like this rank's parameters)."""
        whole = gather_whole(local, self.shape, self.tp, self.pp)
        return None if whole is None else convert.to_hf(whole, self.shape)

    def hf_state_dict(self, grads: bool = False) -> convert.Tensors | None:
        """The whole model's weights (or gradients) in HF layout, on rank 0 (None on other ranks).
        Collective outside `follow()`: every rank calls it."""
        params = self.model.named_parameters()
        return self._gather_hf({n: (p.grad if grads else p) for n, p in params})

    def _write_hf(self, state: convert.Tensors, path: str | os.PathLike) -> None:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(self.hf_config)
        model.load_state_dict(state, assign=True)
        model.tie_weights()
        model.generation_config = self.generation_config
        save_model(model, self.tokenizer, path)

    @_collective
    def save_weights(self, path: str | os.PathLike) -> Path:
        """An HF folder (safetensors + tokenizer) the engine loads via /update_weights_from_disk (written by rank 0)."""
        state = self.hf_state_dict()
        if state is not None:
            self._write_hf(state, path)
        self._barrier()
        return Path(path)

    def _barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    # ---- forward -----------------------------------------------------------------------------
    def _run(self, model: torch.nn.Module, batches: list[Batch], n_samples: int, forward_only: bool,
             refs: list[torch.Tensor] | None = None) -> list[dict[str, Any]]:
        """All micro-batches through megatron's schedule; per micro-batch results on the last stage ([] elsewhere)."""
        from megatron.core.pipeline_parallel import get_forward_backward_func

        vocab = self.shape.vocab

        def loss_func(i: int, batch: Batch, logits: torch.Tensor):
            logp, entropy = logprobs_and_entropy(logits, batch.targets, with_entropy=not forward_only)
            if forward_only:
                return logp.sum().detach(), torch.tensor(0), {"logp": logp.detach()}
            old, tis, mismatch = behaviour(logp, batch.rollout_logprobs, self.old_logprobs, self.tis_cap, batch.current)
            loss, stats = ppo_loss(logp, old, batch.adv, torch.ones_like(logp), batch.sample_index, n_samples,
                                   self.eps_low, self.eps_high, None if refs is None else refs[i], self.kl_coef, entropy, tis)
            stats.update(mismatch)
            return loss, torch.tensor(0), {"loss": float(loss.detach()), "stats": stats}

        def forward_step(data, model):
            i, batch = next(data)
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
                out = loss_logits(model, batch.ids, batch.rows, batch.cols, vocab)
            bar.advance()
            return out, functools.partial(loss_func, i, batch)

        # one bar for the job: rank 0's (every rank shares the terminal under torchrun)
        shown = not forward_only and dist.get_rank() == 0
        with on_device(), Progress(f"train step {self.step + 1} micro-batches", total=len(batches), enabled=shown) as bar:
            return get_forward_backward_func()(
                forward_step_func=forward_step, data_iterator=iter(enumerate(batches)), model=[model],
                num_microbatches=len(batches), seq_length=batches[0].ids.shape[1],
                micro_batch_size=batches[0].ids.shape[0], forward_only=forward_only)

    def _logprobs(self, model: torch.nn.Module, batches: list[Batch]) -> list[torch.Tensor]:
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                return [r["logp"] for r in self._run(model, batches, 1, forward_only=True)]
        finally:
            model.train(was_training)

    @_collective
    def logprobs(self, samples: list[Sample]) -> list[list[float]]:
        """Current-policy log-probs of each sample's loss tokens (in loss-mask order)."""
        batches = [Batch([s], self.device, self.pad_id) for s in samples]
        return self._from_last_stage([lp.tolist() for lp in self._logprobs(self.model, batches)])

    # ---- training ----------------------------------------------------------------------------
    @_collective
    def train_step(self, samples: list[Sample]) -> dict[str, float]:
        """One optimizer step on `samples`; returns the step's figures (on every rank)."""
        t0 = time.perf_counter()
        if not trainable(samples):
            return {"skipped": 1.0, "samples": float(len(samples))}
        training = with_advantage(samples, self.ref_model is not None)
        batches = [Batch(g, self.device, self.pad_id) for g in micro_batches(training, self.max_tokens)]
        refs = self._logprobs(self.ref_model, batches) if self.ref_model is not None else None
        self.optimizer.zero_grad(set_to_none=True)
        results = self._run(self.model, batches, len(samples), forward_only=False, refs=refs)
        sync_grads(self.model)
        params = list(self.model.parameters())
        grad_norm = clip_grad_norm(params, self.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        figures = self._from_last_stage([(r["loss"], r["stats"]) for r in results])
        tokens = sum(b.n_tokens for b in batches)
        return step_metrics([st for _, st in figures], sum(loss for loss, _ in figures), grad_norm, tokens, len(samples), t0)

    # ---- checkpoints ---------------------------------------------------------------------------
    def _hf_param_names(self) -> list[str]:
        """The HF model's parameters in order: the torch learner's optimizer indexes them so."""
        with torch.device("meta"):
            return [n for n, _ in AutoModelForCausalLM.from_config(self.hf_config).named_parameters()]

    def _hf_optimizer_state(self) -> dict[str, Any] | None:
        """This AdamW's state as the torch learner's optimizer would hold it for the HF model (on rank 0)."""
        named = list(self.model.named_parameters())
        group = {k: v for k, v in self.optimizer.param_groups[0].items() if k != "params"}
        stepped = [self.optimizer.state[p] for _, p in named if p in self.optimizer.state]
        moments = {key: self._gather_hf({n: self.optimizer.state[p][key] for n, p in named}) if stepped else {} for key in _MOMENTS}
        if dist.get_rank() != 0:
            return None
        names = self._hf_param_names()
        state = {i: {"step": stepped[0]["step"].clone(), **{k: moments[k][n] for k in _MOMENTS}}
                 for i, n in enumerate(names)} if stepped else {}
        return {"state": state, "param_groups": [{**group, "params": list(range(len(names)))}]}

    def _load_hf_optimizer_state(self, saved: dict[str, Any]) -> None:
        named = list(self.model.named_parameters())
        state = {}
        if saved["state"]:
            names = self._hf_param_names()
            local = {key: self._shard(convert.to_megatron({names[i]: st[key] for i, st in saved["state"].items()}, self.shape, self.tp))
                     for key in _MOMENTS}
            step = saved["state"][0]["step"]
            state = {j: {"step": step.clone(), **{k: local[k][n] for k in _MOMENTS}} for j, (n, _) in enumerate(named)}
        group = {k: v for k, v in saved["param_groups"][0].items() if k != "params"}
        self.optimizer.load_state_dict({"state": state, "param_groups": [{**group, "params": list(range(len(named)))}]})

    @_collective
    def save_checkpoint(self, directory: str | os.PathLike, step: int, policy_version: int) -> Path:
        """Weights (HF folder), Adam state in HF parameter order, RNG state and counters, written
        atomically to `directory` by rank 0."""
        weights = self.hf_state_dict()
        opt = self._hf_optimizer_state()
        if dist.get_rank() == 0:
            tmp = checkpoint_tmp(directory)
            self._write_hf(weights, tmp / "model")
            torch.save({"optimizer": opt, "rng": torch.get_rng_state()}, tmp / "optimizer.pt")
            checkpoint_commit(tmp, directory, step, policy_version, self.step)
        self._barrier()
        return Path(directory)

    @_collective
    def load_checkpoint(self, directory: str | os.PathLike) -> dict[str, Any]:
        """Restore what save_checkpoint (of either learner) wrote; returns {"step", "policy_version"}."""
        d = Path(directory)
        info = checkpoint_info(d)
        saved, _ = load_model(str(d / "model"), dtype="float32")
        self._load(self.model, convert.to_megatron(saved.state_dict(), self.shape, self.tp))
        del saved
        state = torch.load(d / "optimizer.pt", map_location="cpu", weights_only=False)
        self._load_hf_optimizer_state(state["optimizer"])
        torch.set_rng_state(state["rng"])
        self.step = int(info["learner_step"])
        return {"step": int(info["step"]), "policy_version": int(info["policy_version"])}
