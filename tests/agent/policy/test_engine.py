"""The embedded engine in-process: log-prob agreement with a teacher-forced pass, continuous
batching, sampling controls, weight updates under load, clean shutdown."""
from __future__ import annotations

import asyncio
import gc
import time
import weakref

import pytest
import torch

from agent.policy.base import GenerateResult, PolicyClient, SamplingParams
from agent.policy.engine import Engine, EngineClosed, Request
from agent.policy.models import load_model, save_model

# fp32 on CPU: decoding with a KV cache inside a padded batch vs one full forward differ only by
# float reassociation; 1e-4 nats is far below any real mismatch (a wrong position or token is > 0.1).
TOL = 1e-4


@pytest.fixture(scope="module")
def engine():
    eng = Engine("tiny", dtype="float32", seed=0, max_batch=16)
    yield eng
    eng.close()


def teacher_forced(model, prompt: list[int], response: list[int]) -> list[float]:
    with torch.inference_mode():
        logits = model(torch.tensor([prompt + response])).logits[0].float()
    lps = torch.log_softmax(logits, dim=-1)
    return [float(lps[len(prompt) - 1 + i, t]) for i, t in enumerate(response)]


def max_diff(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b)
    return max(abs(x - y) for x, y in zip(a, b))


def test_engine_is_a_policy_client(engine):
    assert isinstance(engine, PolicyClient)


def test_logprobs_match_teacher_forcing_and_score(engine):
    prompt = engine.tokenizer("The quick brown fox")["input_ids"]
    res = asyncio.run(engine.generate(prompt, SamplingParams(max_new_tokens=24, seed=7)))
    assert isinstance(res, GenerateResult) and len(res.output_ids) == len(res.logprobs) > 0
    ref = teacher_forced(engine.model, prompt, res.output_ids)
    assert max_diff(res.logprobs, ref) < TOL
    scored = asyncio.run(engine.score(prompt + res.output_ids, len(prompt)))
    assert max_diff(scored, ref) < TOL


def test_concurrent_requests_of_different_lengths_batch_and_agree(engine):
    prompts = [engine.tokenizer("ab" * (1 + 5 * i))["input_ids"] for i in range(6)]

    async def go():
        return await asyncio.gather(*[
            engine.generate(p, SamplingParams(max_new_tokens=8 + 6 * i, temperature=0.9, top_p=0.95, seed=i))
            for i, p in enumerate(prompts)])

    results = asyncio.run(go())
    for i, (p, r) in enumerate(zip(prompts, results)):
        assert r.finish_reason == "stop" or len(r.output_ids) == 8 + 6 * i
        ref = teacher_forced(engine.model, p, r.output_ids)
        assert max_diff(r.logprobs, ref) < TOL
        assert max_diff(asyncio.run(engine.score(p + r.output_ids, len(p))), ref) < TOL


def test_concurrent_scores_with_any_start(engine):
    """Score requests prefilled together (left-padded) give each row its own teacher-forced values."""
    seqs = [engine.tokenizer("s" * n)["input_ids"] for n in (3, 11, 7, 20, 5)]
    starts = [1, 10, 6, 4, 5]  # includes start == len-1 and start == len (nothing to score)

    async def go():
        return await asyncio.gather(*[engine.score(ids, st) for ids, st in zip(seqs, starts)])

    for ids, st, got in zip(seqs, starts, asyncio.run(go())):
        ref = teacher_forced(engine.model, ids[:st], ids[st:])
        assert len(got) == len(ids) - st and (not got or max_diff(got, ref) < TOL)


def test_seeded_requests_reproduce_alone_or_batched(engine):
    prompt = engine.tokenizer("seeded")["input_ids"]
    sp = SamplingParams(max_new_tokens=16, seed=123, top_k=50)
    alone = asyncio.run(engine.generate(prompt, sp))

    async def crowded():
        others = [engine.generate(prompt[:2], SamplingParams(max_new_tokens=30)) for _ in range(4)]
        return (await asyncio.gather(engine.generate(prompt, sp), *others))[0]

    assert asyncio.run(crowded()).output_ids == alone.output_ids


def test_greedy_stop_token_and_top_k_one(engine):
    prompt = engine.tokenizer("greedy")["input_ids"]
    greedy = asyncio.run(engine.generate(prompt, SamplingParams(max_new_tokens=12, temperature=0.0)))
    top1 = asyncio.run(engine.generate(prompt, SamplingParams(max_new_tokens=12, top_k=1, seed=5)))
    assert top1.output_ids == greedy.output_ids
    ids = greedy.output_ids
    k = next(i for i in range(1, len(ids)) if ids[i] not in ids[:i])  # first token not seen before
    stopped = asyncio.run(engine.generate(prompt, SamplingParams(max_new_tokens=12, temperature=0.0,
                                                                 stop_token_ids=[ids[k]])))
    assert stopped.output_ids == ids[:k + 1] and stopped.finish_reason == "stop"


def test_short_request_joins_a_running_batch_and_leaves_early(engine):
    """A request arriving mid-generation is served without waiting for the long one to end."""
    prompt = engine.tokenizer("long")["input_ids"]

    async def go():
        long_task = asyncio.create_task(engine.run(Request(prompt, SamplingParams(max_new_tokens=400), ignore_eos=True)))
        await asyncio.sleep(0.2)
        assert not long_task.done()
        short = await engine.generate(prompt, SamplingParams(max_new_tokens=3))
        still_running = not long_task.done()
        long_res = await long_task
        return short, still_running, long_res

    short, still_running, long_res = asyncio.run(go())
    assert len(short.output_ids) <= 3 and still_running
    assert len(long_res.output_ids) == 400 and long_res.finish_reason == "length"


def test_non_utf8_output_decodes_with_replacement(engine):
    assert engine.decode([0xC3, 0x28, 0xFF]) == "\ufffd(\ufffd"
    res = asyncio.run(engine.generate(engine.tokenizer("x")["input_ids"], SamplingParams(max_new_tokens=40, seed=3)))
    assert res.text == engine.decode(res.output_ids) and "\ufffd" in res.text


def test_bad_input_is_rejected_clearly(engine):
    with pytest.raises(ValueError, match="empty"):
        asyncio.run(engine.generate([], SamplingParams()))
    with pytest.raises(ValueError, match="out of range"):
        asyncio.run(engine.generate([10**6], SamplingParams()))
    with pytest.raises(ValueError, match="top_p"):
        asyncio.run(engine.generate([1], SamplingParams(top_p=0)))
    with pytest.raises(ValueError, match="start"):
        asyncio.run(engine.score([1, 2], 0))


def test_weight_update_under_concurrent_load(tmp_path):
    """Requests before, during and after a swap all succeed; each carries the version whose
    weights sampled it, proven by teacher-forcing under that version's weights."""
    old_model, _ = load_model("tiny", dtype="float32", seed=0)
    new_model, tok = load_model("tiny", dtype="float32", seed=1)
    save_model(new_model, tok, tmp_path / "v1")
    eng = Engine("tiny", dtype="float32", seed=0, max_batch=4)  # a small batch so requests queue during the swap
    prompt = tok("update")["input_ids"]

    async def go():
        sp = SamplingParams(max_new_tokens=40)
        before = [asyncio.create_task(eng.generate(prompt, sp)) for _ in range(6)]
        await asyncio.sleep(0.05)
        update = asyncio.create_task(eng.update_weights(str(tmp_path / "v1")))
        await asyncio.sleep(0.01)
        during = [asyncio.create_task(eng.generate(prompt, sp)) for _ in range(6)]
        version = await update
        after = await eng.generate(prompt, sp)
        return await asyncio.gather(*before), await asyncio.gather(*during), version, after

    try:
        before, during, version, after = asyncio.run(go())
    finally:
        eng.close()
    assert version == 1 and after.weight_version == 1
    assert all(r.weight_version == 0 for r in before[:4])  # these were running when the update came
    for r in [*before, *during, after]:
        assert r.weight_version in (0, 1) and len(r.output_ids) > 0
        model = old_model if r.weight_version == 0 else new_model
        assert max_diff(r.logprobs, teacher_forced(model, prompt, r.output_ids)) < TOL


def test_weights_given_as_tensors_are_served_and_then_let_go():
    """load_weights: tensors in, the served model changes to them, and the engine keeps no reference
    to them afterwards (a whole model's worth of memory otherwise stays until the next update)."""
    new_model, tok = load_model("tiny", dtype="float32", seed=1)
    state = {k: v.clone() for k, v in new_model.state_dict().items()}
    probe = weakref.ref(next(iter(state.values())))
    eng = Engine("tiny", dtype="float32", seed=0)
    prompt = tok("tensors")["input_ids"]
    try:
        assert asyncio.run(eng.load_weights(state, 5)) == 5
        del state
        gc.collect()
        assert probe() is None
        r = asyncio.run(eng.generate(prompt, SamplingParams(max_new_tokens=8)))
        assert r.weight_version == 5
        assert max_diff(r.logprobs, teacher_forced(new_model, prompt, r.output_ids)) < TOL
        with pytest.raises(ValueError, match="do not fit"):
            asyncio.run(eng.load_weights({"no.such.weight": torch.zeros(1)}, 6))
        assert eng.weight_version == 5
    finally:
        eng.close()


def test_bad_weight_folder_fails_and_keeps_serving(tmp_path):
    eng = Engine("tiny", dtype="float32", seed=0)
    try:
        with pytest.raises(FileNotFoundError):
            asyncio.run(eng.update_weights(str(tmp_path)))
        assert eng.weight_version == 0
        assert asyncio.run(eng.generate([1, 2], SamplingParams(max_new_tokens=2))).weight_version == 0
    finally:
        eng.close()


def test_close_fails_waiting_requests_and_refuses_new():
    eng = Engine("tiny", dtype="float32", seed=0, max_batch=1)

    async def go():
        sp = SamplingParams(max_new_tokens=3000)
        tasks = [asyncio.create_task(eng.run(Request([1, 2, 3], sp, ignore_eos=True))) for _ in range(3)]
        await asyncio.sleep(0.1)
        t0 = time.monotonic()
        await eng.aclose()
        results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)
        return results, time.monotonic() - t0

    results, took = asyncio.run(go())
    assert took < 10 and all(isinstance(r, EngineClosed) for r in results)
    assert not asyncio.run(eng.health())
    with pytest.raises(EngineClosed):
        asyncio.run(eng.generate([1], SamplingParams()))


def test_a_closed_engine_lets_its_model_and_cache_go_while_it_is_still_held():
    eng = Engine("tiny", dtype="float32", seed=0)
    asyncio.run(eng.generate([1, 2, 3, 4, 5, 6, 7, 8, 9], SamplingParams(max_new_tokens=2)))  # fills the prefix cache
    assert eng.prefix_cache_stats()["bytes_used"] > 0
    model = weakref.ref(eng.model)
    holder = [eng]  # e.g. an HTTP app's handlers, whose holders the garbage collector cannot always see
    eng.close()
    gc.collect()
    assert model() is None and eng.prefix_cache_stats()["bytes_used"] == 0
    assert not eng.can_share({})
    with pytest.raises(EngineClosed):
        asyncio.run(eng.load_weights({}))
    assert holder[0] is eng


def test_worker_crash_fails_requests_instead_of_hanging():
    eng = Engine("tiny", dtype="float32", seed=0)

    def broken(seqs):  # inject a scheduler bug
        raise RuntimeError("injected bug")

    eng._prefill_groups = broken
    try:
        with pytest.raises(EngineClosed):
            asyncio.run(asyncio.wait_for(eng.generate([1, 2], SamplingParams(max_new_tokens=2)), 30))
        assert not asyncio.run(eng.health())
    finally:
        eng.close()
