"""Generated terminal task families on real sandboxes: every family's oracle passes and doing
nothing or a near miss fails; the tasks are the same for the same seed; unknown names are refused."""
from __future__ import annotations

import json

import pytest

import envs  # noqa: F401  (registers the envs)
from envs.terminal.env import TerminalEnv
from envs.terminal.families import make_spec, write_suite
from envs.terminal.families.generators import FAMILIES
from envs.tool_calls import parse_action, render_tool_call

SUBMIT = render_tool_call("submit", {})
PER_FAMILY = max(len(v) for v in FAMILIES.values())  # every variant of every family


def oracle_command(env: TerminalEnv, task_id: str) -> str:
    (call,) = parse_action(env.load_task(task_id).oracle[0]).calls
    return call.arguments["command"]


def reward(env: TerminalEnv, task_id: str, actions: list[str]) -> float:
    env.reset(options={"task_id": task_id})
    for action in actions:
        _, r, term, _, info = env.step(action)
        assert info["status"] == "ok", (task_id, info["next_state"].content)
    assert term and info["next_state"].kind == "tests"
    return info["next_state"].data["reward"]


def check_oracle_and_nothing(env: TerminalEnv, task_id: str) -> None:
    task = env.load_task(task_id)
    assert len(task.oracle) == 2 and "\n" not in oracle_command(env, task_id)  # one command line, no script wrapper
    assert reward(env, task_id, task.oracle) == 1.0, (task_id, env.task.prompt)
    assert reward(env, task_id, [SUBMIT]) == 0.0, (task_id, "doing nothing passed")


@pytest.fixture(scope="module")
def bwrap_env():
    e = TerminalEnv(families="all", tasks_per_family=PER_FAMILY, sandbox="bwrap", max_turns=3)
    yield e
    e.close()


def test_families_make_distinct_tasks_the_same_way_for_the_same_seed(tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    ids = write_suite(a, "all", 3, seed=7)
    assert write_suite(b, "all", 3, seed=7) == ids and len(ids) == 3 * len(FAMILIES)
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files)
    write_suite(c, "all", 3, seed=8)
    differ = sum((a / i / "tests" / "expected.json").read_text() != (c / i / "tests" / "expected.json").read_text() for i in ids)
    assert differ >= len(ids) - 2  # another seed draws other parameters
    # hundreds of tasks per family, not a handful repeated
    assert len({make_spec("sort", i).setup[0] for i in range(200)}) == 200
    assert json.loads((a / "git-0000" / "tests" / "expected.json").read_text())[0]["kind"] == "git_log"


def test_unknown_family_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"unknown terminal task families \['nope'\]; choose among sort, "):
        TerminalEnv(families=["sort", "nope"], sandbox="bwrap")
    with pytest.raises(ValueError, match="does not apply with tasks_dir"):
        TerminalEnv(families="all", tasks_dir="/tmp", sandbox="bwrap")


def test_selection_and_held_out_split_draw_from_the_chosen_families():
    env = TerminalEnv(families=["sort", "git"], tasks_per_family=10, seed=3, sandbox="bwrap")
    ids = env.task_ids()
    assert len(ids) == 20 and {i.rsplit("-", 1)[0] for i in ids} == {"sort", "git"}
    split = env.task_split(6, seed=1234)
    assert len(split.held_out) == 6 and not set(split.held_out) & set(split.train)
    assert {i.rsplit("-", 1)[0] for i in split.train} == {"sort", "git"}
    env.close()


@pytest.mark.bwrap
@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_oracle_passes_and_doing_nothing_fails_on_bwrap(bwrap_env, family):
    index = list(FAMILIES).index(family) % len(FAMILIES[family])  # a different variant in each family
    check_oracle_and_nothing(bwrap_env, f"{family}-{index:04d}")


@pytest.mark.bwrap
@pytest.mark.full
def test_every_variant_on_bwrap(bwrap_env):
    for task_id in bwrap_env.task_ids():
        check_oracle_and_nothing(bwrap_env, task_id)


NEAR_MISSES = {  # task -> a wrong command made from its oracle's
    "sort-0002": lambda cmd: cmd.replace("sort -n ", "sort "),  # text order, not numeric
    "script-0000": lambda cmd: cmd.split(" && chmod")[0],  # the script, not executable
    "git-0002": lambda cmd: cmd.replace(" && git checkout -qb ", " && echo "),  # the commit lands on main
    "archive-0000": lambda cmd: cmd.replace("tar -czf", "tar -cf"),  # not gzip-compressed
    "permissions-0000": lambda cmd: "chmod 777 " + cmd.split()[-1],  # not the mode asked for
    "count-0000": lambda cmd: cmd.replace("wc -l < ", "wc -l "),  # the number with the file name after it
}


@pytest.mark.bwrap
@pytest.mark.parametrize("task_id", list(NEAR_MISSES))
def test_near_miss_fails_on_bwrap(bwrap_env, task_id):
    wrong = NEAR_MISSES[task_id](oracle_command(bwrap_env, task_id))
    assert wrong != oracle_command(bwrap_env, task_id)
    assert reward(bwrap_env, task_id, [render_tool_call("bash", {"command": wrong}), SUBMIT]) == 0.0, wrong


@pytest.mark.docker
@pytest.mark.parametrize("task_id", ["permissions-0003", "git-0001", "script-0001"])
def test_family_oracle_passes_and_doing_nothing_fails_on_docker(task_id):
    env = TerminalEnv(families=["permissions", "git", "script"], tasks_per_family=PER_FAMILY, sandbox="docker", pool_size=1)
    try:
        check_oracle_and_nothing(env, task_id)
    finally:
        env.close()


def _script_check(task_id: str) -> dict:
    family, index = task_id.rsplit("-", 1)
    return next(c for c in make_spec(family, int(index)).checks if c["kind"] == "run")


CHEATS = {  # how a script the verifier runs could pass without doing the task
    "reads the stored answers": (
        "import json, sys\n"
        "for c in json.load(open('/tests/expected.json')):\n"
        "    if c['kind'] == 'run' and c['argv'][1:] == sys.argv[1:]:\n"
        "        sys.stdout.write(c['stdout'])\n"),
    "leaves a reward writer behind": (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    for _ in range(300):\n"
        "        os.makedirs('/logs/verifier', exist_ok=True)\n"
        "        open('/logs/verifier/reward.txt', 'w').write('1')\n"
        "        time.sleep(0.05)\n"),
}


@pytest.mark.bwrap
@pytest.mark.parametrize("cheat", list(CHEATS))
def test_a_script_that_games_the_verifier_scores_zero(bwrap_env, cheat):
    task_id = "script-0001"
    path = _script_check(task_id)["argv"][0]
    source = "#!/usr/bin/env python3\n" + CHEATS[cheat]
    write = render_tool_call("bash", {"command": f"cat > {path} <<'EOF'\n{source}EOF\nchmod +x {path}"})
    assert reward(bwrap_env, task_id, [write, SUBMIT]) == 0.0, cheat


def test_no_two_tasks_of_a_suite_are_the_same_for_the_agent(tmp_path):
    ids = write_suite(tmp_path / "a", "all", 40)
    seen = set()
    for task_id in ids:  # held-out ids are drawn from these: none may copy a training task's instruction and command
        family, index = task_id.rsplit("-", 1)
        spec = make_spec(family, int(index))
        assert (spec.instruction, spec.solution) not in seen, task_id
        seen.add((spec.instruction, spec.solution))
    assert len(ids) == 400 and max(int(i.rsplit("-", 1)[1]) for i in ids) >= 40  # repeated draws skipped, later indices taken
    with pytest.raises(ValueError, match="'archive' gave 65 distinct tasks"):
        write_suite(tmp_path / "b", ["archive"], 100)
