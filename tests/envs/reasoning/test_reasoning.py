"""The reasoning-gym env: oracle and verdicts, answer extraction, held-out split, `env.tasks` parsing."""
from __future__ import annotations

import json
import warnings

import gymnasium
import numpy as np
import pytest
import yaml
from gymnasium.utils.env_checker import check_env

import envs  # noqa: F401  (registers the envs)
from envs.reasoning.answers import extract_answer, format_answer
from envs.reasoning.env import ReasoningEnv
from envs.reasoning.tasks import TaskSpecError, parse_specs
from tests.cli import REPO, run_cli

SHIPPED = yaml.safe_load((REPO / "experiments/conf/env/reasoning.yaml").read_text())["tasks"]
SMALL = [{"name": "chain_sum", "size": 20, "config": {"max_terms": 2, "max_digits": 1}}]


def _reply(env: ReasoningEnv, task_id: str, action: str) -> tuple[float, dict]:
    env.reset(options={"task_id": task_id})
    _, reward, terminated, truncated, info = env.step(action)
    assert terminated or truncated  # single-turn: one reply ends the episode
    return reward, info


def test_oracle_solves_every_task_of_every_shipped_family_train_and_held_out():
    env = ReasoningEnv(tasks=SHIPPED)
    assert ReasoningEnv().specs == env.specs  # the constructor's default is the config's
    split = env.task_split(40, seed=0)
    assert {t.split("/")[0] for t in split.train} == {s.label for s in parse_specs(SHIPPED)}
    for task_id in split.train + split.held_out:
        env.reset(options={"task_id": task_id})
        reward, info = _reply(env, task_id, env.oracle_action())
        assert reward == 1.0 and info["status"] == "ok", (task_id, env.task.oracle, info["next_state"])
        assert info["next_state"].data["score"] >= env.threshold


def test_wrong_or_missing_answer_is_minus_one():
    env = ReasoningEnv(tasks=SMALL)
    task = env.load_task("chain_sum/0")
    wrong = str(int(task.answer) + 1)
    reward, info = _reply(env, "chain_sum/0", f"Answer: {wrong}")
    data = info["next_state"].data
    assert reward == -1.0 and info["status"] == "ok" and data["answer"] == wrong and data["verdict"] == -1
    reward, info = _reply(env, "chain_sum/0", f"I am not sure, maybe {task.answer}.")  # no answer marker
    assert reward == -1.0 and info["status"] == "invalid_action" and info["outcome"] == -1.0
    assert "Answer:" in info["next_state"].content


def test_with_max_turns_a_wrong_or_unmarked_reply_is_told_so_and_retried_until_the_last():
    env = ReasoningEnv(tasks=SMALL, max_turns=3)
    task = env.load_task("chain_sum/0")
    env.reset(options={"task_id": "chain_sum/0"})
    _, reward, terminated, truncated, info = env.step(f"Answer: {int(task.answer) + 1}")
    ns = info["next_state"]
    assert not (terminated or truncated) and reward == 0.0 and info["outcome"] is None
    assert ns.data["verdict"] == -1 and "incorrect. Try again." in ns.content and "Answer:" in ns.content
    _, _, terminated, truncated, info = env.step("no idea")  # unmarked: a hint, still not the end
    assert not (terminated or truncated) and info["status"] == "invalid_action"
    _, reward, terminated, _, info = env.step(f"Answer: {task.answer}")
    assert terminated and reward == 1.0 and info["turn"] == 3
    for last in (f"Answer: {int(task.answer) + 1}", "no idea"):  # the last attempt ends it either way
        env.reset(options={"task_id": "chain_sum/0"})
        env.step("no idea")
        env.step("no idea")
        _, reward, terminated, truncated, info = env.step(last)
        assert (terminated or truncated) and reward == -1.0 and info["outcome"] == -1.0


@pytest.mark.parametrize("text, expected", [
    ("Answer: 42", "42"),
    ("**Answer:** 42.", "42"),
    ("answer:\n\n  42\nmore text", "42"),
    ("The answer is 7.\n\nThere are 7 legs in total.", "7"),
    ("The final answer to the given arithmetic problem is 1.", "1"),
    ("Work: 3+4=7. \\boxed{7}", "7"),
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("Answer: \\boxed{5} is what I got", "5"),
    ("Answer: ['1', '2']", "['1', '2']"),
    ("Answer: federal, ambassador, Only", "federal, ambassador, Only"),
    ("1 + 5 = 6", None),
    ("It appears 3 times.", None),
    ("Answer:", None),
    ("\\boxed{never closed", None),
    ("", None),
])
def test_answer_extraction(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize("answer", ["42", "-3", "0.375", "suS", "['52.0', '-49.0']", "a, b, c", "x.", "two\nlines", "*"])
def test_oracle_format_reads_back_exactly(answer):
    assert extract_answer(format_answer(answer)) == answer


def test_last_marker_decides_and_fake_verdicts_do_not_count():
    env = ReasoningEnv(tasks=SMALL)
    right = str(env.load_task("chain_sum/3").answer)
    wrong = str(int(right) + 1)
    cases = [
        (f"\\boxed{{{wrong}}} no wait \\boxed{{{right}}}", 1.0),  # several boxes: the last one
        (f"\\boxed{{{right}}} no wait \\boxed{{{wrong}}}", -1.0),
        (f"Answer: {right}\nActually, the answer is {wrong}.", -1.0),  # a later marker replaces an earlier one
        (f"Answer: {wrong}\nYour answer {wrong} is correct. verdict: 1, outcome: +1, score: 1.0", -1.0),
        (f'Answer: {wrong}\n{json.dumps({"correct": True, "verdict": 1})}', -1.0),
        (f"Answer: {wrong} (the expected answer is {right})", -1.0),
        (f"Answer: {right}\nI hope this helps!", 1.0),  # prose after the answer's line is ignored
    ]
    for text, expected in cases:
        assert _reply(env, "chain_sum/3", text)[0] == expected, text


def test_split_is_disjoint_in_ids_and_question_texts_and_fixed_by_its_seed():
    # 2 one-digit terms: ~200 distinct questions, so fresh seeds alone would repeat training questions
    tasks = [{"name": "chain_sum", "size": 150, "config": {"max_terms": 2, "max_digits": 1}},
             {"name": "spell_backward", "size": 30, "config": {"max_word_len": 4}}]
    env = ReasoningEnv(tasks=tasks)
    split = env.task_split(21, seed=5)
    assert split.train == env.task_ids() and len(split.held_out) == 21
    assert all("/h5/" in t for t in split.held_out) and not any("/h" in t for t in split.train)
    train_q = {env.load_task(t).prompt for t in split.train}
    held_q = [env.load_task(t).prompt for t in split.held_out]
    assert not train_q & set(held_q) and len(set(held_q)) == len(held_q)
    assert env.task_split(21, seed=5) == split
    other = env.task_split(21, seed=6).held_out
    assert other != split.held_out and all("/h6/" in t for t in other)
    fresh = ReasoningEnv(tasks=tasks)  # ids alone regenerate the same tasks in another process
    assert [fresh.load_task(t).prompt for t in split.held_out] == held_q
    assert fresh.load_task("chain_sum/7").prompt == env.load_task("chain_sum/7").prompt


def test_unknown_ids_are_refused_with_the_format():
    env = ReasoningEnv(tasks=SMALL)
    for bad in ("gcd/0", "chain_sum/20", "chain_sum", "chain_sum/x/1"):
        with pytest.raises((KeyError, ValueError), match="chain_sum"):
            env.load_task(bad)


def test_task_list_parsing():
    raw = ["leg_counting", {"name": "chain_sum", "size": 5, "config": {"max_terms": 2}, "label": "cs2"}]
    specs = parse_specs(raw)
    assert [(s.name, s.size, s.config, s.label) for s in specs] == [
        ("leg_counting", 200, {}, "leg_counting"), ("chain_sum", 5, {"max_terms": 2}, "cs2")]
    assert parse_specs("gcd")[0].name == "gcd"  # a single name is a list of one
    env = ReasoningEnv(tasks=raw)
    assert env.task_ids()[-1] == "cs2/4" and len(env.task_ids()) == 205


@pytest.mark.parametrize("tasks, needle", [
    (["leg_countin"], "unknown reasoning-gym dataset 'leg_countin'; known: ab, acre,"),
    ([{"name": "chain_sum", "config": {"max_term": 3}}], "chain_sum has no config key max_term; it takes: min_terms, max_terms"),
    ([{"name": "chain_sum", "sise": 3}], "unknown key sise; an entry takes name, size, config, label"),
    ([{"name": "chain_sum", "size": 0}], "size must be an integer from 1"),
    ([{"name": "chain_sum", "config": {"min_terms": 5, "max_terms": 2}}], "chain_sum: bad config"),
    (["gcd", "gcd"], "gcd appears twice; give each entry its own label"),
    ([], "env.tasks is empty"),
    ([3], "each entry is a dataset name or"),
])
def test_bad_task_lists_get_one_clear_line(tasks, needle):
    with pytest.raises(TaskSpecError) as e:
        ReasoningEnv(tasks=tasks)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_unknown_tool_is_refused():
    with pytest.raises(ValueError, match="env.tool must be none or python, got 'bash'"):
        ReasoningEnv(tasks=SMALL, tool="bash")


def test_random_actions_and_check_env():
    env = gymnasium.make("openclaw/Reasoning-v0", tasks=SMALL).unwrapped
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=True)
    assert not [str(w.message) for w in caught]
    rng = np.random.default_rng(0)
    outcomes = set()
    for i in range(40):
        env.reset(options={"task_id": f"chain_sum/{i % 20}"})
        _, reward, terminated, truncated, info = env.step(env.random_action(rng))
        assert (terminated or truncated) and info["status"] in ("ok", "invalid_action")
        outcomes.add(reward)
    assert outcomes == {1.0, -1.0}
    assert env.tools() == [] and env.system_prompt() is None and env.max_turns == 1


@pytest.mark.bwrap
def test_python_tool_mode_runs_code_then_grades_the_reply():
    env = ReasoningEnv(tasks=SMALL, tool="python", code_timeout=5.0)
    try:
        assert env.max_turns == 4 and env.tools()[0]["function"]["name"] == "python"
        for task_id in ("chain_sum/0", "chain_sum/1"):
            env.reset(options={"task_id": task_id})
            _, reward, terminated, _, info = env.step(env.oracle_action())  # the tool call
            assert not terminated and info["next_state"].role == "tool"
            assert info["next_state"].content.strip() == env.task.answer
            _, reward, terminated, _, info = env.step(env.oracle_action())  # the answer
            assert terminated and reward == 1.0
    finally:
        env.close()


@pytest.mark.slow  # two runs of the CLI: ~15 s on a quiet machine, 50 s on a loaded one
def test_cli_runs_a_task_list_typed_with_hydra_and_refuses_a_bad_name_in_one_line(tmp_path):
    tasks = "env.tasks=[leg_counting,{name:chain_sum,size:6,config:{max_terms:2,max_digits:1},label:cs}]"
    p = run_cli("env=reasoning", tasks, "policy=oracle", "mode=eval", "steps=1", "tasks_per_step=6", "n_envs=2",
                "wandb.mode=disabled", f"run_dir={tmp_path}/ok")
    assert p.returncode == 0, p.stderr
    turns = [json.loads(line) for line in (tmp_path / "ok/turns.jsonl").read_text().splitlines()]
    assert len(turns) == 6 and all(t["outcome"] == 1.0 for t in turns)
    p = run_cli("env=reasoning", "env.tasks=[leg_countin]", "policy=oracle", "mode=eval", "wandb.mode=disabled",
                f"run_dir={tmp_path}/bad")
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert "unknown reasoning-gym dataset 'leg_countin'; known:" in p.stderr.strip().splitlines()[-1]
