"""`python -m experiments.run env=toolcall mode=combine ...`: one experiment, end to end.

Writes run_dir/config.yaml (resolved), metrics.jsonl, turns.jsonl and checkpoints. A
misconfigured run stops before it starts, with one line saying what to do.
"""
from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from agent.rollout import Runner
from experiments.factories import ConfigError, build_policy, build_training, env_factory
from learner.loop import LoopConfig, run_loop
from learner.runlog import RunLog

log = logging.getLogger("experiments.run")


async def experiment(cfg: DictConfig, runlog: RunLog) -> list[dict]:
    make_env = env_factory(cfg)
    policy = build_policy(cfg)
    runner = Runner(
        make_env, policy.make_actor, n_envs=int(cfg.n_envs), step_timeout_s=float(cfg.timeouts.step_s),
        episode_timeout_s=float(cfg.timeouts.episode_s), progress=bool(cfg.progress),
    )
    loop_cfg = LoopConfig(steps=int(cfg.steps), tasks_per_step=int(cfg.tasks_per_step),
                          group_size=int(cfg.group_size), seed=int(cfg.seed))
    try:
        if cfg.mode.train:
            training = await build_training(cfg, policy, runner, runlog)
            return await training.run(loop_cfg)
        return await run_loop(runner, loop_cfg, runlog)
    finally:
        await asyncio.to_thread(runner.close)
        await policy.aclose()


@hydra.main(config_path="conf", config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("httpx", "httpcore", "uvicorn.access"):  # one line per request drowns the run's own
        logging.getLogger(noisy).setLevel(logging.WARNING)
    import transformers

    transformers.utils.logging.disable_progress_bar()
    runlog = RunLog(cfg.run_dir)
    runlog.write_config(OmegaConf.to_yaml(cfg, resolve=True))
    log.info("run %s -> %s", cfg.name, runlog.dir)
    try:
        rows = asyncio.run(experiment(cfg, runlog))
    except ConfigError as e:
        sys.exit(f"error: {e}")
    except KeyboardInterrupt:
        sys.exit("interrupted: everything this run started was stopped")
    last = rows[-1] if rows else {}
    log.info("done: %d steps, outcome_mean=%s, run dir %s", len(rows), last.get("outcome_mean"), runlog.dir)


if __name__ == "__main__":
    main()
