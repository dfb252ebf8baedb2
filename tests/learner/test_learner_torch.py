"""The torch learner on the tiny model: log-probs, updates, accumulation, checkpoints, weight sync."""
from __future__ import annotations

import asyncio

import pytest
import torch

from agent.policy.engine import Engine
from learner.samples import Sample
from learner.batching import Batch, chains
from learner.torch_learner import TorchLearner, micro_batches
from tests.exactness import assert_adam_step_matches, assert_grads_close


def batch(seed: int = 0, n: int = 4, adv_sign=(1, -1)) -> list[Sample]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        p = torch.randint(0, 256, (6 + 2 * i,), generator=g).tolist()
        r = torch.randint(0, 256, (5,), generator=g).tolist()
        a = float(adv_sign[i % len(adv_sign)])
        out.append(Sample(p, r, [0.0] * 5, [a] * 5, [1, 1, 1, 0, 1], {"i": i}))
    return out


def with_current_logprobs(learner: TorchLearner, samples: list[Sample]) -> list[Sample]:
    """Set old log-probs to the learner's own (an on-policy batch: ratio 1 at the first step)."""
    for s, lps in zip(samples, learner.logprobs(samples)):
        it = iter(lps)
        s.rollout_logprobs = [next(it) if m else -5.0 for m in s.loss_mask]
    return samples


def full_forward_logprobs(model, s: Sample) -> list[float]:
    with torch.no_grad():
        logits = model(torch.tensor([s.prompt_ids + s.response_ids], device=model.device)).logits[0].float()
    lp = torch.log_softmax(logits, -1)
    p = len(s.prompt_ids)
    return [lp[p + j - 1, t].item() for j, t in enumerate(s.response_ids) if s.loss_mask[j]]


def params(learner: TorchLearner) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in learner.model.state_dict().items()}


def test_loss_token_logprobs_match_a_full_forward():
    learner = TorchLearner("tiny", seed=0)
    samples = batch()
    for s, lps in zip(samples, learner.logprobs(samples)):
        assert lps == pytest.approx(full_forward_logprobs(learner.model, s), abs=1e-5)


def test_micro_batches_respect_the_token_budget():
    samples = batch(n=5)  # 11, 13, 15, 17, 19 tokens
    groups = micro_batches(samples, max_tokens=40)
    assert sorted(s.meta["i"] for g in groups for s in g) == [0, 1, 2, 3, 4]
    assert all(len(g) * max(s.n_tokens for s in g) <= 40 for g in groups)
    assert micro_batches(samples, max_tokens=5) == [[s] for s in sorted(samples, key=lambda s: -s.n_tokens)]


def test_train_step_lowers_the_loss_on_a_fixed_batch():
    learner = TorchLearner("tiny", lr=1e-3, seed=0)
    samples = with_current_logprobs(learner, batch())
    losses = [learner.train_step(samples)["loss"] for _ in range(4)]
    # ratio 1 up to the log-prob differences of single-sample vs padded forwards (~1e-6), advantages
    # +1/-1 balanced per sample mean
    assert losses[0] == pytest.approx(0.0, abs=1e-5)
    assert losses[-1] < losses[0] - 0.1
    assert all(b <= a + 1e-6 for a, b in zip(losses, losses[1:]))
    m = learner.train_step(samples)
    for key in ("loss", "clip_frac", "entropy", "approx_kl", "grad_norm", "tokens", "time_s", "tokens_per_s"):
        assert key in m
    assert m["tokens"] == sum(s.n_tokens for s in samples) and m["loss_tokens"] == 16
    assert m["clip_frac"] > 0 and m["entropy"] > 0


def step_with_grads(learner: TorchLearner, samples: list[Sample]) -> tuple[dict, dict]:
    """(metrics, gradients as the optimizer saw them, after clipping) of one train step."""
    grads = {}
    handle = learner.optimizer.register_step_pre_hook(
        lambda *_: grads.update({n: p.grad.clone() for n, p in learner.model.named_parameters()}))
    metrics = learner.train_step(samples)
    handle.remove()
    return metrics, grads


def episode_turns(seed: int = 0) -> list[Sample]:
    """Three turns of episode "e" (each prompt = the previous turn's prompt + reply + a user
    message), a turn of "e" that branched off (its prompt differs in one token), one of "f"."""
    g = torch.Generator().manual_seed(seed)
    toks = lambda n: torch.randint(0, 256, (n,), generator=g).tolist()  # noqa: E731
    out, context = [], toks(7)
    for t in range(3):
        reply = toks(4)
        out.append(Sample(list(context), reply, [0.0] * 4, [(-1.0) ** t] * 4, [1, 1, 0, 1], {"episode_id": "e", "t": t}))
        context = context + reply + toks(3)
    off = list(out[1].prompt_ids)
    off[2] = (off[2] + 1) % 256
    out.append(Sample(off, toks(4), [0.0] * 4, [0.5] * 4, [1] * 4, {"episode_id": "e", "t": "off"}))
    out.append(Sample(toks(9), toks(4), [0.0] * 4, [-0.5] * 4, [1] * 4, {"episode_id": "f"}))
    return out


def test_an_episodes_turns_share_one_row_and_train_as_if_apart():
    samples = episode_turns()
    assert [[s.meta.get("t") for s in c] for c in chains(samples)] == [[0, 1, 2], ["off"], [None]]
    shared = Batch(samples, torch.device("cpu"), 0)
    assert shared.ids.shape == (3, samples[2].n_tokens)
    assert shared.sample_index.tolist() == [i for i, s in enumerate(samples) for m in s.loss_mask if m]
    a = TorchLearner("tiny", lr=1e-3, seed=0)
    b = TorchLearner("tiny", lr=1e-3, seed=0)
    samples = with_current_logprobs(a, samples)
    apart = [Sample(s.prompt_ids, s.response_ids, s.rollout_logprobs, s.advantages, s.loss_mask,
                    {**s.meta, "episode_id": i}) for i, s in enumerate(samples)]
    assert len(chains(apart)) == 5
    (ma, ga), (mb, gb) = step_with_grads(a, samples), step_with_grads(b, apart)
    assert ma["tokens"] == shared.n_tokens < mb["tokens"] == sum(s.n_tokens for s in samples)
    assert ma["loss"] == pytest.approx(mb["loss"], abs=1e-6) and ma["loss_tokens"] == mb["loss_tokens"]
    assert_grads_close(ga, gb)


def test_gradient_accumulation_matches_one_big_batch():
    """Four micro-batches give the one-batch gradient up to summation order (tests/exactness.py)."""
    a = TorchLearner("tiny", lr=1e-3, max_tokens_per_micro_batch=10_000, seed=0)
    b = TorchLearner("tiny", lr=1e-3, max_tokens_per_micro_batch=16, seed=0)
    assert a.model.dtype == b.model.dtype == torch.float32
    samples = with_current_logprobs(a, batch())
    (ma, ga), (mb, gb) = step_with_grads(a, samples), step_with_grads(b, samples)
    assert (ma["micro_batches"], mb["micro_batches"]) == (1, 4)
    assert ma["loss"] == pytest.approx(mb["loss"], abs=1e-6)
    assert ma["grad_norm"] == pytest.approx(mb["grad_norm"], rel=1e-5)
    assert_grads_close(gb, ga)
    assert_adam_step_matches(params(b), params(a), gb, ga, lr=1e-3)


def test_masked_samples_count_in_the_denominator():
    learner = TorchLearner("tiny", lr=0.0, seed=0)
    samples = with_current_logprobs(learner, batch(adv_sign=(1,)))
    base = learner.train_step(samples)["loss"]
    masked = Sample([1, 2], [3, 4], [0.0, 0.0], [1.0, 1.0], [0, 0])
    assert learner.train_step(samples + [masked])["loss"] == pytest.approx(base * 4 / 5)
    assert learner.train_step([masked]) == {"skipped": 1.0, "samples": 1.0}


def test_flat_samples_are_not_forwarded_and_the_update_is_the_same():
    """A sample whose advantages are all 0 (a flat group's) adds exactly 0 to the loss and the
    gradient: the step skips its forward and backward but still averages over it."""
    a, b = TorchLearner("tiny", lr=1e-3, seed=0), TorchLearner("tiny", lr=1e-3, seed=0)
    samples = with_current_logprobs(a, batch(n=6, adv_sign=(1, 0, -1)))  # two of six flat
    ma = a.train_step(samples)
    mb = b._optimize(samples, b._ppo_loss)  # every trainable sample forwarded
    assert ma["tokens"] < mb["tokens"] and ma["samples"] == mb["samples"] == 6
    assert ma["loss"] == pytest.approx(mb["loss"], abs=1e-6)
    for k, v in params(b).items():
        torch.testing.assert_close(params(a)[k], v, rtol=1e-5, atol=1e-7)
    flat = with_current_logprobs(a, batch(n=2, adv_sign=(0,)))  # nothing moves: all forwarded, the optimizer steps
    assert a.train_step(flat)["tokens"] == sum(s.n_tokens for s in flat)
    kl = TorchLearner("tiny", lr=1e-3, kl_coef=0.1, seed=0)  # a KL term moves flat samples too: all forwarded
    assert kl.train_step(samples)["tokens"] == mb["tokens"]


def test_reference_model_only_with_kl():
    assert TorchLearner("tiny", seed=0).ref_model is None
    learner = TorchLearner("tiny", lr=1e-2, kl_coef=0.1, seed=0)
    assert learner.ref_model is not None
    samples = with_current_logprobs(learner, batch())
    first = learner.train_step(samples)
    later = [learner.train_step(samples) for _ in range(2)][-1]
    assert first["ref_kl"] == pytest.approx(0.0, abs=1e-6) and later["ref_kl"] > 0


def test_checkpoint_resume_continues_identically(tmp_path):
    samples = batch()
    a = TorchLearner("tiny", lr=1e-3, seed=0)
    with_current_logprobs(a, samples)
    a.train_step(samples)
    a.save_checkpoint(tmp_path / "ckpt", step=7, policy_version=3)
    a.save_checkpoint(tmp_path / "ckpt", step=7, policy_version=3)  # overwriting is safe
    next_a = a.train_step(samples)

    b = TorchLearner("tiny", lr=1e-3, seed=0)
    assert b.load_checkpoint(tmp_path / "ckpt") == {"step": 7, "policy_version": 3}
    assert b.step == 1
    next_b = b.train_step(samples)
    assert next_b["loss"] == next_a["loss"] and next_b["grad_norm"] == next_a["grad_norm"]
    pa, pb = params(a), params(b)
    assert all(torch.equal(pa[k], pb[k]) for k in pa)
    with pytest.raises(FileNotFoundError):
        b.load_checkpoint(tmp_path / "nothing")


def test_saved_weights_load_into_the_engine(tmp_path):
    learner = TorchLearner("tiny", lr=1e-2, seed=0)
    samples = with_current_logprobs(learner, batch())
    learner.train_step(samples)
    path = learner.save_weights(tmp_path / "v1")
    engine = Engine("tiny", dtype="float32", seed=0)
    try:
        s = samples[0]

        async def go():
            version = await engine.update_weights(str(path), 1)
            return version, await engine.score(s.prompt_ids + s.response_ids, len(s.prompt_ids))

        version, lps = asyncio.run(go())
    finally:
        engine.close()
    assert version == 1
    expected = learner.logprobs([s])[0]
    assert [x for x, m in zip(lps, s.loss_mask) if m] == pytest.approx(expected, abs=1e-4)


def test_live_weights_load_into_the_engine_as_a_copy():
    """The in-process update (policy=local): the engine copies the learner's tensors, checkpointed
    layers included; the learner's next step does not reach the served weights until the next update."""
    learner = TorchLearner("tiny", lr=1e-2, gradient_checkpointing=True, seed=0)
    samples = with_current_logprobs(learner, batch())
    learner.train_step(samples)
    engine = Engine("tiny", dtype="float32", seed=0)
    s = samples[0]

    async def score():
        return await engine.score(s.prompt_ids + s.response_ids, len(s.prompt_ids))

    try:
        assert asyncio.run(engine.load_weights(learner.live_weights(), 1)) == 1
        served = asyncio.run(score())
        expected = learner.logprobs([s])[0]
        learner.train_step(samples)
        assert asyncio.run(score()) == served  # a copy: the learner's later step is not served
    finally:
        engine.close()
    assert [x for x, m in zip(served, s.loss_mask) if m] == pytest.approx(expected, abs=1e-4)
    assert learner.logprobs([s])[0] != pytest.approx(expected, abs=1e-4)


def test_shared_weights_are_served_and_stepped_between_batches():
    """Where the engine serves the learner's dtype (policy=local without bf16 units), it serves the
    learner's tensors themselves, so the model is held once, and the optimizer step runs on the
    engine's worker between batches as the next version; a bf16 engine cannot share and says so."""
    learner = TorchLearner("tiny", lr=1e-2, gradient_checkpointing=True, seed=0)
    samples = with_current_logprobs(learner, batch())
    live = learner.live_weights()
    engine = Engine("tiny", dtype="float32", seed=1)  # other weights than the learner's until shared
    s = samples[0]
    versions: list[int] = []

    async def score():
        return await engine.score(s.prompt_ids + s.response_ids, len(s.prompt_ids))

    try:
        assert engine.can_share(live)
        assert asyncio.run(engine.share_weights(live, 0)) == 0
        assert all(p.data_ptr() == live[n].data_ptr() for n, p in engine.model.named_parameters())
        before, expected_before = asyncio.run(score()), learner.logprobs([s])[0]
        learner.train_step(samples, lambda step: versions.append(engine.change_weights(step, 1).result()))
        after = asyncio.run(score())
    finally:
        engine.close()
    assert versions == [1] and engine.weight_version == 1
    masked = lambda lps: [x for x, m in zip(lps, s.loss_mask) if m]
    assert masked(before) == pytest.approx(expected_before, abs=1e-4)  # the learner's weights, not the engine's own
    assert masked(after) == pytest.approx(learner.logprobs([s])[0], abs=1e-4)
    assert masked(after) != pytest.approx(masked(before), abs=1e-4)  # the step reached the served weights
    bf16 = Engine("tiny", dtype="bfloat16", seed=0)
    try:
        assert not bf16.can_share(live)
        with pytest.raises(ValueError, match="use load_weights"):
            asyncio.run(bf16.share_weights(live, 1))
    finally:
        bf16.close()


def test_bf16_autocast_and_gradient_checkpointing_train():
    ref = TorchLearner("tiny", lr=1e-3, seed=0)
    learner = TorchLearner("tiny", lr=1e-3, bf16=True, gradient_checkpointing=True, seed=0)
    samples = with_current_logprobs(ref, batch())
    assert learner.model.is_activation_checkpointing
    assert [x for lp in learner.logprobs(samples) for x in lp] == pytest.approx([x for lp in ref.logprobs(samples) for x in lp], abs=0.05)
    losses = [learner.train_step(samples)["loss"] for _ in range(3)]
    assert all(p.dtype == torch.float32 for p in learner.model.parameters())  # master weights stay fp32
    assert losses[-1] < losses[0]
