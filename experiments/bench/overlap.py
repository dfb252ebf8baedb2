"""`python -m experiments.bench overlap`: rollout throughput with the next-state scorer on
against the scorer off, in the same run (goal: >= 0.85x).

Episodes are chat_sim sessions of 3 turns. The policy is one embedded engine over HTTP; the judge is a second embedded engine serving
/v1/chat/completions (an LLM judge with m votes per turn, scored as each turn completes, as in
training). Off and on alternate round by round, so other load hits both alike; the figure is
the median of the per-round ratios of turns per second. Scoring that finishes after the
rollouts is not waited for: the question is whether judging slows generation down.
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from agent.actors import ModelActor
from agent.chat import ChatRenderer
from agent.policy.base import SamplingParams
from agent.policy.chat_client import ChatClient
from agent.policy.engine import Engine
from agent.policy.server import serve
from agent.policy.sglang_client import SGLangClient
from agent.rollout import EpisodeJob, Runner
from envs.chat_sim.env import ChatSimEnv  # multi-turn (a scripted user), no sandbox needed
from learner.judges import LLMJudge
from learner.scorer import NextStateScorer


async def _round(url: str, key: str, renderer: ChatRenderer, scorer: NextStateScorer | None, n: int, tokens: int,
                 seed: int) -> float:
    client = SGLangClient(url, api_key=key)
    pending: set[asyncio.Task] = set()

    def on_turn(turn: Any) -> None:
        if scorer is not None:
            t = asyncio.create_task(scorer.score(turn))
            pending.add(t)
            t.add_done_callback(pending.discard)

    runner = Runner(lambda: ChatSimEnv(max_turns=3), lambda j: ModelActor(
        client, renderer, SamplingParams(max_new_tokens=tokens, seed=j.seed), 4096), n_envs=n, progress=False)
    try:
        t0 = time.perf_counter()
        ids = (await runner.task_ids())[:n]
        eps = await runner.run([EpisodeJob(f"e{i}", t, f"g{i}", seed=seed + i) for i, t in enumerate(ids)], on_turn=on_turn)
        elapsed = time.perf_counter() - t0
        for t in pending:  # leftover judging is not what is measured
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    finally:
        runner.close()
        await client.aclose()
    return sum(len(e.turns) for e in eps) / elapsed


def main(argv: list[str]) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="python -m experiments.bench overlap")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--envs", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--votes", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)

    policy, judge = Engine(args.model, seed=0), Engine(args.model, seed=1)
    p_srv, j_srv = serve(policy), serve(judge)
    renderer = ChatRenderer(policy.tokenizer)

    async def go() -> dict[str, Any]:
        chat = ChatClient(j_srv.url, model=args.model, api_key=j_srv.api_key)
        scorer = NextStateScorer(LLMJudge(chat, n_votes=args.votes, max_tokens=args.tokens), None, renderer, n_votes=args.votes, mode="binary")
        off, on = [], []
        try:
            await _round(p_srv.url, p_srv.api_key, renderer, None, args.envs, args.tokens, 0)  # warm-up
            for r in range(args.rounds):
                off.append(await _round(p_srv.url, p_srv.api_key, renderer, None, args.envs, args.tokens, 1000 * r))
                on.append(await _round(p_srv.url, p_srv.api_key, renderer, scorer, args.envs, args.tokens, 1000 * r))
        finally:
            await chat.aclose()
        ratios = [b / a for a, b in zip(off, on)]
        return {"model": args.model, "envs": args.envs, "votes": args.votes,
                "turns_per_s_off": statistics.median(off), "turns_per_s_on": statistics.median(on),
                "ratio_on_vs_off": statistics.median(ratios), "goal": 0.85,
                "goal_met": statistics.median(ratios) >= 0.85}

    try:
        return asyncio.run(go())
    finally:
        p_srv.stop()
        j_srv.stop()
        policy.close()
        judge.close()
