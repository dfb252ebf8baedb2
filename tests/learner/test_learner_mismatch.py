"""Sampler/learner mismatch: the figures, PPO's old log-probs (rollout | recompute) and TIS."""
from __future__ import annotations

import math

import pytest
import torch

from learner.loop import step_summary
from learner.loss import behaviour, ppo_loss
from learner.samples import Sample
from learner.torch_learner import TorchLearner
from tests.exactness import assert_adam_step_matches, assert_grads_close
from tests.learner.test_learner_torch import batch, params, step_with_grads, with_current_logprobs

LEARNER = torch.tensor([-1.0, -2.0, -0.5])  # the learner's log-probs before the update
ROLLOUT = torch.tensor([-1.2, -1.0, -0.5])  # the sampler's: off by +0.2, -1.0, 0
ADV = torch.tensor([1.0, 1.0, -1.0])
ONE_SAMPLE = torch.zeros(3, dtype=torch.long)


def test_mismatch_figures_and_tis_weights_by_hand():
    old, w, st = behaviour(LEARNER, ROLLOUT, "recompute", tis_cap=1.1)
    assert torch.equal(old, LEARNER)
    assert w.tolist() == pytest.approx([1.1, math.exp(-1.0), 1.0])  # e^0.2 = 1.22 capped at 1.1
    assert st["mismatch_abs_mean"] == pytest.approx(0.4) and st["mismatch_abs_max"] == pytest.approx(1.0)
    # k3 of KL(sampler || learner): e^d - 1 - d with d = learner - rollout
    k3 = [math.exp(0.2) - 1.2, math.exp(-1.0), 0.0]
    assert st["mismatch_kl"] == pytest.approx(sum(k3) / 3)
    assert st["tis_mean"] == pytest.approx((1.1 + math.exp(-1.0) + 1.0) / 3) and st["tis_capped_frac"] == pytest.approx(1 / 3)
    old_r, none, _ = behaviour(LEARNER, ROLLOUT, "rollout", tis_cap=None)
    assert torch.equal(old_r, ROLLOUT) and none is None
    with pytest.raises(ValueError, match="rollout, recompute"):
        behaviour(LEARNER, ROLLOUT, "fresh")


def test_the_current_weights_tokens_have_their_own_figures():
    _, _, st = behaviour(LEARNER, ROLLOUT, "recompute", current=torch.tensor([True, False, True]))
    assert st["current_tokens"] == 2 and st["mismatch_abs_mean_current"] == pytest.approx(0.1)
    assert st["mismatch_kl_current"] == pytest.approx((math.exp(0.2) - 1.2) / 2, rel=1e-5)
    assert st["mismatch_abs_mean"] == pytest.approx(0.4)  # all tokens, as before


def test_tis_loss_by_hand():
    logp = LEARNER.clone().requires_grad_()
    old, w, _ = behaviour(logp, ROLLOUT, "recompute", tis_cap=1.1)
    loss, _ = ppo_loss(logp, old, ADV, torch.ones(3), ONE_SAMPLE, 1, tis_weights=w)
    # recompute: ratio 1, so each token's term is -w A; one sample, token mean
    assert float(loss) == pytest.approx((-1.1 - math.exp(-1.0) + 1.0) / 3)
    loss.backward()
    assert logp.grad.tolist() == pytest.approx([-1.1 / 3, -math.exp(-1.0) / 3, 1.0 / 3])  # w A grad(logp)
    # rollout old log-probs: the ratio carries the mismatch (e^0.2, e^-1, 1: none clipped with these advantages)
    loss_r, st = ppo_loss(LEARNER, ROLLOUT, ADV, torch.ones(3), ONE_SAMPLE, 1)
    r = [math.exp(0.2), math.exp(-1.0), 1.0]
    assert float(loss_r) == pytest.approx((-r[0] - r[1] + 1.0) / 3)


def test_without_mismatch_recompute_and_rollout_give_the_same_update():
    a = TorchLearner("tiny", lr=1e-3, seed=0, old_logprobs="rollout")
    b = TorchLearner("tiny", lr=1e-3, seed=0, old_logprobs="recompute", tis_cap=2.0)
    samples = with_current_logprobs(a, batch())  # the sampler's log-probs are the learner's
    (ma, ga), (mb, gb) = step_with_grads(a, samples), step_with_grads(b, samples)
    assert mb["mismatch_abs_max"] < 1e-5 and mb["tis_mean"] == pytest.approx(1.0, abs=1e-5)
    assert_grads_close(gb, ga)
    assert_adam_step_matches(params(b), params(a), gb, ga, lr=1e-3)


def test_the_step_reports_the_mismatch_it_saw():
    learner = TorchLearner("tiny", lr=1e-3, seed=0, max_tokens_per_micro_batch=16, old_logprobs="recompute", tis_cap=2.0)
    samples = with_current_logprobs(learner, batch())
    samples[2].rollout_logprobs = [x - 0.5 if m else x for x, m in zip(samples[2].rollout_logprobs, samples[2].loss_mask)]
    m = learner.train_step(samples)
    assert m["micro_batches"] == 4
    assert m["mismatch_abs_max"] == pytest.approx(0.5, abs=1e-4)  # the largest over micro-batches, not their mean
    assert m["mismatch_abs_mean"] == pytest.approx(0.5 / 4, abs=1e-4)  # one sample of four, 4 loss tokens each
    assert m["tis_mean"] > 1.0 and 0 < m["mismatch_kl"]
    with pytest.raises(ValueError, match="old_logprobs"):
        TorchLearner("tiny", old_logprobs="fresh")


def test_a_step_tells_the_precision_gap_from_the_drift_of_older_samples():
    """A sample one version behind differs from the learner by the update since (here 0.5 nats on
    its tokens); samples of the current version differ by precision alone (here none)."""
    learner = TorchLearner("tiny", lr=1e-3, seed=0, max_tokens_per_micro_batch=16, old_logprobs="recompute", tis_cap=2.0)
    samples = with_current_logprobs(learner, batch())
    samples[2].rollout_logprobs = [x - 0.5 if m else x for x, m in zip(samples[2].rollout_logprobs, samples[2].loss_mask)]
    for i, s in enumerate(samples):
        s.meta["versions_behind"] = int(i == 2)
    m = learner.train_step(samples)
    assert m["micro_batches"] == 4 and m["current_tokens"] == 12 and m["loss_tokens"] == 16
    assert m["mismatch_abs_mean"] == pytest.approx(0.5 / 4, abs=1e-4)
    assert m["mismatch_abs_mean_current"] < 1e-5 and m["mismatch_kl_current"] < 1e-6
    line = step_summary({"episodes": 4, "train": m})
    assert "mismatch |d|=0.12/max 0.5" in line and "(current weights' tokens: |d|=" in line
    for s in samples:
        s.meta["versions_behind"] = 1
    m = TorchLearner("tiny", lr=1e-3, seed=0, old_logprobs="recompute").train_step(samples)
    assert m["current_tokens"] == 0 and "mismatch_abs_mean_current" not in m


def test_the_step_line_shows_the_mismatch():
    row = {"episodes": 2, "train": {"mismatch_abs_mean": 0.0123, "mismatch_abs_max": 0.25, "mismatch_kl": 0.0011}}
    assert "mismatch |d|=0.012/max 0.25 kl=0.0011" in step_summary(row)
    assert "mismatch" not in step_summary({"episodes": 2, "train": {"skipped": 1.0}})
