"""What both learners (learner/torch_learner.py, learner/megatron_learner.py) do with samples
around their forward passes: which samples train, how they are packed into padded
micro-batches (the turns of an episode share one row: a multi-turn episode's context is
forwarded once, not once per turn), and how a step's figures are summed up from its
micro-batches."""
from __future__ import annotations

import time
from typing import Any

import torch

from learner.samples import Sample


def trainable(samples: list[Sample]) -> list[Sample]:
    """The samples with loss tokens; a one-line error for a sample without a prompt token."""
    for s in samples:
        if not s.prompt_ids:
            raise ValueError("a sample needs at least one prompt token (the first response token is predicted from it)")
    return [s for s in samples if s.trains]


def with_advantage(samples: list[Sample], reference_term: bool) -> list[Sample]:
    """The trainable samples a policy-gradient step must forward: a sample whose loss tokens all
    have advantage 0 (a flat group's) has a loss and a gradient of exactly 0, unless a KL term to
    a reference model (`reference_term`) moves it; it still counts in the mean over samples, so
    leaving it out changes no update, only the time (most groups are flat on hard tasks). When no
    sample has an advantage, all of them: the optimizer still steps, on zero gradients, as before."""
    training = trainable(samples)
    if reference_term:
        return training
    moving = [s for s in training if any(a and m for a, m in zip(s.advantages, s.loss_mask))]
    return moving or training


def chains(samples: list[Sample]) -> list[list[Sample]]:
    """Samples grouped so that one forward pass serves a group: within one episode a turn's tokens
    (prompt + response) begin with the previous turn's, so the longest sample holds the others
    and, attention being causal, gives each the logits a forward of its own would. A group is
    ordered shortest first, the groups by their first sample in `samples` (so samples that share
    nothing keep their order); a sample without an episode id stands alone."""
    out: list[list[Sample]] = []
    by_episode: dict[Any, list[list[Sample]]] = {}
    for s in sorted(samples, key=lambda s: s.n_tokens):
        key = s.meta.get("episode_id")
        ids = s.prompt_ids + s.response_ids
        chain = next((c for c in by_episode.get(key, ()) if _extends(ids, c[-1])), None)
        if chain is None:
            chain = []
            out.append(chain)
            if key is not None:
                by_episode.setdefault(key, []).append(chain)
        chain.append(s)
    first = {id(s): i for i, s in enumerate(samples)}
    return sorted(out, key=lambda c: min(first[id(s)] for s in c))


def _extends(ids: list[int], shorter: Sample) -> bool:
    n = len(shorter.prompt_ids)
    return ids[:n] == shorter.prompt_ids and ids[n:shorter.n_tokens] == shorter.response_ids


def micro_batches(samples: list[Sample], max_tokens: int) -> list[list[Sample]]:
    """Pack the samples' chains (longest first) so that each batch's padded size (rows x longest
    row, a chain taking one row) stays within `max_tokens`; a chain longer than the budget gets a
    batch of its own."""
    out: list[list[list[Sample]]] = []
    for chain in sorted(chains(samples), key=lambda c: c[-1].n_tokens, reverse=True):
        if not out or (len(out[-1]) + 1) * out[-1][0][-1].n_tokens > max_tokens:
            out.append([])
        out[-1].append(chain)
    return [[s for chain in batch for s in chain] for batch in out]


class Batch:
    """A padded micro-batch, one row per chain of samples, plus the flat positions of the samples'
    loss tokens (in the order of `samples`) and the index of the sample each belongs to."""

    def __init__(self, samples: list[Sample], device: torch.device, pad_id: int) -> None:
        groups = chains(samples)
        lengths = [c[-1].n_tokens for c in groups]
        width = max(lengths)
        ids = torch.full((len(groups), width), pad_id, dtype=torch.long)
        row_of = {}
        for r, chain in enumerate(groups):
            ids[r, : lengths[r]] = torch.tensor(chain[-1].prompt_ids + chain[-1].response_ids)
            row_of.update((id(s), r) for s in chain)
        rows, cols, index, current, rollout, adv = [], [], [], [], [], []
        for i, s in enumerate(samples):
            keep = torch.tensor(s.loss_mask, dtype=torch.bool)
            j = keep.nonzero().squeeze(-1)
            rows.append(torch.full_like(j, row_of[id(s)]))
            cols.append(j + len(s.prompt_ids) - 1)  # the hidden state that predicts response token j
            index.append(torch.full_like(j, i))
            current.append(torch.full(j.shape, s.meta.get("versions_behind", 0) == 0))
            rollout.append(torch.tensor(s.rollout_logprobs, dtype=torch.float32)[keep])
            adv.append(torch.tensor(s.advantages, dtype=torch.float32)[keep])
        # Rows are padded on the right and attention is causal, so no real token sees a pad: no
        # mask is needed, and without one attention keeps its fused causal kernel (a padding mask
        # sends it to the math path, which keeps rows x heads x width^2 scores per layer).
        self.ids = ids.to(device)
        self.rows, self.cols = torch.cat(rows).to(device), torch.cat(cols).to(device)
        self.sample_index = torch.cat(index).to(device)
        self.current = torch.cat(current).to(device)  # sampled by the weights being trained (meta versions_behind 0)
        self.targets = self.ids[self.rows, self.cols + 1]
        self.rollout_logprobs, self.adv = torch.cat(rollout).to(device), torch.cat(adv).to(device)
        self.n_tokens = sum(lengths)  # tokens forwarded: a chain's shorter samples cost nothing more


def step_metrics(stats: list[dict[str, float]], loss: float, grad_norm: float, tokens: int, n_samples: int,
                 t0: float) -> dict[str, float]:
    """A train step's figures from its micro-batches' loss stats: means weighted by loss tokens
    (`*_current` ones by current-version tokens, left out when there were none), the largest of
    `*_max` figures, `current_tokens` summed."""
    elapsed = time.perf_counter() - t0
    loss_tokens = sum(st["tokens"] for st in stats)
    current = sum(st.get("current_tokens", 0.0) for st in stats)

    def weight(st: dict[str, float], k: str) -> float:
        return st["current_tokens"] if k.endswith("_current") else st["tokens"]

    metrics = {k: (max(st[k] for st in stats) if k.endswith("_max") else
                   sum(st[k] * weight(st, k) for st in stats) / max(current if k.endswith("_current") else loss_tokens, 1.0))
               for k in stats[0] if k not in ("tokens", "current_tokens") and (current or not k.endswith("_current"))}
    if "current_tokens" in stats[0]:
        metrics["current_tokens"] = current
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

