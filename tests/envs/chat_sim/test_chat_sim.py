"""ChatSimEnv end to end: sessions with the scripted and the LLM-backed user, limits, files."""
from __future__ import annotations

import json
import warnings

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import envs  # noqa: F401  (registers the envs)
from envs.chat_sim import ChatSimEnv
from envs.chat_sim.problems import from_jsonl
from envs.chat_sim.users import AGENT_PREFIX, MAX_USER_CHARS

AI_LOOKING = "## Solution\n1. **Add** them\n2. Halve it\n\n**Final answer:** 7"


def test_registered_and_passes_check_env():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env = gymnasium.make("openclaw/ChatSim-v0").unwrapped
        assert isinstance(env, ChatSimEnv)
        check_env(env, skip_render_check=True)


def test_reset_is_seeded_and_reports_messages():
    env = ChatSimEnv()
    a, info_a = env.reset(seed=3)
    b, info_b = env.reset(seed=3)
    assert a == b and info_a["task_id"] == info_b["task_id"]
    assert info_a["messages"] == [{"role": "user", "content": a}] and info_a["tools"] == []
    assert ChatSimEnv(system_prompt="Be helpful.").reset(seed=0)[1]["messages"][0]["role"] == "system"


@pytest.mark.parametrize("persona", ["student", "teacher", "student_no_bold", "student_brief", "student_brief_correct"])
def test_oracle_satisfies_on_turn_one(persona):
    env = ChatSimEnv(persona=persona)
    for tid in env.task_ids()[:15]:
        env.reset(options={"task_id": tid})
        obs, reward, term, trunc, info = env.step(env.oracle_action())
        ns = info["next_state"]
        assert (reward, term, trunc, info["outcome"], info["status"]) == (1.0, True, False, 1.0, "ok")
        assert ns.role == "user" and ns.kind == "user_reply"
        assert ns.data["verdict"] == 1 and ns.data["satisfied"] and ns.data["failed"] == []
        assert ns.data["score"] == 1.0 and env.personas[persona].done_phrase in obs


def test_rewrite_then_satisfied():
    env = ChatSimEnv(persona="student")
    env.reset(options={"task_id": "student/gen-0005"})
    obs, reward, term, trunc, info = env.step(AI_LOOKING)
    data = info["next_state"].data
    assert (reward, term, trunc, info["outcome"]) == (0.0, False, False, None)
    assert data["verdict"] == -1 and not data["satisfied"]
    assert {"no_markdown_bold", "no_headers", "no_lists", "no_final_answer"} <= set(data["failed"])
    assert "don't use any bold text." in data["hint"] and data["hint"] in obs
    assert data["score"] < 1.0
    obs, reward, term, trunc, info = env.step(env.oracle_action())
    assert (reward, term, info["turn"]) == (1.0, True, 2) and "HOMEWORK_DONE" in obs
    with pytest.raises(RuntimeError):
        env.step("again")


def test_turn_limit_ends_unsatisfied():
    env = ChatSimEnv(persona="teacher", max_turns=8)
    env.reset(options={"task_id": "teacher/gen-0001"})
    for turn in range(1, 9):
        obs, reward, term, trunc, info = env.step("Wrong.")
        assert info["next_state"].data["verdict"] == -1 and not term
        assert trunc == (turn == 8)
    assert reward == -1.0 and info["outcome"] == -1.0
    assert len(env.history) == 1 + 2 * 8


def test_empty_reply_is_invalid_action():
    env = ChatSimEnv(persona="student")
    env.reset(options={"task_id": "student/gen-0000"})
    obs, _, term, _, info = env.step("   ")
    assert info["status"] == "invalid_action" and not term
    assert obs == env.personas["student"].empty_reply and info["next_state"].data["verdict"] == -1


def test_one_preference_persona_only_minds_bold():
    env = ChatSimEnv(persona="student_no_bold")
    env.reset(options={"task_id": "student_no_bold/gen-0000"})
    obs, _, term, _, info = env.step("**7**")
    assert not term and info["next_state"].data["failed"] == ["no_markdown_bold"]
    obs, reward, term, _, _ = env.step("## 7\n- 7\nFinal answer: 7")
    assert term and reward == 1.0


def test_random_actions_never_crash():
    env = ChatSimEnv()
    rng = np.random.default_rng(0)
    outcomes, verdicts = set(), set()
    for ep in range(40):
        env.reset(seed=ep)
        done = False
        while not done:
            obs, reward, term, trunc, info = env.step(env.random_action(rng))
            assert isinstance(obs, str) and obs and info["status"] in ("ok", "invalid_action")
            assert 0.0 <= info["next_state"].data["score"] <= 1.0
            verdicts.add(info["next_state"].data["verdict"])
            done = term or trunc
        outcomes.add(reward)
        assert env.turn <= 8
    assert verdicts == {1, -1} and outcomes == {1.0, -1.0}  # varied texts reach both ends


# ---- the LLM-backed user, through a plain `complete(messages) -> str` callable ----------------
def fake_llm_student(messages):
    """Plays a student who only objects to bold: what a caller's model client would return."""
    last = messages[-1]["content"]
    if "**" in last:
        return "<think>it has bold</think>ew, bold text looks so AI. write it without bold.\nVERDICT: unsatisfied"
    return "perfect, that looks like something i'd write. thanks! HOMEWORK_DONE\nVERDICT: satisfied"


def test_llm_user_role_swapped_session():
    calls = []

    def complete(messages):
        calls.append(messages)
        return fake_llm_student(messages)

    env = ChatSimEnv(persona="student", user="llm", complete=complete)
    prompt, _ = env.reset(options={"task_id": "student/gen-0002"})
    obs, reward, term, _, info = env.step("the answer is **7**")
    data = info["next_state"].data
    assert obs == "ew, bold text looks so AI. write it without bold." and not term
    assert data["user_source"] == "llm" and data["verdict"] == -1 and data["hint"] == obs
    assert "no_markdown_bold" in data["failed"]  # rules still report what failed
    msgs = calls[0]
    assert msgs[0]["role"] == "system" and "HOMEWORK_DONE" in msgs[0]["content"] and "VERDICT: satisfied" in msgs[0]["content"]
    assert msgs[1] == {"role": "assistant", "content": prompt}
    assert msgs[2] == {"role": "user", "content": f"{AGENT_PREFIX}\nthe answer is **7**"}
    obs, reward, term, _, info = env.step("the answer is 7")
    assert term and reward == 1.0 and info["next_state"].data["verdict"] == 1
    assert [m["role"] for m in calls[1]] == ["system", "assistant", "user", "assistant", "user"]


def _raises(messages):
    raise ConnectionError("endpoint down")


@pytest.mark.parametrize("complete,reason", [
    (lambda m: "", "empty"),
    (lambda m: "   \n", "empty"),
    (lambda m: "12345 !!!", "no words"),
    (lambda m: None, "not text"),
    (lambda m: "a" * (MAX_USER_CHARS + 1), "longer than"),
    (lambda m: f"{AGENT_PREFIX} sure, here is the solution", "role confusion"),
    (lambda m: m[-1]["content"].split("\n", 1)[1], "echoed"),
    (lambda m: "<think>hmm, let me think", "empty"),
    (_raises, "ConnectionError"),
])
def test_llm_user_nonsense_falls_back_to_rubric(complete, reason):
    for action, verdict in [(AI_LOOKING, -1), (None, 1)]:
        env = ChatSimEnv(persona="student", user="llm", complete=complete)
        env.reset(options={"task_id": "student/gen-0003"})
        obs, reward, term, _, info = env.step(action or env.oracle_action())
        data = info["next_state"].data
        assert data["user_source"] == "rubric" and reason in data["user_fallback"]
        assert data["verdict"] == verdict and term == (verdict == 1)
        assert ("HOMEWORK_DONE" if verdict == 1 else "bold") in obs


def test_llm_user_needs_a_callable():
    with pytest.raises(ValueError, match="complete="):
        ChatSimEnv(user="llm")
    with pytest.raises(ValueError, match="scripted' or 'llm'"):
        ChatSimEnv(user="human")


# ---- problems from a GSM8K-style file, personas from a user's file ----------------------------
def _gsm8k_file(tmp_path, n=6):
    path = tmp_path / "gsm.jsonl"
    rows = [{"question": f"Tom has {i + 2} bags of 3 apples. How many apples?",
             "answer": f"He has {i + 2}*3=<<{i + 2}*3={3 * (i + 2)}>>{3 * (i + 2)} apples.\n#### {3 * (i + 2)}"}
            for i in range(n)]
    rows[1]["student_answer"] = "99"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_gsm8k_file_problems(tmp_path):
    path = _gsm8k_file(tmp_path)
    train, held = from_jsonl(path, "train"), from_jsonl(path, "heldout")
    assert len(train) == 5 and [p.problem_id for p in held] == ["gsm-4"]
    assert train[0].answer == "6" and train[0].steps == ("He has 2*3=6 apples.",)
    assert train[1].student_answer == "99"
    env = ChatSimEnv(problems=path)
    assert len(env.task_ids()) == 10
    for tid in env.task_ids():
        prompt, _ = env.reset(options={"task_id": tid})
        assert "How many apples?" in prompt
        assert env.step(env.oracle_action())[2]
    as_list = tmp_path / "GSM8K.json"
    as_list.write_text(json.dumps([json.loads(line) for line in path.read_text().splitlines()]))
    assert [p.question for p in from_jsonl(as_list, "heldout")] == [p.question for p in held]
    tasks = env.held_out_tasks()
    assert [t.task_id for t in tasks] == ["student/gsm-4", "teacher/gsm-4"]
    assert env.personalization_score(tasks[0], tasks[0].oracle[0]) == 1.0
    assert env.personalization_score(tasks[0], AI_LOOKING) < 1.0


def test_bad_problem_file_gets_a_clear_message(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": "no marker"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:1: answer has no '#### <number>'"):
        ChatSimEnv(problems=bad)
    bad.write_text("not json\n")
    with pytest.raises(ValueError, match="not a GSM8K-style record"):
        ChatSimEnv(problems=bad)
    bad.write_text("[1, 2]\n")
    with pytest.raises(ValueError, match="bad.jsonl:1: not a GSM8K-style record"):
        ChatSimEnv(problems=bad)
    bad_list = tmp_path / "bad.json"
    bad_list.write_text('{"question": "q"}')
    with pytest.raises(ValueError, match="holds a list of records"):
        ChatSimEnv(problems=bad_list)
    with pytest.raises(ValueError, match="cannot read problems file"):
        ChatSimEnv(problems=tmp_path / "none.jsonl")
    with pytest.raises(KeyError, match="unknown chat_sim task"):
        ChatSimEnv().reset(options={"task_id": "student/nope"})


def test_env_with_user_written_persona(tmp_path):
    path = tmp_path / "terse.yaml"
    path.write_text(
        "role: teacher\nfirst_message: 'Grade this: {student_work} (truth {answer})'\n"
        "done_phrase: OK_DONE\nrubric:\n"
        "  - {name: short, check: max_words, words: 20, complaint: Too long., directive: Under 20 words.}\n"
        "  - {name: truth, check: must_be_correct, complaint: No answer., directive: Give the answer.}\n")
    env = ChatSimEnv(persona=[path, "student"])
    assert "terse/gen-0000" in env.task_ids() and "student/gen-0000" in env.task_ids()
    env.reset(options={"task_id": "terse/gen-0000"})
    obs, _, term, _, info = env.step("word " * 30)
    assert obs == "Too long. No answer. Under 20 words. Give the answer." and not term
    obs, reward, term, _, _ = env.step(env.oracle_action())
    assert term and reward == 1.0 and obs == "OK_DONE"
