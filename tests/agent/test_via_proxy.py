"""`env.via_proxy=true`: simulated users talk to a real tiny-model engine through the live-user
proxy over HTTP (the official openai client); the turns that reach training are the proxy's
records, joined with what only the simulator knows."""
from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import pytest

from agent.policy.base import SamplingParams
from agent.policy.engine import Engine
from agent.policy.server import serve
from agent.proxy import Proxy
from agent.rollout import EpisodeJob, Runner
from agent.turn import Turn
from agent.via_proxy import ProxyActor, ProxyLink, ProxyRollouts, ProxyTurns, new_api_key
from envs.chat_sim import ChatSimEnv
from tests.cli import REPO, run_cli

PERSONA = REPO / "tests" / "data" / "one_word_student.yaml"


def records(directory: Path) -> list[Turn]:
    return [Turn.from_json(json.loads(line)) for f in sorted(directory.glob("turns-v*.jsonl"))
            for line in f.read_text().splitlines()]


def test_episodes_through_the_proxy_train_on_its_records(tmp_path):
    engine = Engine("tiny", dtype="float32", seed=0, max_batch=8)
    server = serve(engine)
    key = new_api_key()
    joins = ProxyTurns()
    proxy = Proxy(server.url, engine.tokenizer, "tiny", key, record_dir=tmp_path, policy_api_key=server.api_key,
                  on_turn=joins.from_proxy).start()
    handed: list[Turn] = []

    async def go():
        link = ProxyLink(proxy.url, key, "tiny", timeout_s=120, max_connections=8)
        sampling = SamplingParams(max_new_tokens=8, temperature=1.0)
        runner = Runner(lambda: ChatSimEnv(persona=PERSONA, max_turns=3),
                        lambda job: ProxyActor(link, job.episode_id, dataclasses.replace(sampling, seed=job.seed)),
                        n_envs=3, step_timeout_s=120, progress=False)
        rollouts = ProxyRollouts(runner, joins)
        ids = await rollouts.task_ids()
        jobs = [EpisodeJob(f"ep{i}", ids[i], f"g{i}", seed=i) for i in range(3)]
        try:
            return jobs, await rollouts.run(jobs, on_turn=handed.append)
        finally:
            rollouts.close()
            await link.aclose()

    try:
        jobs, episodes = asyncio.run(go())
    finally:
        proxy.stop()
        server.stop()
        engine.close()

    recorded = {(t.meta["session_id"], t.step_index): t for t in records(tmp_path)}
    turns = [t for ep in episodes for t in ep.turns]
    assert turns and len(turns) == len(recorded) == len(handed)
    for job, ep in zip(jobs, episodes):
        assert ep.status == "ok" and [t.step_index for t in ep.turns] == list(range(len(ep.turns)))
        for t in ep.turns:
            rec = recorded[(job.episode_id, t.step_index)]
            # the sampler's exact ids and log-probs, as the proxy recorded them
            assert t.response_ids == rec.response_ids and t.prompt_ids == rec.prompt_ids and t.response_ids
            assert t.rollout_logprobs == rec.rollout_logprobs and len(t.rollout_logprobs) == len(t.response_ids)
            # the simulator's ids and its verdict joined to the proxy's words
            assert (t.episode_id, t.task_id, t.group_id) == (job.episode_id, job.task_id, job.group_id)
            assert t.next_state.content == rec.next_state.content != ""
            assert t.next_state.kind == "user_reply" and t.next_state.data["verdict"] in (1, -1)
            assert t.outcome == ep.outcome
        last = ep.turns[-1]
        assert last.episode_done and not any(t.episode_done for t in ep.turns[:-1])
        # the user's closing words reached the proxy through /v1/sessions/{id}/end
        assert recorded[(job.episode_id, last.step_index)].meta["closed"] == "session_end"
        assert {recorded[(job.episode_id, t.step_index)].meta["closed"] for t in ep.turns[:-1]} <= {"next_request"}


@pytest.mark.slow
def test_cli_run_via_proxy_trains_on_proxy_records(tmp_path):
    run_dir = tmp_path / "run"
    p = run_cli("env=chat_sim", f"env.persona=[{PERSONA}]", "env.max_turns=2", "env.via_proxy=true", "mode=combine",
                "model=tiny", "steps=1", "tasks_per_step=2", "n_envs=2", "eval.n_tasks=2", "sampling.max_new_tokens=8",
                f"run_dir={run_dir}", timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["samples"]["samples"] > 0 and "personalization" in rows[0]
    trained = [json.loads(line) for line in (run_dir / "turns.jsonl").read_text().splitlines()]
    recorded = {(t.meta["session_id"], t.step_index): t for t in records(run_dir / "proxy")}
    assert len(trained) == len(recorded) > 0
    for t in trained:
        rec = recorded[(t["episode_id"], t["step_index"])]
        assert t["response_ids"] == rec.response_ids and t["next_state"]["content"] == rec.next_state.content
        assert t["prm"]["votes"], "the scorer saw the proxy's turn"
