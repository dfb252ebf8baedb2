"""Prefix KV reuse in the embedded engine: multi-turn and shared-prompt requests give the same
ids and log-probs as without reuse, input log-probs stay right, a weight update empties the
cache, and the cache stays within its byte budget under many concurrent episodes."""
from __future__ import annotations

import asyncio

import pytest
import torch

from agent.chat import ChatRenderer
from agent.policy.base import SamplingParams
from agent.policy.engine import Engine, PrefixCache
from agent.policy.models import load_model, save_model

# fp32, pinned: `dtype=auto` is bf16 on CPUs with bf16 units, where these comparisons mean nothing.
# Reused KV was computed in other batch shapes (other padding, one token per decode step)
# than a fresh prefill computes it, so sums reassociate. Measured max |diff| over these tests is
# 4.8e-7 nats (one fp32 ulp near |lp| ~ 5); 1e-4 matches test_engine.py and is far below a real mismatch (> 0.1).
TOL = 1e-4
SYSTEM = "You are a careful assistant. " * 14  # ~400 byte tokens, shared by every episode


@pytest.fixture(scope="module")
def engines():
    # 64 MB holds every conversation here (the default, tiny's 0.4 MB of weights, would evict them)
    reuse = Engine("tiny", dtype="float32", seed=0, max_batch=16, prefix_cache_mb=64)
    plain = Engine("tiny", dtype="float32", seed=0, max_batch=16, prefix_cache_mb=0)
    yield reuse, plain
    reuse.close()
    plain.close()


def max_diff(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b)
    return max((abs(x - y) for x, y in zip(a, b)), default=0.0)


def teacher_forced(model, prompt: list[int], response: list[int]) -> list[float]:
    with torch.inference_mode():
        logits = model(torch.tensor([prompt + response])).logits[0].float()
    lps = torch.log_softmax(logits, dim=-1)
    return [float(lps[len(prompt) - 1 + i, t]) for i, t in enumerate(response)]


async def episode(engine: Engine, chat: ChatRenderer, user: str, turns: int, sampling) -> list[tuple[list[int], list[int], list[float]]]:
    """A conversation like the runner's: the prompt only grows by the reply and a tool message."""
    ids = chat.render_prompt([{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}])
    out = []
    for t in range(turns):
        res = await engine.generate(ids, sampling(t))
        out.append((ids, res.output_ids, res.logprobs))
        ids = ids + res.output_ids + chat.observation_delta({"role": "tool", "content": f"result {t}"}, res.output_ids)
    return out


def run_episodes(engine: Engine, n: int, turns: int, sampling) -> list:
    chat = ChatRenderer(engine.tokenizer)

    async def go():
        return await asyncio.gather(*[episode(engine, chat, f"task {i}", turns, sampling) for i in range(n)])

    return asyncio.run(go())


@pytest.mark.parametrize("sampling", [
    lambda t: SamplingParams(max_new_tokens=10, temperature=0.0),
    lambda t: SamplingParams(max_new_tokens=10, temperature=0.8, top_p=0.9, seed=100 + t),
], ids=["greedy", "seeded"])
def test_multi_turn_reuse_matches_no_reuse(engines, sampling):
    reuse, plain = engines
    before = reuse.prefix_cache_stats()
    got = run_episodes(reuse, 4, 5, sampling)
    want = run_episodes(plain, 4, 5, sampling)
    for ep_got, ep_want in zip(got, want):
        for (p1, ids1, lps1), (p2, ids2, lps2) in zip(ep_got, ep_want):
            assert p1 == p2 and ids1 == ids2
            assert max_diff(lps1, lps2) < TOL
            assert max_diff(lps1, teacher_forced(reuse.model, p1, ids1)) < TOL
    stats = reuse.prefix_cache_stats()
    assert stats["hits"] - before["hits"] >= 4 * 4  # every later turn reuses its own history
    # each later turn computes only its reply's last token and the tool message, far below its prompt
    computed = stats["tokens_prefilled"] - before["tokens_prefilled"]
    assert computed < 0.3 * sum(len(p) for ep in got for p, _, _ in ep)
    assert plain.prefix_cache_stats()["hits"] == 0 and plain.prefix_cache_stats()["bytes_used"] == 0


def test_shared_system_prompt_reuses_a_partial_match(engines):
    reuse, plain = engines
    chat = ChatRenderer(reuse.tokenizer)
    sp = SamplingParams(max_new_tokens=8, temperature=0.0)
    first = chat.render_prompt([{"role": "system", "content": SYSTEM}, {"role": "user", "content": "first"}])
    other = chat.render_prompt([{"role": "system", "content": SYSTEM}, {"role": "user", "content": "other"}])
    asyncio.run(reuse.generate(first, sp))
    before = reuse.prefix_cache_stats()
    res = asyncio.run(reuse.generate(other, sp))
    stats = reuse.prefix_cache_stats()
    shared = next(i for i, (a, b) in enumerate(zip(first, other)) if a != b)
    assert stats["hits"] == before["hits"] + 1 and stats["tokens_reused"] - before["tokens_reused"] == shared
    ref = asyncio.run(plain.generate(other, sp))
    assert res.output_ids == ref.output_ids and max_diff(res.logprobs, ref.logprobs) < TOL


def test_input_logprobs_never_come_from_reused_positions(engines):
    """A score after a generate finds the whole conversation cached; it may only reuse up to its
    log-prob start, and its values must equal teacher forcing."""
    reuse, _ = engines
    prompt = reuse.tokenizer(SYSTEM + "score me")["input_ids"]
    res = asyncio.run(reuse.generate(prompt, SamplingParams(max_new_tokens=12, seed=3)))
    for start in (len(prompt), len(prompt) - 30, 1):
        before = reuse.prefix_cache_stats()["tokens_reused"]
        got = asyncio.run(reuse.score(prompt + res.output_ids, start))
        full = prompt + res.output_ids
        assert max_diff(got, teacher_forced(reuse.model, full[:start], full[start:])) < TOL
        reused = reuse.prefix_cache_stats()["tokens_reused"] - before
        assert reused <= start - 1 and (start < 16 or reused == start - 1)


def test_weight_update_empties_the_cache(tmp_path):
    new_model, tok = load_model("tiny", dtype="float32", seed=1)
    save_model(new_model, tok, tmp_path / "v1")
    eng = Engine("tiny", dtype="float32", seed=0, prefix_cache_mb=64)
    prompt = tok(SYSTEM + "update")["input_ids"]
    sp = SamplingParams(max_new_tokens=10, temperature=0.0)
    try:
        first = asyncio.run(eng.generate(prompt, sp))
        assert eng.prefix_cache_stats()["entries"] == 1
        assert asyncio.run(eng.update_weights(str(tmp_path / "v1"))) == 1
        stats = eng.prefix_cache_stats()
        assert stats["entries"] == 0 and stats["bytes_used"] == 0
        turn2 = prompt + first.output_ids + tok("more")["input_ids"]
        res = asyncio.run(eng.generate(turn2, sp))
        assert eng.prefix_cache_stats()["hits"] == stats["hits"]  # nothing stale was reused
        assert max_diff(res.logprobs, teacher_forced(new_model, turn2, res.output_ids)) < TOL
    finally:
        eng.close()


def test_budget_holds_under_many_concurrent_episodes():
    budget_mb = 0.5  # tiny's KV is 512 bytes a token: room for ~2 of 128 conversations
    eng = Engine("tiny", dtype="float32", seed=0, max_batch=32, prefix_cache_mb=budget_mb)
    budget = int(budget_mb * 2**20)
    seen: list[int] = []

    async def watch(done: asyncio.Event):
        while not done.is_set():
            seen.append(eng.prefix_cache_stats()["bytes_used"])
            await asyncio.sleep(0.002)

    async def go():
        chat = ChatRenderer(eng.tokenizer)
        done = asyncio.Event()
        watcher = asyncio.create_task(watch(done))
        sp = lambda t: SamplingParams(max_new_tokens=6, seed=t)  # noqa: E731
        eps = await asyncio.gather(*[episode(eng, chat, f"episode {i}", 3, sp) for i in range(128)])
        done.set()
        await watcher
        return eps

    try:
        eps = asyncio.run(go())
        stats = eng.prefix_cache_stats()
        entries = list(eng._prefix._entries.values())  # the worker is idle now
        real = sum(e.ids.untyped_storage().nbytes() + e.kv.untyped_storage().nbytes() for e in entries)
        assert stats["bytes_used"] == real == sum(e.ids.numel() * 8 + e.kv.numel() * 4 for e in entries)
        assert len(entries) == stats["entries"] > 0 and stats["evictions"] > 0 and stats["hits"] > 0
        assert all(e.kv.shape[3] == len(e.ids) and e.kv.device.type == "cpu" for e in entries)
        assert len(seen) > 10 and max(seen) <= budget and stats["bytes_used"] <= budget
        for ep in eps[::16]:  # reuse under eviction pressure stays exact
            for prompt, ids, lps in ep:
                assert max_diff(lps, teacher_forced(eng.model, prompt, ids)) < TOL
    finally:
        eng.close()


def test_prefix_cache_evicts_least_recently_used_and_skips_oversized():
    kv = lambda n: torch.zeros(2, 2, 2, n, 16)  # noqa: E731 - tiny's shape: 512 bytes a token
    cache = PrefixCache((3 * 64 + 16) * (512 + 8))  # three 64-token entries and then some
    a, b, c, d = ([i] * 64 for i in range(4))
    for ids in (a, b, c):
        cache.put(ids, kv(64))
    assert cache.match(a + [9], 65) is not None  # touches a: b is now least recent
    cache.put(d, kv(64))
    assert cache.match(b + [9], 65) is None and cache.match(a + [9], 65).shape[3] == 64
    cache.put(a + [5] * 16, kv(80))  # extends a: replaces it instead of holding both
    assert cache.stats()["entries"] == 3 and cache.match(a + [5] * 20, 90).shape[3] == 80
    cache.put([7] * 400, kv(400))  # larger than the whole budget
    assert cache.match([7] * 401, 401) is None and cache.stats()["bytes_used"] <= cache.budget
    assert cache.match(a + [9], 10) is None  # a match must stay within the limit and be >= MIN_REUSE


@pytest.mark.slow
def test_the_multiturn_benchmark_reuses_each_episodes_history():
    """`bench engine --case multiturn` drives two served engines (with and without reuse) through
    the same seeded episodes: same conversations, and every later turn hits the cache."""
    from experiments.bench.__main__ import run_one

    got = run_one("engine", ["--case", "multiturn", "--model", "tiny", "--dtype", "float32", "--rounds", "1",
                             "--turns", "3", "--concurrency", "2", "--max-new-tokens", "4"])
    assert got["same_conversations"] is True
    assert got["prefix_cache"]["hits"] >= 2 * 2  # turns 2 and 3 of both episodes, per round
    assert got["prefix_cache"]["tokens_reused"] > got["prefix_cache"]["tokens_prefilled"]


def test_default_budget_is_the_served_weights_size():
    """`prefix_cache_mb=None` (the config's `auto`) sizes the cache by the model, not a fixed GB."""
    for dtype in ("float32", "bfloat16"):
        eng = Engine("tiny", dtype=dtype, seed=0)
        try:
            weights = sum(p.numel() * p.element_size() for p in eng.model.parameters())
            assert eng.prefix_cache_stats()["budget_bytes"] == weights
        finally:
            eng.close()


def test_prefix_cache_setting_reads_auto_or_megabytes():
    from experiments.factories import ConfigError, prefix_cache_mb

    assert prefix_cache_mb("auto") is None
    assert prefix_cache_mb(256) == 256.0
    with pytest.raises(ConfigError, match="a number of MB or auto"):
        prefix_cache_mb("lots")
