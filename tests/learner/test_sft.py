"""mode=sft: demonstrations rendered as rollouts, loss on assistant tokens, held-out tasks kept out."""
from __future__ import annotations

import asyncio
import json
import threading

import pytest
import torch

from agent.actors import OracleActor
from agent.chat import ChatRenderer
from agent.policy.models import load_model
from agent.rollout import EpisodeJob, Runner
from envs.base import TaskSplit
from envs.terminal.families.generators import FAMILIES
from learner.loss import nll_loss
from learner.compute_thread import on_learner_thread
from learner.runlog import RunLog
from learner.samples import Sample
from learner.sft import SFT, SFTConfig, longest_turn, mean_nll
from learner.sft_demos import DemoActor, DemoError, demo_sample, read_transcripts, replay
from learner.torch_learner import TorchLearner
from tests.cli import run_cli
from tests.toy_envs import CountdownEnv

TOY = ["env=custom", "env.entry_point=tests.toy_envs:CountdownEnv"]


@pytest.fixture(scope="module")
def renderer() -> ChatRenderer:
    return ChatRenderer(load_model("tiny", dtype="float32")[1])


def _write_jsonl(path, lines: list) -> str:
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return str(path)


def test_loss_mask_covers_exactly_the_assistant_turns(renderer, tmp_path):
    tools = [{"type": "function", "function": {"name": "python", "parameters": {"type": "object"}}}]
    call = {"id": "c1", "type": "function", "function": {"name": "python", "arguments": json.dumps({"code": "print(2)"})}}
    line = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Two?"},
                         {"role": "assistant", "content": "Let me run it.", "tool_calls": [call]},
                         {"role": "tool", "tool_call_id": "c1", "content": "2"},
                         {"role": "assistant", "content": "It is 2."}, {"role": "user", "content": "Thanks"}],
            "tools": tools}
    (t,) = read_transcripts(_write_jsonl(tmp_path / "d.jsonl", [line]))
    s = asyncio.run(replay(renderer, t))
    # The tiny model's template is ChatML and its tokenizer one token per byte: build the
    # expected ids and labels piece by piece, 1 exactly on assistant content and its <|im_end|>.
    system = "Be brief.\n\n" + "# Tools" + renderer.prompt_text([], tools).split("# Tools", 1)[1].split("<|im_end|>")[0]
    first = 'Let me run it.\n<tool_call>\n{"name": "python", "arguments": {"code": "print(2)"}}\n</tool_call>'
    pieces = [("<|im_start|>system\n" + system + "<|im_end|>\n<|im_start|>user\nTwo?<|im_end|>\n<|im_start|>assistant\n", 0),
              (first + "<|im_end|>", 1), ("\n<|im_start|>tool\n2<|im_end|>\n<|im_start|>assistant\n", 0),
              ("It is 2.<|im_end|>", 1)]
    ids, labels = [], []
    for text, label in pieces:
        enc = renderer.encode(text)
        ids += enc
        labels += [label] * len(enc)
    assert s.prompt_ids + s.response_ids == ids
    assert [0] * len(s.prompt_ids) + s.loss_mask == labels
    assert s.trains and len(s.prompt_ids) == len(renderer.encode(pieces[0][0]))


def test_oracle_episode_and_its_transcript_give_the_same_sample(renderer, tmp_path):
    async def episode():
        runner = Runner(CountdownEnv, lambda job: DemoActor(renderer, OracleActor()), n_envs=1, progress=False)
        try:
            (ep,) = await runner.run([EpisodeJob("e", "n3", "g", seed=0)])
        finally:
            runner.close()
        return ep

    ep = asyncio.run(episode())
    assert ep.outcome == 1.0 and [t.action for t in ep.turns] == ["3", "2", "1"]
    # what the rollout saw, as a transcript; the sample the SFT trains on must be the same ids
    last = ep.turns[-1]
    messages = last.messages + [{"role": "assistant", "content": last.action}]
    (t,) = read_transcripts(_write_jsonl(tmp_path / "e.jsonl", [{"messages": messages}]))
    s = demo_sample(ep.turns, {})
    assert asyncio.run(replay(renderer, t)).response_ids == s.response_ids
    assert s.prompt_ids == renderer.render_prompt(ep.turns[0].messages)
    stop = renderer.stop_token_ids
    assert [i for i, m in zip(s.response_ids, s.loss_mask) if m and i in stop] == [stop[0]] * 3  # each turn ends


class ManyCountdowns(CountdownEnv):
    def __init__(self) -> None:
        super().__init__(max_turns=12)

    def task_ids(self) -> list[str]:
        return [f"n{k}" for k in range(2, 12)]


def _sft(tmp_path, epochs: int, split: TaskSplit, **kw) -> tuple[SFT, list[dict]]:
    learner = TorchLearner("tiny", lr=0.01, seed=0, max_tokens_per_micro_batch=4096)
    sft = SFT(learner, ChatRenderer(learner.tokenizer), RunLog(tmp_path), split,
              SFTConfig(n_demos=12, epochs=epochs, batch_size=4, heldout_demos=4, seed=0, max_context=4096), **kw)
    runner = Runner(ManyCountdowns, sft.make_actor, n_envs=2, progress=False)
    try:
        return sft, asyncio.run(sft.run(runner))
    finally:
        runner.close()


def test_sft_lowers_held_out_nll_and_never_trains_on_held_out_tasks(tmp_path):
    split = ManyCountdowns().task_split(4, seed=1234)
    sft, rows = _sft(tmp_path, epochs=4, split=split)
    record = json.loads((tmp_path / "demos.json").read_text())
    trained, held = record["train"]["task_ids"], record["held_out"]["task_ids"]
    assert len(trained) == 12 and set(trained) <= set(split.train) and not set(trained) & set(split.held_out)
    assert sorted(held) == sorted(split.held_out) and record["split"] == split.to_dict()
    nll = [r["heldout_nll"] for r in rows]
    assert [r["epoch"] for r in rows] == [0, 1, 2, 3, 4]
    assert nll[-1] < nll[0] - 1.0, nll  # a random model starts near log(vocab) = 5.6
    assert rows[-1]["optimizer_steps"] == 4 * 3
    saved = TorchLearner(rows[-1]["model_path"], seed=0)
    assert mean_nll(saved, asyncio.run(_held_samples(sft))) == pytest.approx(nll[-1], rel=1e-4)  # the checkpoint is the trained model


async def _held_samples(sft: SFT) -> list[Sample]:
    runner = Runner(ManyCountdowns, sft.make_actor, n_envs=2, progress=False)
    try:
        return (await sft.demonstrations(runner))[1]
    finally:
        runner.close()


def test_demonstrations_with_a_turn_the_sampler_would_cut_are_counted_and_can_be_left_out(tmp_path):
    """A turn longer than sampling.max_new_tokens could never be sampled whole: training on it
    teaches calls that the sampler cuts off and the env cannot parse."""
    turn = lambda text: {"messages": [{"role": "user", "content": "go"}, {"role": "assistant", "content": text}]}
    path = _write_jsonl(tmp_path / "d.jsonl", [turn("short"), turn("x" * 40), turn("also short")])
    learner = TorchLearner("tiny", seed=0)
    split = ManyCountdowns().task_split(4, seed=1234)
    for keep in (True, False):
        sft = SFT(learner, ChatRenderer(learner.tokenizer), RunLog(tmp_path / str(keep)), split,
                  SFTConfig(n_demos=3, epochs=1, batch_size=2, heldout_demos=2, seed=0, max_context=4096,
                            max_new_tokens=20, keep_long_turns=keep), transcripts=read_transcripts(path))
        runner = Runner(ManyCountdowns, sft.make_actor, n_envs=2, progress=False)
        try:
            train, held = asyncio.run(sft.demonstrations(runner))
        finally:
            runner.close()
        record = json.loads((tmp_path / str(keep) / "demos.json").read_text())
        assert record["train"]["turn_too_long"] == 1 and record["train"]["too_long"] == 0
        assert len(held) == 2 and record["held_out"]["turn_too_long"] == 0
        # the tiny model writes a token per byte; a turn ends with <|im_end|>
        assert [longest_turn(s) for s in train] == [6, 41, 11] if keep else [6, 11]
    assert longest_turn(Sample([1], [2, 3, 4, 5, 6], [0.0] * 5, [0.0] * 5, [1, 1, 0, 1, 1])) == 2


def test_demonstrations_come_only_from_tasks_the_oracle_can_act_out(tmp_path):
    split = ManyCountdowns().task_split(4, seed=1234)
    can = TaskSplit(split.train[:2], split.held_out[:1])  # e.g. GUI pages of families with a solver
    learner = TorchLearner("tiny", seed=0)
    sft = SFT(learner, ChatRenderer(learner.tokenizer), RunLog(tmp_path), split,
              SFTConfig(n_demos=6, epochs=1, batch_size=2, heldout_demos=4, seed=0, max_context=4096), demonstrable=can)
    runner = Runner(ManyCountdowns, sft.make_actor, n_envs=2, progress=False)
    try:
        asyncio.run(sft.demonstrations(runner))
    finally:
        runner.close()
    record = json.loads((tmp_path / "demos.json").read_text())
    assert set(record["train"]["task_ids"]) <= set(can.train) and len(record["train"]["task_ids"]) == 6
    assert record["held_out"]["task_ids"] == can.held_out and record["split"] == split.to_dict()


class ThreadNoting(TorchLearner):
    """The tiny learner, noting which thread runs each of its steps and log-prob passes."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.threads: set[int] = set()

    def sft_step(self, samples: list[Sample]) -> dict[str, float]:
        self.threads.add(threading.get_ident())
        return super().sft_step(samples)

    def logprobs(self, samples: list[Sample]) -> list[list[float]]:
        self.threads.add(threading.get_ident())
        return super().logprobs(samples)


def test_sft_runs_all_its_torch_work_on_the_one_learner_thread(tmp_path):
    """Every step on one thread, so one malloc arena holds what steps free (on asyncio's pool
    each worker kept a step's activations: 15.9 GB against 7.0 GB for a 135M model)."""
    learner = ThreadNoting("tiny", lr=0.01, seed=0)
    split = ManyCountdowns().task_split(4, seed=1234)
    sft = SFT(learner, ChatRenderer(learner.tokenizer), RunLog(tmp_path), split,
              SFTConfig(n_demos=12, epochs=2, batch_size=2, heldout_demos=4, seed=0, max_context=4096))
    runner = Runner(ManyCountdowns, sft.make_actor, n_envs=2, progress=False)
    try:
        asyncio.run(sft.run(runner))
    finally:
        runner.close()
    assert len(learner.threads) == 1 and threading.get_ident() not in learner.threads

    async def names() -> set[str]:  # concurrent calls too: they queue for the one thread
        return set(await asyncio.gather(*[on_learner_thread(lambda: threading.current_thread().name) for _ in range(8)]))
    assert len(asyncio.run(names())) == 1


def test_sft_step_is_exact_under_micro_batching():
    samples = [Sample([1, 2, 3], [4, 5, 6, 7], [0.0] * 4, [0.0] * 4, [1, 0, 1, 1]),
               Sample([9, 8], [7, 6], [0.0] * 2, [0.0] * 2, [1, 1]),
               Sample([5], [3, 3, 3], [0.0] * 3, [0.0] * 3, [0, 1, 0])]
    a = TorchLearner("tiny", seed=0, max_tokens_per_micro_batch=1, max_grad_norm=None)  # one sample per micro-batch
    b = TorchLearner("tiny", seed=0, max_tokens_per_micro_batch=4096, max_grad_norm=None)
    for x in (a, b):  # plain SGD: the update is the gradient itself (Adam would hide its scale)
        x.optimizer = torch.optim.SGD(x.model.parameters(), lr=1.0)
    expected = mean_nll(a, samples)  # token mean per sample, then mean over samples
    ma, mb = a.sft_step(samples), b.sft_step(samples)
    assert ma["micro_batches"] == 3 and mb["micro_batches"] == 1
    assert ma["loss"] == pytest.approx(expected, rel=1e-5) and mb["loss"] == pytest.approx(expected, rel=1e-5)
    for pa, pb in zip(a.model.parameters(), b.model.parameters()):
        torch.testing.assert_close(pa, pb, rtol=1e-5, atol=1e-6)
    loss, stats = nll_loss(torch.tensor([-1.0, -3.0, -2.0]), torch.tensor([0, 0, 1]), n_samples=4)
    assert float(loss) == pytest.approx((2.0 + 2.0) / 4) and stats["nll"] == pytest.approx(2.0)


def test_a_bad_jsonl_line_is_one_error_naming_it(tmp_path):
    good = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    path = _write_jsonl(tmp_path / "d.jsonl", [good, '{"messages": [', good])
    with pytest.raises(DemoError, match=r"d\.jsonl:2: "):
        read_transcripts(path)
    assert len(read_transcripts(path, limit=1)) == 1  # lines past the limit are not read
    twice = {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                          {"role": "tool", "content": "c"}, {"role": "user", "content": "d"}, {"role": "assistant", "content": "e"}]}
    with pytest.raises(DemoError, match=r":1: messages 2 and 3 are both non-assistant"):
        read_transcripts(_write_jsonl(tmp_path / "t.jsonl", [twice]))
    p = run_cli(*TOY, "mode=sft", "model=tiny", f"mode.demos={path}", f"run_dir={tmp_path}/r")
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith(f"error: {path}:2: ")


def test_sft_is_torch_only(tmp_path):
    p = run_cli(*TOY, "mode=sft", "model=tiny", "learner=megatron", f"run_dir={tmp_path}/r")
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines()[-1] == "error: mode=sft trains with the torch learner only; use learner=torch (not learner=megatron)"


def test_jsonl_transcripts_of_held_out_tasks_are_refused(tmp_path):
    held = CountdownEnv().task_split(2, seed=1234).held_out
    line = {"task_id": held[0], "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}
    path = _write_jsonl(tmp_path / "d.jsonl", [line])
    p = run_cli(*TOY, "mode=sft", "model=tiny", "eval.n_tasks=2", f"mode.demos={path}", f"run_dir={tmp_path}/r")
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert f"held-out tasks ['{held[0]}'] must not be trained on" in p.stderr


@pytest.mark.slow
def test_sft_run_end_to_end_then_a_run_from_its_checkpoint(tmp_path):
    p = run_cli(*TOY, "mode=sft", "model=tiny", "eval.n_tasks=2", "mode.n_demos=8", "mode.epochs=3", "mode.batch_size=4",
                "mode.lr=0.01", f"run_dir={tmp_path}/sft")
    assert p.returncode == 0, p.stderr[-3000:]
    model = tmp_path / "sft" / "checkpoints" / "latest" / "model"
    assert p.stdout.strip().splitlines()[-1].endswith(f"model=local model.path={model}")
    rows = [json.loads(x) for x in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["heldout_nll"] < rows[0]["heldout_nll"]
    p = run_cli(*TOY, "mode=outcome", "model=local", f"model.path={model}", "steps=1", "tasks_per_step=2", "group_size=2",
                "sampling.max_new_tokens=4", f"run_dir={tmp_path}/rl")
    assert p.returncode == 0, p.stderr[-3000:]
    assert (tmp_path / "rl" / "checkpoints" / "latest" / "model" / "model.safetensors").is_file()


@pytest.mark.slow
def test_warm_start_runs_sft_first_and_rl_trains_on_from_its_checkpoint(tmp_path):
    from safetensors.torch import load_file

    run = tmp_path / "run"
    args = [*TOY, "mode=outcome", "model=tiny", "warm_start=sft", "warm_start.n_demos=8", "warm_start.epochs=2",
            "warm_start.batch_size=4", "warm_start.lr=0.01", "eval.n_tasks=2", "eval.every=1", "steps=1",
            "tasks_per_step=2", "group_size=2", "sampling.max_new_tokens=4", "learner.lr=0.0", f"run_dir={run}"]
    p = run_cli(*args)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = [json.loads(x) for x in (run / "warm_start" / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [0, 1, 2] and rows[-1]["heldout_nll"] < rows[0]["heldout_nll"]
    assert rows[0]["phase"] == "before warm start" and "heldout/pass@1_lo" in rows[0]  # the base model, held out
    warm = load_file(run / "warm_start" / "checkpoints" / "latest" / "model" / "model.safetensors")
    after_rl = load_file(run / "checkpoints" / "latest" / "model" / "model.safetensors")  # lr 0: RL leaves it as it was
    assert all(torch.equal(warm[k], after_rl[k]) for k in warm)
    base = TorchLearner("tiny", seed=0).model.state_dict()
    assert any(not torch.equal(base[k], warm[k]) for k in warm)  # and that is not the base model
    assert "  before warm start: " in p.stdout + p.stderr and "start (before warm start) " in p.stdout + p.stderr
    p = run_cli(*args, "resume=true")  # a resumed job reuses the finished warm start
    assert p.returncode == 0 and "warm start: reusing" in p.stdout + p.stderr, p.stderr[-3000:]
    p = run_cli(*TOY, "mode=sft", "model=tiny", "warm_start=sft", f"run_dir={tmp_path}/bad")
    assert p.returncode != 0 and p.stderr.strip().splitlines()[-1] == (
        "error: warm_start=sft goes with an RL mode; mode=sft is the warm start on its own")


@pytest.mark.slow
def test_a_cached_warm_start_is_reused_by_a_run_with_the_same_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENCLAW_CACHE", str(tmp_path / "cache"))  # the runs below inherit it
    args = [*TOY, "mode=outcome", "model=tiny", "warm_start=sft", "warm_start.cache=true", "warm_start.n_demos=4",
            "warm_start.epochs=1", "warm_start.batch_size=4", "eval.n_tasks=2", "steps=1", "tasks_per_step=2",
            "group_size=2", "sampling.max_new_tokens=4"]
    p = run_cli(*args, f"run_dir={tmp_path}/a")
    assert p.returncode == 0 and "warm start: cached as" in p.stdout + p.stderr, p.stderr[-3000:]
    (cached,) = (tmp_path / "cache" / "warm_starts").iterdir()  # stored whole: no half-copied folder beside it
    assert cached.name.startswith("custom-") and (cached / "model" / "model.safetensors").is_file()
    p = run_cli(*args, f"run_dir={tmp_path}/b")
    out = p.stdout + p.stderr
    assert p.returncode == 0 and "warm start: reusing the cached one" in out, p.stderr[-3000:]
    assert not (tmp_path / "b" / "warm_start" / "demos.json").exists()  # no demonstrations, no SFT
    assert (tmp_path / "b" / "warm_start" / "cached_from").read_text().strip() == str(cached)
    assert "  before warm start: " in out  # the cached figures of the starting model lead the curve
    p = run_cli(*args, "warm_start.epochs=2", f"run_dir={tmp_path}/c")  # other settings: a warm start of their own
    assert p.returncode == 0 and "warm start: cached as" in p.stdout + p.stderr, p.stderr[-3000:]
    assert len(list((tmp_path / "cache" / "warm_starts").iterdir())) == 2


@pytest.mark.slow
def test_the_quickstart_job_composes_and_ends_with_its_held_out_curve(tmp_path):
    # README command 1 with the tiny model and one update: its parts as they are (reasoning-gym,
    # the warm start, the outcome update, the held-out curve); the real job's figures are in docs/results.md
    p = run_cli("+experiment=quickstart", "model=tiny", "steps=1", "warm_start.n_demos=8", "warm_start.epochs=1",
                "eval.n_tasks=8", f"run_dir={tmp_path}/q", timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    out = p.stdout + p.stderr
    assert "held-out pass@1 (95% CI) after N updates:" in out and "  before warm start: " in out
    assert "start (before warm start) " in out
    cfg = (tmp_path / "q" / "config.yaml").read_text()
    assert "name: reasoning" in cfg and "name: outcome" in cfg
    assert "malloc_mmap_threshold_mb: 8" in cfg  # the job's allocator setting that keeps it under 3 GiB
    assert (tmp_path / "q" / "checkpoints" / "latest" / "model" / "model.safetensors").is_file()  # the final weights


@pytest.mark.slow
def test_learn_toolcall_warm_starts_then_reports_rls_own_rise(tmp_path):
    # The learn-toolcall recipe with the tiny model and one update: oracle demonstrations of the
    # python tool, SFT, an outcome update, and the curve's line on RL's own rise from after 0.
    p = run_cli("+experiment=learn-toolcall", "model=tiny", "steps=1", "warm_start.n_demos=4", "warm_start.epochs=1",
                "eval.n_tasks=4", "n_envs=4", "tasks_per_step=2", "group_size=2", "sampling.max_new_tokens=8",
                f"run_dir={tmp_path}/t", timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    out = p.stdout + p.stderr
    assert "RL's own: warm-started (after 0) " in out and "peak RSS " in out
    demos = json.loads((tmp_path / "t" / "warm_start" / "demos.json").read_text())
    assert len(demos["train"]["task_ids"]) == 4 and not set(demos["train"]["task_ids"]) & set(demos["split"]["held_out"])
    cfg = (tmp_path / "t" / "config.yaml").read_text()
    assert "name: toolcall" in cfg and "name: outcome" in cfg and "max_turns: 3" in cfg


@pytest.mark.slow
@pytest.mark.bwrap
def test_learn_terminal_warm_starts_on_generated_families_then_reports_rls_own_rise(tmp_path):
    # The learn-terminal recipe with the tiny model and one update: oracle demonstrations of
    # generated shell tasks on bubblewrap, SFT, an outcome update, and RL's own rise from after 0.
    p = run_cli("+experiment=learn-terminal", "model=tiny", "steps=1", "env.tasks_per_family=2", "warm_start.n_demos=4",
                "warm_start.epochs=1", "warm_start.heldout_demos=2", "eval.n_tasks=4", "n_envs=4", "tasks_per_step=2",
                "group_size=2", "sampling.max_new_tokens=8", f"run_dir={tmp_path}/t", timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    out = p.stdout + p.stderr
    assert "start (after 0) " in out and "before warm start" not in out  # the curve starts at the warm-started policy
    demos = json.loads((tmp_path / "t" / "warm_start" / "demos.json").read_text())
    train, held_out = demos["train"]["task_ids"], demos["split"]["held_out"]
    assert len(train) == 4 and not set(train) & set(held_out)  # every oracle episode passed its tests
    assert len(held_out) == 4 and all(t.rsplit("-", 1)[0] in FAMILIES for t in held_out)
    cfg = (tmp_path / "t" / "config.yaml").read_text()
    assert "name: terminal" in cfg and "name: outcome" in cfg and "families: all" in cfg and "name: bwrap" in cfg
