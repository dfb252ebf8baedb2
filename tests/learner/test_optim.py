"""AdamW with narrow moments (learner/optim.py): torch's update, half the state, resumable."""
from __future__ import annotations

import pytest
import torch

from learner import optim
from learner.optim import AdamW
from learner.torch_learner import TorchLearner
from tests.learner.test_learner_torch import batch, params, with_current_logprobs

SETTINGS = dict(lr=1e-2, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.1)


def tensors(seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    # one tensor spans several slices (the last one partial), one is smaller than a slice
    return [torch.randn(2 * optim.SLICE + 7, generator=g).requires_grad_(), torch.randn(33, 5, generator=g).requires_grad_()]


def run(opt_cls, ps: list[torch.Tensor], steps: int, **kw) -> torch.optim.Optimizer:
    opt = opt_cls(ps, **SETTINGS, **kw)
    for k in range(steps):
        g = torch.Generator().manual_seed(100 + k)
        for p in ps:
            p.grad = torch.randn(p.shape, generator=g)
        opt.step()
    return opt


def test_float32_moments_make_torchs_update():
    ours, ref = tensors(0), tensors(0)
    run(AdamW, ours, 3, state_dtype=torch.float32)
    run(torch.optim.AdamW, ref, 3)
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_bfloat16_moments_take_half_the_state_and_step_as_torch_does():
    ours, ref = tensors(0), tensors(0)
    opt = run(AdamW, ours, 3, state_dtype=torch.bfloat16)
    run(torch.optim.AdamW, ref, 3)
    state = opt.state[ours[0]]
    assert state["exp_avg"].dtype == state["exp_avg_sq"].dtype == torch.bfloat16
    assert state["exp_avg"].nbytes == ours[0].nbytes // 2
    start = tensors(0)
    for a, b, s in zip(ours, ref, start):
        moved = (b - s).abs()
        assert moved.mean() > 0.01  # three steps of lr 1e-2 moved the weights
        assert ((a - b).abs() <= 0.02 * moved + 1e-5).float().mean() > 0.99  # within 2% of torch's move


def test_a_saved_state_loads_back_in_bfloat16_and_continues_identically():
    a, b = tensors(0), tensors(0)
    opt_a = run(AdamW, a, 2, state_dtype=torch.bfloat16)
    saved = opt_a.state_dict()
    opt_b = AdamW(b, **SETTINGS, state_dtype=torch.bfloat16)
    with torch.no_grad():
        for pb, pa in zip(b, a):
            pb.copy_(pa)
    opt_b.load_state_dict(saved)
    assert opt_b.state[b[0]]["exp_avg"].dtype == torch.bfloat16  # torch's loader would make it float32
    for opt, ps in ((opt_a, a), (opt_b, b)):
        for p in ps:
            p.grad = torch.ones_like(p)
        opt.step()
    assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_the_learner_trains_and_resumes_with_bfloat16_moments(tmp_path):
    samples = batch()
    a = TorchLearner("tiny", lr=1e-3, optimizer_state_dtype="bfloat16", seed=0)
    with_current_logprobs(a, samples)
    losses = [a.train_step(samples)["loss"] for _ in range(3)]
    assert losses[-1] < losses[0] - 0.05
    assert all(s["exp_avg"].dtype == torch.bfloat16 for s in a.optimizer.state.values())
    a.save_checkpoint(tmp_path / "ckpt", step=3, policy_version=3)
    b = TorchLearner("tiny", lr=1e-3, optimizer_state_dtype="bfloat16", seed=0)
    b.load_checkpoint(tmp_path / "ckpt")
    assert b.train_step(samples)["loss"] == a.train_step(samples)["loss"]
    pa, pb = params(a), params(b)
    assert all(torch.equal(pa[k], pb[k]) for k in pa)


def test_an_unknown_state_dtype_is_one_clear_error():
    with pytest.raises(ValueError, match="optimizer_state_dtype must be one of float32, bfloat16, got 'fp8'"):
        TorchLearner("tiny", optimizer_state_dtype="fp8")
