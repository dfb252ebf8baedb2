"""The learner learns: end-to-end runs of `experiments.run` with the tiny model (slow)."""
from __future__ import annotations

import json

import pytest

from tests.cli import run_cli

COMMON = ["env=custom", "env.entry_point=tests.toy_envs:FirstCharEnv", "model=tiny", "n_envs=8",
          "tasks_per_step=2", "group_size=8", "sampling.max_new_tokens=2", "learner.lr=0.01", "learner.max_staleness=0"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", [["mode=outcome"], ["mode=binary", "judge=rules"]], ids=["outcome", "binary"])
def test_mode_raises_mean_reward_to_0_8(tmp_path, mode):
    steps = 35
    p = run_cli(*COMMON, *mode, f"steps={steps}", f"run_dir={tmp_path}", timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    outcomes = [r["outcome_mean"] for r in rows]
    assert len(rows) == steps
    assert outcomes[0] < 0.0, outcomes  # a random model mostly misses
    assert max(outcomes) >= 0.8, outcomes
    assert rows[-1]["policy_version"] >= 1
    assert all(r["status_counts"].get("infra_error", 0) == 0 for r in rows)
    assert not (tmp_path / "weights").exists()  # policy=local: each update reached the engine as tensors


@pytest.mark.slow
def test_a_bf16_engine_takes_each_update_as_a_copy(tmp_path):
    """policy=local with an engine in another dtype than the float32 learner: no weights shared,
    each update copied in as tensors (no folder), and later turns are sampled by later versions."""
    p = run_cli(*COMMON, "mode=outcome", "model.dtype=bfloat16", "steps=3", f"run_dir={tmp_path}", timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    turns = [json.loads(line) for line in (tmp_path / "turns.jsonl").read_text().splitlines()]
    assert [r["policy_version"] for r in rows] == [1, 2, 3]
    assert max(t["policy_version"] for t in turns) >= 1
    assert not (tmp_path / "weights").exists()


@pytest.mark.slow
def test_turn_records_carry_the_scores_and_advantages_they_were_trained_on(tmp_path):
    """Scoring runs beside the rollouts (max_staleness=1 also overlaps the next step's): every
    turn in turns.jsonl carries its judge votes and, where it made a sample, the advantage the
    update used (binary: the PRM score itself)."""
    p = run_cli(*COMMON[:-1], "learner.max_staleness=1", "mode=binary", "judge=rules", "steps=2",
                f"run_dir={tmp_path}", timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    turns = [json.loads(line) for line in (tmp_path / "turns.jsonl").read_text().splitlines()]
    assert len(turns) == 2 * 2 * 8
    for t in turns:
        verdict = t["next_state"]["data"]["verdict"]
        assert t["prm"]["votes"] == [verdict] and t["prm"]["score"] == verdict
        assert t["meta"]["advantage"]["mean"] == verdict


@pytest.mark.slow
def test_multi_turn_records_keep_their_outcome_beside_scores_made_mid_episode(tmp_path):
    """A turn is scored while its episode goes on; its record still carries the episode's
    outcome (integrated trains on outcome and votes together)."""
    p = run_cli("env=custom", "env.entry_point=tests.toy_envs:ChatterEnv", "env.max_turns=3", "model=tiny", "n_envs=4", "tasks_per_step=2",
                "group_size=2", "sampling.max_new_tokens=2", "mode=integrated", "judge=rules", "steps=1",
                f"run_dir={tmp_path}", timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    turns = [json.loads(line) for line in (tmp_path / "turns.jsonl").read_text().splitlines()]
    assert len(turns) == 4 * 3, "four episodes of three turns"
    for t in turns:
        assert t["outcome"] in (-1.0, 1.0) and t["prm"]["votes"] == [t["next_state"]["data"]["verdict"]]


@pytest.mark.slow
def test_opd_lowers_kl_to_the_hint_conditioned_teacher(tmp_path):
    """On a fixed batch of failed turns with hints, a few OPD updates bring the student closer
    to the frozen teacher under the hint-augmented prompt. The KL is the k2 estimate
    0.5 (log s(y) - log t(y))^2 over the batch's sampled tokens (what OPD's per-token
    advantage acts on). A random tiny model is near uniform and barely reacts to a hint, so
    the teacher is a differently seeded tiny model with a sharpened output layer: the test is
    about the direction OPD moves the student, which needs a teacher with an opinion."""
    import asyncio

    import torch

    from agent.actors import ModelActor
    from agent.chat import ChatRenderer
    from agent.policy.base import SamplingParams
    from agent.policy.engine import Engine
    from agent.policy.models import load_model, save_model
    from agent.rollout import EpisodeJob, Runner
    from learner.advantages import build_samples
    from learner.judges import RulesJudge
    from learner.prompts import messages_with_hint
    from learner.scorer import NextStateScorer
    from learner.torch_learner import TorchLearner
    from tests.toy_envs import FirstCharEnv

    teacher, tok = load_model("tiny", dtype="float32", seed=1)
    with torch.no_grad():
        teacher.get_output_embeddings().weight.mul_(3.0)
    save_model(teacher, tok, tmp_path / "teacher")
    teacher.eval()
    engine = Engine("tiny", dtype="float32", seed=0)  # the student's sampler
    frozen = Engine(str(tmp_path / "teacher"), dtype="float32")  # the frozen teacher
    renderer = ChatRenderer(engine.tokenizer)
    try:
        async def collect():
            runner = Runner(FirstCharEnv, lambda j: ModelActor(engine, renderer, SamplingParams(max_new_tokens=8, seed=j.seed), 4096),
                            n_envs=4, progress=False)
            try:
                eps = await runner.run([EpisodeJob(f"e{i}", "say", "g", seed=i) for i in range(24)])
            finally:
                runner.close()
            turns = [t for e in eps for t in e.turns if t.outcome == -1.0]
            scorer = NextStateScorer(RulesJudge(), frozen, renderer, n_votes=1, mode="opd")
            return await scorer.score_many(turns)

        turns = asyncio.run(collect())
    finally:
        engine.close()
        frozen.close()
    samples, stats = build_samples(turns, "opd")
    assert len(samples) >= 8 and stats["opd_accept_rate"] == 1.0

    def response_logits(model, prompt_ids, response_ids):
        ids = torch.tensor([prompt_ids + response_ids])
        with torch.no_grad():
            logits = model(ids).logits[0]
        n = len(response_ids)
        return torch.log_softmax(logits[len(prompt_ids) - 1: len(prompt_ids) - 1 + n].float(), -1)

    teacher_lp = [response_logits(teacher, renderer.render_prompt(messages_with_hint(t.messages, t.opd.hint), t.tools or None), t.response_ids) for t in turns]

    learner = TorchLearner("tiny", lr=1e-3, seed=0)

    def kl() -> float:
        total, n = 0.0, 0
        for t, tlp in zip(turns, teacher_lp):
            slp = response_logits(learner.model, t.prompt_ids, t.response_ids)
            y = torch.tensor(t.response_ids)[:, None]
            d = slp.gather(1, y)[:, 0] - tlp.gather(1, y)[:, 0]
            total += float((0.5 * d**2).sum())
            n += len(t.response_ids)
        return total / n

    before = kl()
    for _ in range(4):
        learner.train_step(samples)
    after = kl()
    assert after < 0.6 * before, (before, after)


@pytest.mark.slow
@pytest.mark.parametrize("persona,steps", [("one_word_student", 6), ("wordy_student", 12)], ids=["one-word", "wordy"])
def test_combine_raises_personalization_of_a_one_preference_persona(tmp_path, persona, steps):
    """chat_sim with a scripted one-preference student, tiny model. The two personas want
    opposite things (<= 1 word, >= 3 words), so a rise in both comes from the users' verdicts
    and hints, not from training merely making the replies degenerate."""
    p = run_cli("env=chat_sim", f"env.persona=[tests/data/{persona}.yaml]", "env.user=scripted", "env.max_turns=2",
                "mode=combine", "judge=rules", "model=tiny", "n_envs=8", "tasks_per_step=8", "eval.n_tasks=32", "eval.every=1",
                "sampling.max_new_tokens=12", "learner.lr=0.01", "learner.max_staleness=0", f"steps={steps}",
                f"run_dir={tmp_path}", timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    scores = [r["personalization"] for r in rows]  # row k: greedy first replies of the policy after k updates
    assert len(scores) == steps + 1 and rows[-1]["eval_only"]
    assert scores[0] <= 0.75, scores
    assert scores[-1] >= scores[0] + 0.2 and min(scores[-3:]) > scores[0], scores
    for r in rows:  # each score with its bootstrap interval and the per-task scores it is the mean of
        per_task = [s for (s,) in r["personalization/scores"].values()]
        assert len(per_task) == r["personalization_n"] == 32 and sum(per_task) / 32 == pytest.approx(r["personalization"])
        assert r["personalization_lo"] <= r["personalization"] <= r["personalization_hi"]
    assert all(r["status_counts"].get("infra_error", 0) == 0 for r in rows[:-1])
