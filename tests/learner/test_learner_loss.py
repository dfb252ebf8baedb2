"""PPO clip loss, k3 KL and aggregation against hand-computed values (learner/loss.py)."""
from __future__ import annotations

import math

import pytest
import torch

from learner.loss import k3, logprobs_and_entropy, ppo_loss

approx = pytest.approx
LN = math.log


def case():
    # ratio, advantage per token; tokens 0-1 belong to sample 0, tokens 2-4 to sample 1
    ratios = [1.5, 0.5, 1.1, 0.5, 1.5]
    adv = [1.0, -1.0, 2.0, 1.0, -1.0]
    old = torch.tensor([-1.0, -2.0, -0.5, -1.5, -3.0])
    logp = (old + torch.tensor([LN(r) for r in ratios])).requires_grad_(True)
    mask = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0])
    idx = torch.tensor([0, 0, 1, 1, 1])
    return logp, old, torch.tensor(adv), mask, idx


def test_ppo_clip_both_sides_and_sample_mean():
    logp, old, adv, mask, idx = case()
    loss, stats = ppo_loss(logp, old, adv, mask, idx, n_samples=3)
    # per token: max(-rA, -clip(r, 0.8, 1.28)A)
    #   r=1.5 A=+1 -> -1.28 (clipped high); r=0.5 A=-1 -> 0.8 (clipped low)
    #   r=1.1 A=+2 -> -2.2; r=0.5 A=+1 -> -0.5 (the unclipped term is the pessimistic one)
    # sample means: (-1.28 + 0.8) / 2 = -0.24 and (-2.2 - 0.5) / 2 = -1.35 (token 4 masked);
    # a third, fully masked sample in the batch counts in the denominator
    assert float(loss.detach()) == approx((-0.24 - 1.35) / 3)
    assert stats["clip_frac"] == approx(0.5)
    assert stats["tokens"] == 4
    assert stats["ratio_mean"] == approx((1.5 + 0.5 + 1.1 + 0.5) / 4)
    loss.backward()
    # clipped tokens get no gradient; unclipped ones get -r A / (tokens in sample) / n_samples
    assert logp.grad.tolist() == approx([0.0, 0.0, -2.2 / 2 / 3, -0.5 / 2 / 3, 0.0])


def test_micro_batches_add_up():
    logp, old, adv, mask, idx = case()
    full, _ = ppo_loss(logp, old, adv, mask, idx, n_samples=2)
    a, _ = ppo_loss(logp[:2], old[:2], adv[:2], mask[:2], idx[:2], n_samples=2)
    b, _ = ppo_loss(logp[2:], old[2:], adv[2:], mask[2:], idx[2:] - 1, n_samples=2)
    assert float(a + b) == approx(float(full))


def test_symmetric_eps_and_no_clip_at_ratio_one():
    logp = torch.tensor([-1.0, -1.0])
    loss, stats = ppo_loss(logp, logp.clone(), torch.tensor([0.7, -0.3]), torch.ones(2), torch.tensor([0, 0]), 1, eps_low=0.2, eps_high=0.2)
    assert float(loss) == approx(-(0.7 - 0.3) / 2)
    assert stats["clip_frac"] == 0.0 and stats["approx_kl"] == approx(0.0)


def test_k3_kl_to_reference():
    logp = torch.tensor([0.0, LN(0.5)])
    ref = torch.tensor([LN(2.0), LN(0.5)])
    # k3 = e^(ref - logp) - 1 - (ref - logp): 2 - 1 - ln 2 for token 0, 0 for token 1
    assert k3(logp, ref).tolist() == approx([1 - LN(2.0), 0.0])
    adv = torch.zeros(2)
    loss, stats = ppo_loss(logp, logp.clone(), adv, torch.ones(2), torch.tensor([0, 0]), 1, ref_logprobs=ref, kl_coef=0.1)
    assert float(loss) == approx(0.1 * (1 - LN(2.0)) / 2)
    assert stats["ref_kl"] == approx((1 - LN(2.0)) / 2)
    loss0, stats0 = ppo_loss(logp, logp.clone(), adv, torch.ones(2), torch.tensor([0, 0]), 1, ref_logprobs=ref, kl_coef=0.0)
    assert float(loss0) == 0.0 and stats0["ref_kl"] == approx((1 - LN(2.0)) / 2)  # logged even at coef 0


def test_logprobs_and_entropy():
    logits = torch.tensor([[0.0, 0.0, 0.0, 0.0], [math.log(3.0), 0.0, -1e9, -1e9]])
    logp, ent = logprobs_and_entropy(logits, torch.tensor([2, 0]), with_entropy=True)
    assert logp.tolist() == approx([LN(0.25), LN(0.75)])
    assert ent.tolist() == approx([LN(4.0), -(0.75 * LN(0.75) + 0.25 * LN(0.25))])
