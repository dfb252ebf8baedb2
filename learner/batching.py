"""What both learners (learner/torch_learner.py, learner/megatron_learner.py) do with samples
around their forward passes: which samples train, how they are packed into padded
micro-batches, and how a step's figures are summed up from its micro-batches."""
from __future__ import annotations

import time

import torch

from learner.samples import Sample


def trainable(samples: list[Sample]) -> list[Sample]:
    """The samples with loss tokens; a one-line error for a sample without a prompt token."""
    for s in samples:
        if not s.prompt_ids:
            raise ValueError("a sample needs at least one prompt token (the first response token is predicted from it)")
    return [s for s in samples if s.trains]


def micro_batches(samples: list[Sample], max_tokens: int) -> list[list[Sample]]:
    """Pack samples (longest first) so that each batch's padded size (count x longest) stays
    within `max_tokens`; a sample longer than the budget gets a batch of its own."""
    out: list[list[Sample]] = []
    cur: list[Sample] = []
    for s in sorted(samples, key=lambda s: s.n_tokens, reverse=True):
        if cur and (len(cur) + 1) * cur[0].n_tokens > max_tokens:
            out.append(cur)
            cur = []
        cur.append(s)
    if cur:
        out.append(cur)
    return out


class Batch:
    """A padded micro-batch plus the flat positions of its loss tokens."""

    def __init__(self, samples: list[Sample], device: torch.device, pad_id: int) -> None:
        lengths = [s.n_tokens for s in samples]
        width = max(lengths)
        ids = torch.full((len(samples), width), pad_id, dtype=torch.long)
        rows, cols, rollout, adv = [], [], [], []
        for b, s in enumerate(samples):
            ids[b, : lengths[b]] = torch.tensor(s.prompt_ids + s.response_ids)
            keep = torch.tensor(s.loss_mask, dtype=torch.bool)
            j = keep.nonzero().squeeze(-1)
            rows.append(torch.full_like(j, b))
            cols.append(j + len(s.prompt_ids) - 1)  # the hidden state that predicts response token j
            rollout.append(torch.tensor(s.rollout_logprobs, dtype=torch.float32)[keep])
            adv.append(torch.tensor(s.advantages, dtype=torch.float32)[keep])
        self.ids = ids.to(device)
        # no padding -> no mask, so attention keeps its causal fast path
        self.attn = None
        if min(lengths) < width:
            self.attn = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).long().to(device)
        self.rows, self.cols = torch.cat(rows).to(device), torch.cat(cols).to(device)
        self.targets = self.ids[self.rows, self.cols + 1]
        self.rollout_logprobs, self.adv = torch.cat(rollout).to(device), torch.cat(adv).to(device)
        self.n_tokens = sum(lengths)


def step_metrics(stats: list[dict[str, float]], loss: float, grad_norm: float, tokens: int, n_samples: int,
                 t0: float) -> dict[str, float]:
    """A train step's figures from its micro-batches' loss stats: means weighted by loss tokens,
    the largest of `*_max` figures."""
    elapsed = time.perf_counter() - t0
    loss_tokens = sum(st["tokens"] for st in stats)
    metrics = {k: (max(st[k] for st in stats) if k.endswith("_max") else
                   sum(st[k] * st["tokens"] for st in stats) / max(loss_tokens, 1.0))
               for k in stats[0] if k != "tokens"}
    metrics.update(
        loss=loss,
        grad_norm=grad_norm,
        tokens=float(tokens),
        loss_tokens=loss_tokens,
        samples=float(n_samples),
        micro_batches=float(len(stats)),
        time_s=elapsed,
        tokens_per_s=tokens / elapsed if elapsed > 0 else 0.0,
    )
    return metrics

