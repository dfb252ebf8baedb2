"""The paper's settings as `+experiment=terminal|toolcall|personal` (experiments/conf/experiment,
docs/gpu.md): each composes with the paper's values, asks for exactly the paths and servers a
GPU host must supply, and launches SGLang with arguments SGLang's own parser takes."""
from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from agent.policy.sglang_launch import launch_command
from experiments.factories import ConfigError, run_mode
from experiments.run import renamed_keys
from learner.modes import MODES
from tests.agent.policy.test_sglang_schema import sglang_verdicts
from tests.cli import REPO

# recipe -> (what the user must supply, expected values, SGLang's tp/dp/context)
RECIPES = {
    "terminal": ({"model.path", "required.prm_url"},
                 {"env.name": "terminal", "mode.name": "integrated", "env.max_turns": 10, "steps": 2000,
                  "tasks_per_step": 16, "group_size": 8, "n_envs": 128, "sampling.max_new_tokens": 8192,
                  "sampling.temperature": 1.0, "max_context": 16384, "learner.lr": 1e-6, "learner.kl_coef": 0.01,
                  "learner.tensor_model_parallel_size": 4, "judge.n_votes": 1, "sandbox.name": "docker"},
                 (4, 1, 16384)),
    "toolcall": ({"model.path", "required.prm_url", "required.data"},
                 {"env.name": "toolcall", "mode.name": "integrated", "env.max_turns": 16, "steps": 3000,
                  "tasks_per_step": 32, "group_size": 8, "n_envs": 32, "sampling.max_new_tokens": 4096,
                  "sampling.temperature": 1.0, "learner.lr": 1e-6, "learner.kl_coef": 0.01,
                  "learner.tensor_model_parallel_size": 2, "judge.n_votes": 1, "env.code_timeout": 120},
                 (1, 4, 16384)),
    "personal": ({"model.path", "required.prm_url", "required.problems", "required.user_url", "required.user_model"},
                 {"env.name": "chat_sim", "mode.name": "combine", "mode.w_opd": 1.0, "mode.w_rl": 1.0,
                  "mode.teacher": "frozen", "env.user": "llm", "env.max_turns": 8, "steps": 16, "group_size": 1,
                  "sampling.max_new_tokens": 8192, "sampling.temperature": 0.6, "max_context": 32768,
                  "learner.lr": 1e-5, "learner.kl_coef": 0.0, "learner.tensor_model_parallel_size": 4,
                  "learner.max_tokens_per_micro_batch": 32768, "eval.temperature": 0.0},
                 (2, 1, 32768)),
}
COMMON = {"policy.name": "sglang", "learner.name": "megatron", "learner.bf16": True, "model.dtype": "bfloat16",
          "learner.betas": [0.9, 0.98], "learner.weight_decay": 0.1, "judge.name": "llm", "judge.temperature": 0.6}


def compose_experiment(name: str, *overrides: str):
    with initialize_config_dir(config_dir=str(REPO / "experiments" / "conf"), version_base=None):
        return compose("config", overrides=[f"+experiment={name}", *overrides])


def missing(tree: dict, prefix: str = "") -> set[str]:
    """Keys left at ??? (interpolations to them are not counted)."""
    found = set()
    for k, v in tree.items():
        if isinstance(v, dict):
            found |= missing(v, f"{prefix}{k}.")
        elif v == "???":
            found.add(f"{prefix}{k}")
    return found


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_experiment_composes_with_the_papers_values(name):
    required, expected, _ = RECIPES[name]
    cfg = compose_experiment(name)
    assert missing(OmegaConf.to_container(cfg, resolve=False)) == required
    for key, value in {**COMMON, **expected, "name": f"paper-{name}"}.items():
        got = OmegaConf.select(cfg, key)
        assert (OmegaConf.to_container(got) if OmegaConf.is_config(got) else got) == value, key
    filled = compose_experiment(name, *(f"{k}=/given/{k}" for k in sorted(required)))
    OmegaConf.resolve(filled)  # every interpolation resolves once the user's values are in
    assert filled.judge.url == "/given/required.prm_url"
    uses = {"toolcall": {"env.data": "data"}, "terminal": {},
            "personal": {"mode.teacher_url": "prm_url", "env.problems": "problems", "env.user_llm.url": "user_url",
                         "env.user_llm.model": "user_model"}}[name]
    for key, given in uses.items():
        assert OmegaConf.select(filled, key) == f"/given/required.{given}", key


def test_experiments_launch_sglang_with_arguments_sglang_takes():
    items, want = [], []
    for name, (_, _, (tp, dp, context)) in sorted(RECIPES.items()):
        cfg = compose_experiment(name)
        cmd = launch_command(Path("/models/m"), str(cfg.policy.host), int(cfg.policy.port), list(cfg.policy.extra_args))
        assert cmd[1:3] == ["-m", "sglang.launch_server"]
        items.append({"kind": "launch_args", "body": cmd[3:]})
        want.append({"model_path": "/models/m", "host": "127.0.0.1", "port": 30000, "tp_size": tp, "dp_size": dp,
                     "context_length": context})
    items.append({"kind": "launch_args", "body": ["--model-path", "/m", "--tp-size", "two"]})  # the check bites
    *verdicts, bad = sglang_verdicts(items, vocab_size=1)
    assert [v["normalized"] for v in verdicts] == want, verdicts
    assert bad["error"] and "invalid int value" in bad["error"]


def test_each_mode_yaml_has_its_registry_entry_and_back():
    """conf/mode/*.yaml hold only user settings; what a mode is lives in learner/modes.py."""
    confs = {f.stem: OmegaConf.load(f) for f in (REPO / "experiments" / "conf" / "mode").glob("*.yaml")}
    assert set(confs) == set(MODES)
    for name, conf in confs.items():
        assert conf.name == name and "train" not in conf, name
    with pytest.raises(ConfigError, match="unknown mode 'nope'; choose one of outcome, binary"):
        run_mode(OmegaConf.create({"mode": {"name": "nope"}}))
    assert not run_mode(compose_experiment("quickstart", "mode=eval")).trains


def test_the_judges_old_vote_count_key_still_runs():
    argv = renamed_keys(["judge.m=2", "++judge.m=5", "steps=2", "judge.model=x"])
    assert argv == ["judge.n_votes=2", "++judge.n_votes=5", "steps=2", "judge.model=x"]
    assert compose_experiment("quickstart", argv[0]).judge.n_votes == 2
