"""The torch learner (`learner=torch`): a Hugging Face causal LM trained with AdamW on samples.

One `train_step` (PPO) or `sft_step` (NLL of demonstrations) = one optimizer step over the whole
batch, by one path whatever the objective: samples are packed into micro-batches of at most
`max_tokens_per_micro_batch` padded tokens, each micro-batch's loss is backpropagated (gradient
accumulation), then the gradient is clipped and AdamW steps. The loss is normalised by the
batch's sample count, so the accumulated gradient is the gradient of the batch loss whatever the
packing. Fully masked samples count in that denominator but are not computed.

Only the hidden states of loss tokens go through the LM head (multi-turn prompts are long, and
their logits would be thrown away). Parameters are float32, AdamW's moments too unless
`optimizer_state_dtype="bfloat16"` (learner/optim.py: half the optimizer state); `bf16=True`
runs forward and backward under bfloat16 autocast (it helps on GPUs and on CPUs with bf16
units). A frozen reference model is loaded only when kl_coef > 0.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable

import torch

from agent.policy.models import load_model, save_model
from envs.progress import Progress
from learner.batching import Batch, micro_batches, step_metrics, trainable, with_advantage
from learner.checkpoints import checkpoint_commit, checkpoint_info, checkpoint_tmp
from learner.loss import EPS_HIGH, EPS_LOW, behaviour, check_old_logprobs, logprobs_and_entropy, nll_loss, ppo_loss
from learner.optim import AdamW
from learner.samples import Sample

# (loss-token logits, their micro-batch, the whole batch's sample count) -> (loss, stats)
Objective = Callable[[torch.Tensor, Batch, int], tuple[torch.Tensor, dict[str, float]]]


class TorchLearner:
    """A `Learner` (learner/protocol.py) on a Hugging Face causal LM in this process."""

    def __init__(
        self,
        model_name_or_path: str,
        lr: float = 1e-5,
        betas: tuple[float, float] = (0.9, 0.98),
        weight_decay: float = 0.1,
        adam_eps: float = 1e-8,
        optimizer_state_dtype: str = "float32",
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
        device: str | None = None,
    ) -> None:
        torch.manual_seed(seed)
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.model, self.tokenizer = load_model(model_name_or_path, dtype="float32", seed=seed)
        _check_plain_head(self.model)
        self.model.to(self.device).train()
        self.model.config.use_cache = False
        if gradient_checkpointing:
            self.model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        self.ref_model = None
        if kl_coef > 0:
            self.ref_model, _ = load_model(model_name_or_path, dtype="bfloat16" if bf16 else "float32", seed=seed)
            self.ref_model.to(self.device).eval().requires_grad_(False)
        self.optimizer = _adamw(self.model.parameters(), lr, tuple(betas), adam_eps, weight_decay, optimizer_state_dtype)
        self.max_tokens = int(max_tokens_per_micro_batch)
        self.bf16 = bf16
        self.kl_coef = kl_coef
        self.eps_low, self.eps_high = eps_low, eps_high
        self.max_grad_norm = max_grad_norm
        self.old_logprobs, self.tis_cap = check_old_logprobs(old_logprobs), tis_cap
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.step = 0

    # ---- forward -------------------------------------------------------------------------
    def _autocast(self):
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16)

    def _loss_logits(self, model: torch.nn.Module, batch: Batch) -> torch.Tensor:
        hidden = model.base_model(input_ids=batch.ids).last_hidden_state
        return model.get_output_embeddings()(hidden[batch.rows, batch.cols])

    @torch.no_grad()
    def logprobs(self, samples: list[Sample]) -> list[list[float]]:
        """Current-policy log-probs of each sample's loss tokens (in loss-mask order)."""
        out: list[list[float]] = []
        self.model.eval()
        try:
            for s in samples:
                batch = Batch([s], self.device, self.pad_id)
                with self._autocast():
                    logits = self._loss_logits(self.model, batch)
                out.append(logprobs_and_entropy(logits, batch.targets)[0].tolist())
        finally:
            self.model.train()
        return out

    # ---- training ------------------------------------------------------------------------
    def train_step(self, samples: list[Sample], apply: Callable[[Callable[[], None]], None] | None = None) -> dict[str, float]:
        """One PPO optimizer step on `samples`; returns the step's figures. `apply(step)` runs the
        optimizer step where it must (an engine serving these very weights runs it between its
        batches, learner/training.py); here and now by default. Not called when nothing trains."""
        return self._optimize(samples, self._ppo_loss, apply, with_advantage(samples, self.ref_model is not None))

    def sft_step(self, samples: list[Sample]) -> dict[str, float]:
        """One supervised optimizer step (NLL of the loss tokens) on `samples`."""
        return self._optimize(samples, self._sft_loss)

    def _ppo_loss(self, logits: torch.Tensor, batch: Batch, n_samples: int) -> tuple[torch.Tensor, dict[str, float]]:
        ref = None
        if self.ref_model is not None:
            with torch.no_grad(), self._autocast():
                ref = logprobs_and_entropy(self._loss_logits(self.ref_model, batch), batch.targets)[0]
        logp, entropy = logprobs_and_entropy(logits, batch.targets, with_entropy=True)
        old, tis, mismatch = behaviour(logp, batch.rollout_logprobs, self.old_logprobs, self.tis_cap, batch.current)
        loss, stats = ppo_loss(logp, old, batch.adv, torch.ones_like(logp), batch.sample_index, n_samples,
                               self.eps_low, self.eps_high, ref, self.kl_coef, entropy, tis)
        stats.update(mismatch)
        return loss, stats

    def _sft_loss(self, logits: torch.Tensor, batch: Batch, n_samples: int) -> tuple[torch.Tensor, dict[str, float]]:
        logp, entropy = logprobs_and_entropy(logits, batch.targets, with_entropy=True)
        return nll_loss(logp, batch.sample_index, n_samples, entropy)

    def _optimize(self, samples: list[Sample], objective: Objective, apply: Callable[[Callable[[], None]], None] | None = None,
                  training: list[Sample] | None = None) -> dict[str, float]:
        """One optimizer step: micro-batches' `objective` losses accumulated, clipped, AdamW; the
        loss is a mean over all `samples`, of which only `training` (default: the trainable ones)
        are forwarded."""
        t0 = time.perf_counter()
        training = trainable(samples) if training is None else training
        if not training:
            return {"skipped": 1.0, "samples": float(len(samples))}
        self.optimizer.zero_grad(set_to_none=True)
        total_loss, all_stats, tokens = 0.0, [], 0
        groups = micro_batches(training, self.max_tokens)
        with Progress(f"train step {self.step + 1} micro-batches", total=len(groups)) as bar:
            for group in groups:
                batch = Batch(group, self.device, self.pad_id)
                with self._autocast():
                    logits = self._loss_logits(self.model, batch)
                loss, stats = objective(logits, batch, len(samples))
                loss.backward()
                total_loss += float(loss.detach())
                all_stats.append(stats)
                tokens += batch.n_tokens
                bar.advance(status=f"{tokens} tokens")
        grad_norm = torch.nn.utils.clip_grad_norm_(
            self.model.parameters(), self.max_grad_norm if self.max_grad_norm is not None else float("inf")
        )
        if apply is None:
            self.optimizer.step()
        else:
            apply(self.optimizer.step)
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        return step_metrics(all_stats, total_loss, float(grad_norm), tokens, len(samples), t0)

    # ---- weights and checkpoints ---------------------------------------------------------
    def live_weights(self) -> dict[str, torch.Tensor]:
        """The weights being trained, by name: the tensors themselves, for an engine in this
        process to copy (learner/training.py); they change with the next train_step."""
        return self.model.state_dict()

    def save_weights(self, path: str | os.PathLike) -> Path:
        """An HF folder (safetensors + tokenizer) the engine loads via /update_weights_from_disk."""
        save_model(self.model, self.tokenizer, path)
        return Path(path)

    def save_checkpoint(self, directory: str | os.PathLike, step: int, policy_version: int) -> Path:
        """Weights, optimizer state, RNG state and counters, written atomically to `directory`."""
        tmp = checkpoint_tmp(directory)
        self.save_weights(tmp / "model")
        torch.save({"optimizer": self.optimizer.state_dict(), "rng": torch.get_rng_state()}, tmp / "optimizer.pt")
        return checkpoint_commit(tmp, directory, step, policy_version, self.step)

    def load_checkpoint(self, directory: str | os.PathLike) -> dict[str, Any]:
        """Restore what save_checkpoint wrote; returns {"step", "policy_version"}."""
        d = Path(directory)
        info = checkpoint_info(d)
        saved, _ = load_model(str(d / "model"), dtype="float32")
        self.model.load_state_dict(saved.state_dict())
        del saved
        state = torch.load(d / "optimizer.pt", map_location=self.device, weights_only=False)
        self.optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"].cpu())  # map_location moved it to the learner's device with the moments
        self.step = int(info["learner_step"])
        return {"step": int(info["step"]), "policy_version": int(info["policy_version"])}

    def close(self) -> None:
        """Nothing to release: one process, and its memory goes with the object."""


STATE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def _adamw(params: Any, lr: float, betas: tuple[float, float], eps: float, weight_decay: float,
           state_dtype: str) -> torch.optim.Optimizer:
    """AdamW with its moments in `state_dtype`: torch's fused kernel for float32 (one kernel per
    tensor, in place; the default foreach step holds temporaries of about half the model's size:
    SmolLM2-135M +0.23 GB at the step, none fused), learner/optim.py's for bfloat16 (half the
    optimizer state)."""
    if state_dtype not in STATE_DTYPES:
        raise ValueError(f"optimizer_state_dtype must be one of {', '.join(STATE_DTYPES)}, got {state_dtype!r}")
    if state_dtype == "float32":
        return torch.optim.AdamW(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, fused=True)
    return AdamW(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, state_dtype=STATE_DTYPES[state_dtype])


def _check_plain_head(model: torch.nn.Module) -> None:
    """The loss-token shortcut applies the output embedding to hidden states directly; models
    whose head also scales or soft-caps logits would get wrong log-probs."""
    cfg = model.config
    if getattr(cfg, "final_logit_softcapping", None) or getattr(cfg, "logit_scale", None) not in (None, 1, 1.0):
        raise ValueError(f"{type(model).__name__} scales or soft-caps its logits; the torch learner does not support it")
