"""Trajectory viewer: how long the index of a 10,000-turn run takes to load in headless Chromium.

A synthetic combine run (`--turns` turns, `--turns-per-episode` per episode, byte-tokenizer ids,
accepted hints with teacher log-probs on half the turns) is written with the run log's own
writer, the site is built, and index.html is opened from disk `--repeats` times in one browser.
Load time: from navigation start to the first render of the episode table (the page's
data-ready mark) or the load event, whichever is later. Figures: `index_load_s` (median),
`baseline_load_s` (the same for a 10-turn run), `ratio` (the two), `build_s`, `index_bytes`.
"""
from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from agent.policy.models import byte_tokenizer
from agent.turn import OPDSignal, PRMScore, Turn
from envs.base import NextState
from learner.runlog import RunLog

_WORDS = "run the tests first then read the error and fix the import in utils before you submit".split()


def write_run(run_dir: Path, turns: int, turns_per_episode: int = 8, episodes_per_step: int = 16, seed: int = 0) -> None:
    """A combine run on env terminal with `turns` turns in full episodes (the last one may be short)."""
    rng = random.Random(seed)
    tok = byte_tokenizer()
    log = RunLog(run_dir)
    log.write_config(yaml.safe_dump({"env": {"name": "terminal"}, "mode": {"name": "combine"},
                                     "model": {"name": "tiny", "path": "tiny"}, "seed": seed}))
    system = tok.apply_chat_template([{"role": "system", "content": "You work in a shell. " * 10},
                                      {"role": "user", "content": "Fix the failing test."}], tokenize=False, add_generation_prompt=True)
    made, step = 0, 0
    while made < turns:
        batch = []
        for e in range(episodes_per_step):
            n = min(turns_per_episode, turns - made)
            if n <= 0:
                break
            prompt = tok.encode(system, add_special_tokens=False)
            outcome = rng.choice([-1.0, 1.0])
            for i in range(n):
                text = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(8, 40)))
                response = tok.encode(text, add_special_tokens=False)
                logprobs = [-rng.random() * 3 for _ in response]
                accepted = rng.random() < 0.5
                opd = OPDSignal(votes=[1 if accepted else -1], hints=["check utils"], texts=["[rules] hint"],
                                hint="check utils" if accepted else "", accepted=accepted,
                                teacher_logprobs=[lp + rng.gauss(0, 1) for lp in logprobs] if accepted else None)
                score = rng.choice([-1, 0, 1])
                batch.append(Turn(
                    episode_id=f"s{step}-t{e}-g0", task_id=f"task-{e % 40}", group_id=f"s{step}-t{e}", step_index=i,
                    policy_version=step, prompt_ids=list(prompt), response_ids=response, rollout_logprobs=logprobs,
                    action=text, next_state=NextState("tool", f"$ {text[:30]}\n[exit code {i % 2}]", "shell", {"exit_code": i % 2}),
                    status=rng.choice(["ok", "ok", "ok", "invalid_action", "timeout"]), finish_reason="stop",
                    outcome=outcome, episode_done=i == n - 1, prm=PRMScore(votes=[score], score=score, texts=["[rules] verdict"]),
                    opd=opd, meta={"advantage": {"mean": float(score), "min": float(score), "max": float(score), "masked": False}}))
                prompt += response + tok.encode("<|im_end|>\n<|im_start|>tool\nok<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
            made += n
        log.turns(batch)
        log.metrics({"step": step, "reward_mean": rng.random(), "outcome_mean": rng.random() * 2 - 1,
                     "prm_score_mean": rng.random() - 0.5, "opd_accept_rate": 0.5, "policy_version": step + 1})
        step += 1


def _load_times(index: Path, repeats: int) -> list[float]:
    from envs.gui.browser import Browser

    browser = Browser(command_timeout_s=120)  # a loaded machine is slow to open a page
    try:
        times = []
        for _ in range(repeats):
            browser.driver.get("about:blank")
            browser.driver.get(index.resolve().as_uri())
            deadline = time.monotonic() + 60
            while (ready := browser.run("return document.documentElement.dataset.ready || null")) is None:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{index} did not render its table within 60 s")
                time.sleep(0.05)
            load = browser.run("return performance.getEntriesByType('navigation')[0].loadEventEnd")
            times.append(max(float(ready), float(load)) / 1000)
        return times
    finally:
        browser.quit()


def main(argv: list[str]) -> dict:
    from experiments.view.site import build

    ap = argparse.ArgumentParser(prog="python -m experiments.bench view")
    ap.add_argument("--turns", type=int, default=10_000)
    ap.add_argument("--turns-per-episode", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="openclaw-view-bench-") as tmp:
        big, small = Path(tmp) / "big", Path(tmp) / "small"
        write_run(big / "run", args.turns, args.turns_per_episode)
        write_run(small / "run", 10, args.turns_per_episode)
        t0 = time.monotonic()
        index = build([big / "run"], big / "site")
        build_s = time.monotonic() - t0
        baseline = build([small / "run"], small / "site")
        load = statistics.median(_load_times(index, args.repeats))
        base = statistics.median(_load_times(baseline, args.repeats))
        return {"turns": args.turns, "index_load_s": round(load, 3), "baseline_load_s": round(base, 3),
                "ratio": round(load / base, 2), "build_s": round(build_s, 1),
                "index_bytes": (index.parent / "data" / "index.js").stat().st_size}
