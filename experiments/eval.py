"""`python -m experiments.eval env=toolcall model.path=DIR k=4 n_tasks=32`: one policy on the
held-out split, with 95% intervals.

The config is experiments.run's (experiments/conf/config.yaml), and so is the split: eval.seed
picks the held-out tasks, so a checkpoint of any run is evaluated on tasks its training never
drew. The policy is a model word (`model=smollm2`, `model=tiny`), a folder (`model.path=DIR`, e.g.
a run's checkpoints/latest/model, with or without `model=local`), or no model (`policy=oracle`:
pass@1 is 1 on every env; `policy=random`). Shorthands: `k=` (eval.k), `n_tasks=` (eval.n_tasks),
`out=` (run_dir). Writes run_dir/eval.json (config, split, per-task outcomes, estimates with
their 95% intervals) and run_dir/eval.md (the table it prints). Nothing is trained (mode=eval).
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from envs import progress
from agent.policy.base import PolicyUnavailable
from envs.sandbox.sweeper import sigterm_as_sigint
from experiments.factories import (ConfigError, build_env, build_eval_runner, build_personalization, mix_weights,
                                   build_policy, eval_settings)
from experiments.run import env_options_added, setup_logging, unknown_env
from learner.evaluation import EpisodeEvaluator, HeldOutResult

log = logging.getLogger("experiments.eval")
SHORTHANDS = {"k": "eval.k", "n_tasks": "eval.n_tasks", "out": "run_dir"}


def expand(argv: list[str]) -> list[str]:
    """The shorthands as their config keys, and mode=eval unless a mode is given."""
    out = []
    for a in argv:
        key, eq, value = a.partition("=")
        out.append(f"{SHORTHANDS[key]}={value}" if eq and key in SHORTHANDS else a)
    if not any(a.partition("=")[0].lstrip("+~") == "mode" for a in out):
        out.insert(0, "mode=eval")
    return out


async def evaluate(cfg: DictConfig) -> tuple[dict[str, Any], HeldOutResult]:
    """Run the held-out episodes (and chat_sim's personalization): what eval.json holds, and the result."""
    s = eval_settings(cfg)
    if s.n_tasks < 1:
        raise ConfigError("n_tasks (eval.n_tasks) must be at least 1")
    async with AsyncExitStack() as stack:
        make_env = build_env(cfg, stack)
        policy = build_policy(cfg, stack)
        runner = build_eval_runner(cfg, make_env, policy, stack)
        split = await runner.task_split(s.n_tasks, s.seed)
        if not split.held_out:
            raise ConfigError(f"env {cfg.env.name} has {len(split.train)} task(s): too few to hold any out")
        log.info("%d held-out tasks (eval.seed=%d), %d episode(s) each", len(split.held_out), s.seed, s.k)
        result = await EpisodeEvaluator(runner, split.held_out, s.k, s.seed).evaluate()
        personalization = await asyncio.to_thread(build_personalization, cfg, policy, make_env, stack)
        extra = await personalization() if personalization is not None else {}
    report = {"env": str(cfg.env.name), "policy": str(cfg.policy.name),
              "model": str(cfg.model.path) if policy.sampled is not None else None, "eval": dataclasses.asdict(s),
              "split": split.to_dict(), "outcomes": result.outcomes, "excluded": result.excluded,
              "estimates": {name: e.to_dict() for name, e in result.estimates().items()}, **extra,
              "members": {m: {name: e.to_dict() for name, e in result.member(m).estimates().items()}
                          for m in mix_weights(cfg.env)},  # env=mix: each member's own figures
              "config": OmegaConf.to_container(cfg, resolve=True)}
    return report, result


def report_md(report: dict[str, Any], result: HeldOutResult) -> str:
    who = f"policy {report['policy']}" + (f", model {report['model']}" if report["model"] else "")
    s = report["eval"]
    lines = ["# Held-out evaluation", "",
             f"env {report['env']}, {who}: {len(result.outcomes)} held-out tasks (eval.seed={s['seed']}), "
             f"{s['k']} episode(s) each at temperature {s['temperature']}.", "", result.table()]
    for m in report["members"]:
        lines += ["", f"member {m}:", "", result.member(m).table()]
    if report.get("personalization") is not None:
        lines += ["", f"personalization (first responses): {report['personalization']:.3f} "
                      f"[{report['personalization_lo']:.3f}, {report['personalization_hi']:.3f}] (bootstrap 95% CI) "
                      f"over {report['personalization_n']} tasks"]
    return "\n".join(lines) + "\n"


@hydra.main(config_path="conf", config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    sigterm_as_sigint()
    setup_logging()
    progress.configure(bool(cfg.progress))  # every bar: model conversion, training steps, ...
    try:
        report, result = asyncio.run(evaluate(cfg))
    except (ConfigError, PolicyUnavailable) as e:
        sys.exit(f"error: {e}")
    except MissingMandatoryValue as e:
        sys.exit(f"error: {e.full_key} is not set (model=local takes model.path=DIR)")
    except KeyboardInterrupt:
        sys.exit("interrupted: everything this evaluation started was stopped")
    out = Path(cfg.run_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval.json").write_text(json.dumps(report) + "\n")
    md = report_md(report, result)
    (out / "eval.md").write_text(md)
    print(md + f"\n-> {out}/eval.json, {out}/eval.md", flush=True)


if __name__ == "__main__":
    if (problem := unknown_env(sys.argv[1:])) is not None:
        sys.exit(problem)
    sys.argv[1:] = env_options_added(expand(sys.argv[1:]))  # env.KEY=VALUE adds a key, as in experiments.run
    main()
