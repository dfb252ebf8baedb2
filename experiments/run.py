"""`python -m experiments.run env=toolcall mode=combine ...`: one experiment, end to end.

Writes run_dir/config.yaml (resolved), tasks.json (training / held-out split), metrics.jsonl,
turns.jsonl and checkpoints. A misconfigured run stops before it starts, with one line saying
what to do.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import sys
from contextlib import AsyncExitStack
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from envs import progress
from envs.base import ForkError
from agent import host_memory
from agent.policy.base import PolicyUnavailable
from agent.rollout import TRACEBACKS, EpisodesFailed
from envs.sandbox.sweeper import sigterm_as_sigint
from experiments.factories import (ConfigError, branching, build_env, build_evaluator, build_policy, build_runner, build_sft, demonstrable_split,
                                   build_training, eval_settings, loop_config, run_mode)
from experiments.view.pages import token_panel
from experiments.warm_start import enabled as warm_start_enabled, warm_start
from learner.compute_thread import exit_now, on_learner_thread
from learner.evaluation import heldout_curve
from learner.loop import run_loop
from learner.runlog import RunLog
from learner.sft import summary as sft_summary
from learner.sft_demos import DemoError
from learner.wandb_log import WandbSink

log = logging.getLogger("experiments.run")
TRACEBACK_LOG = "tracebacks.log"  # in the run dir: failed episodes' full tracebacks


def _job_suffix() -> str:
    """"-N" for job N of a multirun (so `-m seed=0,1` gets two run dirs), "" for a single run."""
    try:
        hc = HydraConfig.get()
    except ValueError:  # composed outside @hydra.main
        return ""
    return f"-{hc.job.num}" if hc.mode == RunMode.MULTIRUN else ""


OmegaConf.register_new_resolver("job_suffix", _job_suffix, replace=True)


def wandb_group(cfg: DictConfig) -> str:
    """The configured group, else one per comparison: the jobs of one `-m` sweep share the
    sweep's time stamp; a single run is grouped under its experiment name."""
    if cfg.wandb.get("group"):
        return str(cfg.wandb.group)
    hc = HydraConfig.get()
    if hc.mode == RunMode.MULTIRUN:
        return f"{cfg.env.name}-{Path(str(hc.sweep.dir)).name}"
    return str(cfg.name)


def wandb_sink(cfg: DictConfig, run_dir: Path) -> WandbSink:
    w = cfg.wandb
    config = OmegaConf.to_container(cfg, resolve=True)
    return WandbSink(run_dir, project=str(w.project), group=wandb_group(cfg), name=f"{cfg.name}-seed{cfg.seed}",
                     config=config, job_type="train" if run_mode(cfg).trains else "eval", mode=str(w.mode),
                     rows_per_step=int(w.rows_per_step), seed=int(cfg.seed), tags=[str(cfg.env.name), str(cfg.mode.name)],
                     panel=token_panel(config))


async def run_experiment(cfg: DictConfig, runlog: RunLog) -> list[dict]:
    """One run end to end: build its parts, run SFT, training or the evaluation loop; the run's one
    exit stack stops every part, the last built first."""
    settings = eval_settings(cfg)
    async with AsyncExitStack() as stack:
        make_env = build_env(cfg, stack)
        sft, split, before = None, None, None
        warm = warm_start_enabled(cfg)
        if str(cfg.mode.name) == "sft":
            sft, policy = await on_learner_thread(build_sft, cfg, make_env, runlog)
        else:
            if warm:  # SFT first; cfg.model.path becomes its checkpoint
                split, demonstrable = await asyncio.to_thread(demonstrable_split, cfg, make_env)
                before = await warm_start(cfg, make_env, runlog, split, demonstrable)
            policy = build_policy(cfg, stack)
        runner = build_runner(cfg, make_env, policy, stack, branch=sft is None)
        if sft is not None:
            return await sft.run(runner)
        # rollouts draw from split.train only, whether or not this run evaluates (eval.every=0)
        split = split or await runner.task_split(settings.n_tasks, settings.seed)
        runlog.write_split(split, settings.seed)
        loop_cfg = dataclasses.replace(loop_config(cfg), task_ids=split.train, eval_every=settings.every)
        evaluator = await asyncio.to_thread(build_evaluator, cfg, policy, make_env, split.held_out, stack)
        if run_mode(cfg).trains:
            training = await build_training(cfg, policy, runner, runlog, stack, evaluator)
            rows = await training.run(loop_cfg)
        else:
            rows = await run_loop(runner, loop_cfg, runlog, evaluator=evaluator)
        # the starting model's figures lead the list (its own row is in run_dir/warm_start)
        return ([{"step": 0, "eval_only": True, **before}] if before else []) + rows


def setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("httpx", "httpx2", "httpcore", "openai", "uvicorn.access"):  # one line per request drowns the run's own
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # no weight-loading bars (transformers reads this when first imported, which a run that
    # stops at a config error never does)
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


@hydra.main(config_path="conf", config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    if str(cfg.learner.name) == "megatron" and int(os.environ.get("RANK", "0")) > 0:
        from learner.megatron_learner import MegatronLearner

        MegatronLearner.from_config(cfg).follow()  # under torchrun rank 0 runs the experiment; this rank its learner calls
        return
    sigterm_as_sigint()
    if cfg.get("malloc_mmap_threshold_mb") is not None:  # less memory, slower steps (agent/host_memory.py)
        host_memory.map_large_blocks(int(float(cfg.malloc_mmap_threshold_mb) * 2**20))
    setup_logging()
    progress.configure(bool(cfg.progress))  # every bar: model conversion, training steps, ...
    try:
        loop_config(cfg)  # the counts, the mode and the branching checked before the run dir is written
        run_mode(cfg)
        branching(cfg)
    except ConfigError as e:
        sys.exit(f"error: {e}")
    runlog = RunLog(cfg.run_dir)
    runlog.write_config(OmegaConf.to_yaml(cfg, resolve=True))
    TRACEBACKS.addHandler(logging.FileHandler(runlog.dir / TRACEBACK_LOG))
    TRACEBACKS.setLevel(logging.INFO)
    log.info("run %s -> %s", cfg.name, runlog.dir)
    runlog.add_sink(wandb_sink(cfg, runlog.dir))
    failed = None
    try:
        rows = asyncio.run(run_experiment(cfg, runlog))
    except (ConfigError, PolicyUnavailable, DemoError) as e:
        failed = f"error: {e}"
    except EpisodesFailed as e:
        failed = f"error: {e}\nfull tracebacks: {runlog.dir / TRACEBACK_LOG}"
    except ForkError as e:
        failed = f"error: rollout.branch needs an env that can fork: {e}; set rollout.branch.at=none"
    except KeyboardInterrupt:
        failed = "interrupted: everything this run started was stopped"
    finally:
        runlog.close()
    if failed is not None:  # the run's parts are stopped; a learner step may still run on its thread
        exit_now(failed)
    if rows and rows[-1].get("model_path"):  # mode=sft: what a later run starts from
        log.info("done: %s; start from it with model=local model.path=%s", sft_summary(rows), rows[-1]["model_path"])
        return
    trained = [r for r in rows if not r.get("eval_only")]
    last = trained[-1] if trained else {}
    for line in heldout_curve(rows):
        log.info("%s", line)
    log.info("%s", host_memory.phase_line())
    log.info("done: %d steps, outcome_mean=%s, run dir %s", len(trained), last.get("outcome_mean"), runlog.dir)


def unknown_env(argv: list[str]) -> str | None:
    """One line for `env=<no such group>` (Hydra's own message is a page), checked before Hydra
    starts; config folders added with --config-dir / -cd count too."""
    dirs = [Path(__file__).parent / "conf"]
    for i, a in enumerate(argv):
        if a in ("--config-dir", "-cd") and i + 1 < len(argv):
            dirs.append(Path(argv[i + 1]))
        elif a.startswith("--config-dir="):
            dirs.append(Path(a.partition("=")[2]))
    known = sorted({f.stem for d in dirs for f in (d / "env").glob("*.yaml")})
    for a in argv:
        key, eq, value = a.partition("=")
        if key != "env" or not eq or "(" in value:  # sweep functions (range, glob) are Hydra's to check
            continue
        for v in value.split(","):
            if v not in known:
                return f"error: unknown env {v!r}; choose one of {', '.join(known)}, or env=custom env.entry_point=module:Class"
    return None


def env_options_added(argv: list[str]) -> list[str]:
    """`env.KEY=VALUE` as `++env.KEY=VALUE`: a key the env's yaml lacks is then added, not refused
    by Hydra with a page, and env_factory's check names the options the env takes in one line."""
    return [f"++{a}" if a.startswith("env.") and "=" in a else a for a in argv]


# Keys renamed since command lines were written with them: old spelling -> config key.
RENAMED = {"judge.m": "judge.n_votes"}


def renamed_keys(argv: list[str]) -> list[str]:
    """`judge.m=3` (and `+judge.m=3`, ...) as `judge.n_votes=3`: an old command line still runs."""
    out = []
    for a in argv:
        key, eq, value = a.partition("=")
        bare = key.lstrip("+~")
        out.append(f"{key[:len(key) - len(bare)]}{RENAMED[bare]}={value}" if eq and bare in RENAMED else a)
    return out


if __name__ == "__main__":
    if (problem := unknown_env(sys.argv[1:])) is not None:
        sys.exit(problem)
    sys.argv[1:] = env_options_added(renamed_keys(sys.argv[1:]))
    main()
