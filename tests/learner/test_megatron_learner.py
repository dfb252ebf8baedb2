"""The megatron-core learner against the torch learner and the HF models, on CPU with gloo.

Tolerances (float32, what is exact is set out in tests/exactness.py): log-probs within 1e-4 of
the HF model's; loss within 1e-6 and gradients within the summation-order tolerance of the torch
learner's on the same batch and weights; weights after an AdamW step differ from the torch
learner's by exactly the gap the two gradients imply (Adam divides by |g| + eps, so a fixed
tolerance on weights fails where gradients are near zero).
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

from agent.policy.models import byte_tokenizer, load_model, save_model, tiny_model
from learner.mcore import convert
from learner.samples import Sample
from learner.torch_learner import TorchLearner
from tests.cli import REPO, run_cli
from tests.exactness import assert_adam_step_matches, assert_grads_close
from tests.learner.test_learner_torch import batch, full_forward_logprobs, step_with_grads

LR = 1e-3


def _small(kind: str) -> torch.nn.Module:
    """A random Qwen2 (qkv bias, untied, odd vocabulary), Qwen3 (query/key norms, head_dim != hidden / heads)
    or Llama with tied embeddings, of the tiny model's size."""
    common = dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    torch.manual_seed(1)
    if kind == "qwen2":
        return Qwen2ForCausalLM(Qwen2Config(vocab_size=301, num_hidden_layers=2, tie_word_embeddings=False, **common))
    if kind == "qwen3":
        return Qwen3ForCausalLM(Qwen3Config(vocab_size=300, num_hidden_layers=2, tie_word_embeddings=False, head_dim=32, **common))
    return LlamaForCausalLM(LlamaConfig(vocab_size=260, num_hidden_layers=2, tie_word_embeddings=True, **common))


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    """Model names/paths: tiny (Llama, untied), qwen2, qwen3 and tied (Llama) from `_small`."""
    root = tmp_path_factory.mktemp("models")
    out = {"tiny": "tiny"}
    for kind in ("qwen2", "qwen3", "tied"):
        model = _small(kind)
        with torch.no_grad():  # HF inits biases to zero and norms to one; make them count
            for name, p in model.named_parameters():
                if name.endswith("bias"):
                    p.normal_(0.0, 0.5)
                elif "norm" in name:
                    p.normal_(1.0, 0.3)
        save_model(model, byte_tokenizer(), root / kind)
        out[kind] = str(root / kind)
    return out


def samples_for(ref: TorchLearner, seed: int = 0) -> list[Sample]:
    """A batch whose old log-probs are near the current ones (ratios != 1, some clipped), plus a masked sample."""
    samples = batch(seed)
    g = torch.Generator().manual_seed(seed)
    for s, lps in zip(samples, ref.logprobs(samples)):
        it = iter(lps)
        s.rollout_logprobs = [next(it) + float(torch.randn((), generator=g)) * 0.3 if m else -5.0 for m in s.loss_mask]
    return samples + [Sample([1, 2], [3, 4], [0.0, 0.0], [1.0, 1.0], [0, 0])]


def megatron_step(learner, samples: list[Sample]) -> tuple[dict, dict | None]:
    """(metrics, whole HF-layout gradients on rank 0) of one megatron-learner step."""
    grads = {}
    handle = learner.optimizer.register_step_pre_hook(lambda *_: grads.update(g=learner.hf_state_dict(grads=True)))
    metrics = learner.train_step(samples)
    handle.remove()
    return metrics, grads["g"]


def assert_step_matches(m_metrics: dict, m_grads: dict, t_metrics: dict, t_grads: dict) -> None:
    assert m_metrics["loss"] == pytest.approx(t_metrics["loss"], abs=1e-6)
    assert m_metrics["grad_norm"] == pytest.approx(t_metrics["grad_norm"], rel=1e-5)
    for key in ("clip_frac", "entropy", "approx_kl", "ratio_mean", "loss_tokens", "tokens", "samples"):
        assert m_metrics[key] == pytest.approx(t_metrics[key], rel=1e-5, abs=1e-7), key
    assert t_metrics["clip_frac"] > 0  # the batch exercises the clipped branch
    assert_grads_close(m_grads, t_grads)


def weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().cpu().clone() for name, p in model.named_parameters()}  # where hf_state_dict() puts them


def adam_state(ref: TorchLearner) -> tuple[int, dict[str, tuple[torch.Tensor, torch.Tensor]] | None]:
    """(the coming step's number, each parameter's moments now) of the torch learner's AdamW."""
    moments = {}
    for name, p in ref.model.named_parameters():
        st = ref.optimizer.state.get(p)
        if not st:
            return 1, None
        moments[name] = (st["exp_avg"].clone(), st["exp_avg_sq"].clone())
        step = int(st["step"]) + 1
    return step, moments


def implied_grads(learner: TorchLearner) -> dict[str, torch.Tensor]:
    """The gradient of a one-step AdamW's moments: exp_avg / (1 - b1), and its magnitude again
    from sqrt(exp_avg_sq / (1 - b2)) with exp_avg's sign (one tensor of each per parameter)."""
    b1, b2 = learner.optimizer.param_groups[0]["betas"]
    out = {}
    for name, p in learner.model.named_parameters():
        st = learner.optimizer.state[p]
        assert int(st["step"]) == 1
        g = st["exp_avg"] / (1 - b1)
        out[name] = g
        out[name + ":sq"] = torch.sign(g) * (st["exp_avg_sq"] / (1 - b2)).sqrt()
    return out


def assert_same_next_step(learner, ref: TorchLearner, samples: list[Sample]) -> None:
    """Same weights and moments now; one more step of each gives the same loss and gradients, and
    weights apart by exactly what the gradients' difference implies."""
    hf = learner.hf_state_dict()
    assert all(torch.equal(hf[n], w) for n, w in weights(ref.model).items())
    step, moments = adam_state(ref)
    t_metrics, t_grads = step_with_grads(ref, samples)
    m_metrics, m_grads = megatron_step(learner, samples)
    assert_step_matches(m_metrics, m_grads, t_metrics, t_grads)
    assert_adam_step_matches(learner.hf_state_dict(), weights(ref.model), m_grads, t_grads, LR, step=step, moments=moments)


# ---- conversion ----------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["tiny", "qwen2", "qwen3", "tied"])
def test_conversion_round_trips_exactly(kind):
    model = tiny_model(0)[0] if kind == "tiny" else _small(kind)
    s = convert.shape_of(model.config)
    hf = model.state_dict()
    for tp in (1, 2):
        mg = convert.to_megatron(hf, s, tp)
        assert mg["embedding.word_embeddings.weight"].shape[0] % tp == 0
        back = convert.to_hf(mg, s)
        assert set(back) == set(hf)
        assert all(torch.equal(back[k], hf[k]) for k in hf)
        for pp in (1, 2):
            pieces = {(p, t): convert.shard(mg, s, tp, pp, t, p) for p in range(pp) for t in range(tp)}
            whole = convert.merge(pieces, s, tp, pp)
            assert set(whole) == set(mg) and all(torch.equal(whole[k], mg[k]) for k in mg)


def test_unsupported_models_and_sizes_get_one_line():
    cfg = LlamaConfig(num_attention_heads=9, num_key_value_heads=3, hidden_size=576, num_hidden_layers=30)
    with pytest.raises(ValueError, match="must divide the 9 attention and 3 key/value heads"):
        convert.check_parallel(convert.shape_of(cfg), 2, 1)
    with pytest.raises(ValueError, match="must divide the 30 layers"):
        convert.check_parallel(convert.shape_of(cfg), 1, 4)
    with pytest.raises(ValueError, match="rope_type"):
        convert.shape_of(LlamaConfig(rope_parameters={"rope_type": "linear", "rope_theta": 5e5, "factor": 8.0}))
    with pytest.raises(ValueError, match="not model_type='gpt2'"):
        from transformers import GPT2Config

        convert.shape_of(GPT2Config())


# ---- world size 1, in this process -----------------------------------------------------------
@pytest.mark.parametrize("kind", ["tiny", "qwen2", "qwen3", "tied"])
def test_logprobs_match_the_hf_model(models, kind):
    from learner.megatron_learner import MegatronLearner

    learner = MegatronLearner(models[kind])
    hf, _ = load_model(models[kind], dtype="float32")
    samples = batch()
    for s, lps in zip(samples, learner.logprobs(samples)):
        assert lps == pytest.approx(full_forward_logprobs(hf, s), abs=1e-4)


@pytest.mark.parametrize("kl_coef", [0.0, 0.05])
def test_train_step_matches_the_torch_learner(models, kl_coef):
    from learner.megatron_learner import MegatronLearner

    ref = TorchLearner("tiny", lr=LR, kl_coef=kl_coef, max_tokens_per_micro_batch=40)
    learner = MegatronLearner("tiny", lr=LR, kl_coef=kl_coef, max_tokens_per_micro_batch=40)
    samples = samples_for(ref)
    t_metrics, t_grads = step_with_grads(ref, samples)
    m_metrics, m_grads = megatron_step(learner, samples)
    assert m_metrics["micro_batches"] == t_metrics["micro_batches"] > 1
    assert_step_matches(m_metrics, m_grads, t_metrics, t_grads)
    assert_adam_step_matches(learner.hf_state_dict(), weights(ref.model), m_grads, t_grads, LR)
    # a second step (Adam moments in play) from the slightly different weights gives the same loss;
    # steps with moments are compared exactly in the checkpoint test (same weights and moments there)
    t2, m2 = ref.train_step(samples), learner.train_step(samples)
    assert m2["loss"] == pytest.approx(t2["loss"], abs=1e-5)
    if kl_coef:
        assert m2["ref_kl"] == pytest.approx(t2["ref_kl"], rel=1e-3) and t2["ref_kl"] > 0
    assert learner.train_step(samples[-1:]) == {"skipped": 1.0, "samples": 1.0}


def test_saved_weights_and_checkpoints_load_in_the_torch_learner(models, tmp_path):
    from learner.megatron_learner import MegatronLearner

    learner = MegatronLearner(models["tied"], lr=LR)
    untouched = learner.save_weights(tmp_path / "v0")
    original, _ = load_model(models["tied"], dtype="float32")
    saved, _ = load_model(str(untouched), dtype="float32")
    assert all(torch.equal(v, original.state_dict()[k]) for k, v in saved.state_dict().items())
    ids = torch.tensor([[5, 6, 7, 8]])
    assert torch.equal(saved(ids).logits, original(ids).logits)

    samples = samples_for(TorchLearner(models["tied"]))
    learner.train_step(samples)
    learner.save_checkpoint(tmp_path / "ckpt", step=4, policy_version=2)
    resumed = TorchLearner(models["tied"], lr=LR)
    assert resumed.load_checkpoint(tmp_path / "ckpt") == {"step": 4, "policy_version": 2} and resumed.step == 1
    # the Adam moments came along (a fresh optimizer's first step would differ by about lr)
    assert_same_next_step(learner, resumed, samples)

    # and back: the torch learner's checkpoint resumes in the megatron learner
    resumed.save_checkpoint(tmp_path / "torch-ckpt", step=5, policy_version=3)
    again = MegatronLearner(models["tied"], lr=LR)
    assert again.load_checkpoint(tmp_path / "torch-ckpt") == {"step": 5, "policy_version": 3} and again.step == 2
    assert_same_next_step(again, resumed, samples)


def test_bad_settings_get_one_line():
    from learner.megatron_learner import MegatronLearner

    with pytest.raises(ValueError, match="world size 1 is not tensor_model_parallel_size 2"):
        MegatronLearner("tiny", tensor_model_parallel_size=2)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="gradient_checkpointing needs CUDA"):
            MegatronLearner("tiny", gradient_checkpointing=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="megatron's full recompute runs on CUDA only")
def test_full_recompute_gives_the_same_step_on_cuda():
    """learner.gradient_checkpointing (megatron's full recompute): the same loss, grad norm and
    gradients as without it."""
    from learner.megatron_learner import MegatronLearner

    samples = samples_for(TorchLearner("tiny"))
    plain, recomputed = (MegatronLearner("tiny", lr=LR, gradient_checkpointing=g) for g in (False, True))
    (m_plain, g_plain), (m_rec, g_rec) = megatron_step(plain, samples), megatron_step(recomputed, samples)
    assert m_rec["loss"] == pytest.approx(m_plain["loss"], abs=1e-6)
    assert m_rec["grad_norm"] == pytest.approx(m_plain["grad_norm"], rel=1e-5)
    assert_grads_close(g_rec, g_plain)


# ---- several processes (gloo) -----------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, world: int, port: int, tp: int, pp: int, models: dict[str, str], out: str) -> None:
    """One rank: rank 0 drives each model's learner (the others follow) and saves what it saw."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    from learner.megatron_learner import MegatronLearner

    for kind, path in models.items():
        learner = MegatronLearner(path, lr=LR, tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                                  max_tokens_per_micro_batch=40, dist_timeout_s=300)
        grads = {}
        learner.optimizer.register_step_pre_hook(lambda *_: grads.update(g=learner.hf_state_dict(grads=True)))
        if rank:
            learner.follow()
            continue
        samples = [Sample(**s) for s in json.loads(Path(out, f"{kind}-samples.json").read_text())]
        logprobs = learner.logprobs(samples)
        metrics = learner.train_step(samples)
        learner.save_weights(Path(out, f"{kind}-hf"))
        learner.save_checkpoint(Path(out, f"{kind}-ckpt"), step=1, policy_version=1)
        learner.close()
        torch.save({"logprobs": logprobs, "metrics": metrics, "grads": grads["g"]}, Path(out, f"{kind}.pt"))


@pytest.mark.slow
@pytest.mark.parametrize("tp,pp,kinds", [(2, 1, ("tiny", "qwen2", "qwen3")), (1, 2, ("tied",))], ids=["tp2", "pp2"])
def test_parallel_step_matches_the_torch_learner(models, tmp_path, tp, pp, kinds):
    """Two processes compute the sharded step; its loss, gathered gradients, saved weights and
    checkpointed Adam moments match the torch learner's on the whole model."""
    refs, torch_results = {}, {}
    for kind in kinds:
        refs[kind] = TorchLearner(models[kind], lr=LR, max_tokens_per_micro_batch=40)
        samples = samples_for(refs[kind])
        (tmp_path / f"{kind}-samples.json").write_text(json.dumps([s.__dict__ for s in samples]))
        torch_results[kind] = (refs[kind].logprobs(samples), *step_with_grads(refs[kind], samples))
    world = tp * pp
    torch.multiprocessing.spawn(_rank_main, args=(world, _free_port(), tp, pp, {k: models[k] for k in kinds}, str(tmp_path)),
                                nprocs=world, join=True)
    for kind in kinds:
        got = torch.load(tmp_path / f"{kind}.pt", weights_only=False)
        t_logprobs, t_metrics, t_grads = torch_results[kind]
        assert [x for lp in got["logprobs"] for x in lp] == pytest.approx([x for lp in t_logprobs for x in lp], abs=1e-5)
        assert got["metrics"]["micro_batches"] > 1
        assert_step_matches(got["metrics"], got["grads"], t_metrics, t_grads)
        saved, _ = load_model(str(tmp_path / f"{kind}-hf"), dtype="float32")
        assert_adam_step_matches(weights(saved), weights(refs[kind].model), got["grads"], t_grads, LR)
        # the checkpoint's Adam moments, gathered from the shards, land on the torch learner's
        # parameters: after one step they are (1 - b1) g and (1 - b2) g^2, so each side's moments
        # give back its gradient, compared at the gradients' tolerance
        resumed = TorchLearner(models[kind], lr=LR)
        resumed.load_checkpoint(tmp_path / f"{kind}-ckpt")
        assert_grads_close(implied_grads(resumed), implied_grads(refs[kind]))


# ---- the run CLI -------------------------------------------------------------------------------
RUN = ["env=custom", "env.entry_point=tests.toy_envs:FirstCharEnv", "model=tiny", "learner=megatron", "mode=binary",
       "n_envs=2", "tasks_per_step=2", "group_size=2", "sampling.max_new_tokens=2", "learner.max_staleness=0", "steps=2",
       "wandb.mode=disabled", "progress=false"]


def assert_trained(run_dir: Path) -> None:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]
    assert all(r["train"]["loss_tokens"] > 0 and r["train"]["grad_norm"] > 0 for r in rows)  # the rules judge scores every turn
    assert json.loads((run_dir / "checkpoints" / "latest" / "learner.json").read_text())["step"] == 2
    load_model(str(run_dir / "checkpoints" / "latest" / "model"))


@pytest.mark.slow
def test_a_training_run_with_learner_megatron(tmp_path):
    p = run_cli(*RUN, f"run_dir={tmp_path}", timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert_trained(tmp_path)


@pytest.mark.slow
def test_a_tensor_parallel_run_under_torchrun(tmp_path):
    """Rank 0 runs the experiment; rank 1 follows its learner calls and exits when it closes."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
           "--master-port", str(_free_port()), "-m", "experiments.run", *RUN, "learner.tensor_model_parallel_size=2",
           f"run_dir={tmp_path}"]
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert_trained(tmp_path)
