"""The losses: PPO clip with asymmetric bounds, optional k3 KL to a reference (RL), and the
next-token NLL of demonstrations (SFT). Both are token-mean per sample then mean over samples
(every sample weighs the same whatever its length).

Sampler/learner mismatch: the engine that sampled a token (another precision, other kernels, a
policy version behind) gives it a log-prob the learner does not quite reproduce. `behaviour`
measures the gap on every trained token and chooses PPO's old log-probs: `rollout` (the
sampler's) or `recompute` (the learner's own before the update: the learner takes one optimizer
step per batch, so the forward pass of that step, before any weight moves, is the recompute and
costs nothing extra). Truncated importance sampling (TIS) weights each token's policy-gradient
term by min(exp(learner_old - rollout), cap), the standard correction for the mismatch.

Names, from rollout to loss: `rollout_logprobs` are the sampler's (Turn, Sample, Batch),
`learner_logprobs` the learner's forward pass of the step, `old_logprobs` PPO's baseline: one of
the two, as `learner.old_logprobs` says.

Tensors are flat over the response tokens of a micro-batch (no padding): `sample_index[i]` says
which sample token i belongs to. `n_samples` is the number of samples in the whole batch
(fully masked ones included, as in the paper), so the micro-batch losses add up to the batch
loss and their gradients can be accumulated.
"""
from __future__ import annotations

import torch

EPS_LOW = 0.2
EPS_HIGH = 0.28
_MAX_LOG_RATIO = 20.0  # exp() of more than this overflows nothing useful; clamp for safety


def logprobs_and_entropy(logits: torch.Tensor, targets: torch.Tensor, with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(target) per row of `logits` [N, V] (in float32), and the entropy per row if asked."""
    logits = logits.float()
    lse = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - lse
    entropy = None
    if with_entropy:
        with torch.no_grad():
            probs = torch.softmax(logits, dim=-1)
            entropy = lse - (probs * logits).sum(-1)
    return logp, entropy


OLD_LOGPROBS = ("rollout", "recompute")


def check_old_logprobs(value: str) -> str:
    if value not in OLD_LOGPROBS:
        raise ValueError(f"old_logprobs must be one of {', '.join(OLD_LOGPROBS)}, got {value!r}")
    return value


def behaviour(learner_logprobs: torch.Tensor, rollout_logprobs: torch.Tensor, old_logprobs: str = "rollout",
              tis_cap: float | None = None, current: torch.Tensor | None = None,
              ) -> tuple[torch.Tensor, torch.Tensor | None, dict[str, float]]:
    """(PPO's old log-probs, TIS weights or None, mismatch stats) for one micro-batch's loss tokens.
    `learner_logprobs` are the learner's before the update (the step's forward pass); stats: mean and max
    |learner - rollout| and a k3 estimate of KL(sampler || learner) (tokens were drawn by the sampler).
    `current` marks the tokens sampled by the weights the learner holds: their mismatch is the
    precision gap alone (older tokens add the policy's drift); stats `*_current` and `current_tokens`."""
    check_old_logprobs(old_logprobs)
    learner_old = learner_logprobs.detach()
    with torch.no_grad():
        gap = (learner_old - rollout_logprobs).abs()
        kl = k3(rollout_logprobs, learner_old)
        stats = {"mismatch_abs_mean": float(gap.mean()) if gap.numel() else 0.0,
                 "mismatch_abs_max": float(gap.max()) if gap.numel() else 0.0,
                 "mismatch_kl": float(kl.mean()) if gap.numel() else 0.0}
        if current is not None:
            n = int(current.sum())
            stats.update(current_tokens=float(n),
                         mismatch_abs_mean_current=float(gap[current].mean()) if n else 0.0,
                         mismatch_kl_current=float(kl[current].mean()) if n else 0.0)
        weights = None
        if tis_cap is not None:
            weights = torch.exp((learner_old - rollout_logprobs).clamp(max=_MAX_LOG_RATIO)).clamp(max=tis_cap)
            stats["tis_mean"] = float(weights.mean()) if gap.numel() else 1.0
            stats["tis_capped_frac"] = float((weights >= tis_cap).float().mean()) if gap.numel() else 0.0
    return (learner_old if old_logprobs == "recompute" else rollout_logprobs), weights, stats


def k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(pi || ref): e^(ref - logp) - 1 - (ref - logp) (>= 0)."""
    d = (ref_logp - logp).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    return torch.exp(d) - 1 - d


def sample_mean(per_token: torch.Tensor, mask: torch.Tensor, sample_index: torch.Tensor, n_samples: int) -> torch.Tensor:
    """Token mean of `per_token` within each sample, summed over this call's samples and divided
    by the whole batch's sample count (so the micro-batch losses add up to the batch loss)."""
    n_local = int(sample_index.max()) + 1 if sample_index.numel() else 0
    sums = torch.zeros(n_local, dtype=per_token.dtype, device=per_token.device).index_add(0, sample_index, per_token * mask)
    counts = torch.zeros(n_local, dtype=per_token.dtype, device=per_token.device).index_add(0, sample_index, mask)
    return (sums / counts.clamp(min=1)).sum() / max(n_samples, 1)


def nll_loss(logprobs: torch.Tensor, sample_index: torch.Tensor, n_samples: int,
             entropy: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """(loss, stats) of supervised fine-tuning: -log p per loss token, reduced as ppo_loss.
    Stats are means over this call's tokens (plus `tokens`, their count)."""
    ones = torch.ones_like(logprobs)
    loss = sample_mean(-logprobs, ones, sample_index, n_samples)
    with torch.no_grad():
        tokens = float(logprobs.numel())
        stats = {"nll": float(-logprobs.sum()) / max(tokens, 1.0), "tokens": tokens}
        if entropy is not None:
            stats["entropy"] = float(entropy.sum()) / max(tokens, 1.0)
    return loss, stats


def ppo_loss(
    learner_logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    sample_index: torch.Tensor,
    n_samples: int,
    eps_low: float = EPS_LOW,
    eps_high: float = EPS_HIGH,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    entropy: torch.Tensor | None = None,
    tis_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """(loss, stats). Per token: w max(-r A, -clip(r, 1 - eps_low, 1 + eps_high) A) + kl_coef k3,
    w the TIS weight (1 without). Stats are means over the masked tokens of this call (plus
    `tokens`, their count)."""
    mask = mask.to(learner_logprobs.dtype)
    log_ratio = (learner_logprobs - old_logprobs).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    ratio = torch.exp(log_ratio)
    unclipped = -ratio * advantages
    clipped = -ratio.clamp(1 - eps_low, 1 + eps_high) * advantages
    per_token = torch.maximum(unclipped, clipped)
    if tis_weights is not None:
        per_token = per_token * tis_weights
    kl = None
    if ref_logprobs is not None:
        kl = k3(learner_logprobs, ref_logprobs)
        if kl_coef:
            per_token = per_token + kl_coef * kl
    loss = sample_mean(per_token, mask, sample_index, n_samples)

    with torch.no_grad():
        tokens = float(mask.sum())
        denom = max(tokens, 1.0)

        def mean(x: torch.Tensor) -> float:
            return float((x * mask).sum() / denom)

        is_clipped = ((advantages > 0) & (ratio > 1 + eps_high)) | ((advantages < 0) & (ratio < 1 - eps_low))
        stats = {
            "pg_loss": mean(torch.maximum(unclipped, clipped)),
            "clip_frac": mean(is_clipped.to(mask.dtype)),
            "approx_kl": mean(k3(learner_logprobs, old_logprobs)),  # KL(pi || pi_old), k3 estimate
            "ratio_mean": mean(ratio),
            "tokens": tokens,
        }
        if kl is not None:
            stats["ref_kl"] = mean(kl)
        if entropy is not None:
            stats["entropy"] = mean(entropy)
    return loss, stats
