"""The next-state scorer with the rules judge, with an LLM judge answering canned texts, and the
OPD teacher through the real tiny model behind the engine's HTTP server."""
from __future__ import annotations

import asyncio

import pytest

from agent.chat import ChatRenderer
from agent.policy.base import SamplingParams
from agent.policy.engine import Engine
from agent.turn import turn_record
from agent.policy.models import byte_tokenizer
from agent.policy.server import serve
from agent.policy.sglang_client import SGLangClient
from envs.base import NextState
from learner.advantages import build_samples
from learner.judges import LLMJudge, RulesJudge, generic_verdict
from learner.prompts import HINT_HEADER, messages_with_hint
from learner.scorer import NextStateScorer
from tests.learner_turns import make_turn, opd_signal

HINT = "Pass --all to list hidden files as well."


# ---- rules judge --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "ns,status,expected",
    [
        (NextState("user", "no, wrong file", "user_reply", {"verdict": -1, "hint": HINT}), "ok", (-1, HINT)),
        (NextState("user", "thanks", "user_reply", {"verdict": "1"}), "ok", (1, "")),
        (NextState("tool", "boom", "shell", {"exit_code": 2}), "ok", (-1, "")),
        (NextState("tool", "a b", "shell", {"exit_code": 0}), "ok", (1, "")),
        (NextState("tool", "Traceback", "tool_result", {"error": "ZeroDivisionError"}), "ok", (-1, "")),
        (NextState("tool", "ok", "tool_result", {"returncode": 0}), "ok", (1, "")),
        (NextState("tool", "3 passed", "tests", {"passed": 3, "failed": 0}), "ok", (1, "")),
        (NextState("tool", "1 failed", "tests", {"passed": 2, "failed": 1}), "ok", (-1, "")),
        (NextState("tool", "0 tests", "tests", {"passed": 0}), "ok", (-1, "")),
        (NextState("tool", "bad call", "tool_result", {}), "invalid_action", (-1, "")),
        (NextState("tool", "<screen>", "screen", {}), "ok", (0, "")),
        (NextState("user", "hm", "user_reply", {"verdict": 7}), "ok", (0, "")),  # not a verdict
    ],
)
def test_generic_rule(ns, status, expected):
    assert generic_verdict(make_turn(next_state=ns, status=status)) == expected


def test_rules_scorer_binary_fills_prm_only():
    scorer = NextStateScorer(RulesJudge(), None, None, n_votes=3, mode="binary")
    recorded = make_turn(next_state=NextState("tool", "err", "shell", {"exit_code": 1}))
    turn = asyncio.run(scorer.score(recorded))
    assert recorded.prm is None and recorded.opd is None  # the runner's record is never changed
    assert turn.prm.votes == [-1] and turn.prm.score == -1 and turn.prm.texts
    assert turn.opd is None


def test_infra_turns_are_not_scored():
    scorer = NextStateScorer(RulesJudge(), None, None, mode="binary")
    turn = asyncio.run(scorer.score(make_turn(status="infra_error")))
    assert turn.prm is None and turn.opd is None


def test_opd_modes_need_a_teacher():
    with pytest.raises(ValueError, match="needs a teacher"):
        NextStateScorer(RulesJudge(), None, None, mode="opd")
    with pytest.raises(ValueError, match="unknown mode"):
        NextStateScorer(RulesJudge(), None, None, mode="ppo")


# ---- LLM judge with canned answers ------------------------------------------------------------
class CannedChat:
    """A chat client whose answers are fixed texts (or exceptions, or hangs), in call order."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.calls = []

    async def complete(self, messages, temperature=0.6, max_tokens=1024, n=1):
        self.calls.append((messages, temperature, max_tokens, n))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        if answer == "HANG":
            await asyncio.sleep(30)
        return answer if isinstance(answer, list) else [answer]


def judge_turn():
    messages = [
        {"role": "system", "content": "You are a shell agent."},
        {"role": "user", "content": "Show every file in the folder, hidden ones too."},
    ]
    return make_turn(messages=messages, action="ls", next_state=NextState("user", "You missed the dotfiles.", "user_reply", {}))


@pytest.mark.parametrize(
    "answers,votes,score",
    [
        (["(b) a correction. \\boxed{-1}", "\\boxed{-1}", "clearly bad \\boxed{-1}"], [-1, -1, -1], -1),
        (["\\boxed{1}", "first \\boxed{1}, on reflection \\boxed{-1}", "no box here"], [1, -1, None], 0),  # tie
        (["\\boxed{1}", "\\boxed{2}", "\\boxed{1}"], [1, None, 1], 1),  # an out-of-range box is invalid
        (["nothing", "", "\\boxed{yes}"], [None, None, None], 0),  # no valid vote
        (["\\boxed{0}", "\\boxed{0}", "\\boxed{1}"], [0, 0, 1], 0),
        ([RuntimeError("judge down"), [], "\\boxed{1}"], [None, None, 1], 1),  # failures are invalid votes
    ],
)
def test_llm_prm_votes(answers, votes, score):
    chat = CannedChat(answers)
    scorer = NextStateScorer(LLMJudge(chat, n_votes=3, temperature=0.6, max_tokens=256), None, None, mode="binary")
    turn = asyncio.run(scorer.score(judge_turn()))
    assert turn.prm.votes == votes and turn.prm.score == score
    assert len(turn.prm.texts) == 3
    messages, temperature, max_tokens, n = chat.calls[0]
    assert (temperature, max_tokens, n) == (0.6, 256, 1)
    # the judge sees the request, the action and the next state with its role
    prompt = messages[-1]["content"]
    assert "Show every file in the folder" in prompt and "ls" in prompt
    assert "role: user" in prompt and "You missed the dotfiles." in prompt


def test_llm_judge_timeout_is_an_invalid_vote():
    chat = CannedChat(["HANG", "\\boxed{-1}"])
    judge = LLMJudge(chat, n_votes=2, timeout_s=0.2)
    votes = asyncio.run(judge.prm_votes(judge_turn()))
    assert [v.score for v in votes] == [None, -1]
    assert "TimeoutError" in votes[0].text


def test_llm_hint_votes_select_longest_valid():
    long_hint = "List with ls -a so that dotfiles such as .env are shown too."
    chat = CannedChat([
        "\\boxed{1} [HINT_START]use ls -a[HINT_END]",  # too short
        f"\\boxed{{1}}\n[HINT_START]\n{long_hint}\n[HINT_END]",
        "\\boxed{-1} [HINT_START]an even longer hint that must be ignored since the vote is -1[HINT_END]",
        "\\boxed{1} but no hint block",
    ])
    judge = LLMJudge(chat, n_votes=4)
    votes = asyncio.run(judge.hint_votes(judge_turn()))
    assert [v.score for v in votes] == [1, 1, -1, 1]
    assert [v.hint for v in votes] == ["use ls -a", long_hint, "", ""]


# ---- teacher through the real tiny model ------------------------------------------------------
@pytest.fixture(scope="module")
def engine_url():
    engine = Engine("tiny", dtype="float32", seed=0)
    handle = serve(engine)
    try:
        yield engine, handle
    finally:
        handle.stop()
        engine.close()


async def rollout_turn(client: SGLangClient, renderer: ChatRenderer, next_state: NextState):
    messages = [{"role": "user", "content": "Say something short."}]
    prompt = renderer.render_prompt(messages)
    out = await client.generate(prompt, SamplingParams(max_new_tokens=12, temperature=1.0, seed=3))
    turn = make_turn(messages=messages, next_state=next_state)
    turn.prompt_ids, turn.response_ids, turn.rollout_logprobs = prompt, out.output_ids, out.logprobs
    return turn


def test_teacher_alignment_empty_hint_gives_zero_opd_advantage(engine_url):
    engine, server = engine_url
    renderer = ChatRenderer(engine.tokenizer)

    async def go():
        async with SGLangClient(server.url, api_key=server.api_key) as client:
            scorer = NextStateScorer(RulesJudge(), client, renderer, mode="opd")
            turn = await rollout_turn(client, renderer, NextState("user", "ok", "user_reply", {}))
            return turn, await scorer.teacher_logprobs(turn, "")

    turn, teacher = asyncio.run(go())
    assert len(teacher) == len(turn.response_ids) > 0
    assert teacher == pytest.approx(turn.rollout_logprobs, abs=1e-4)
    turn.opd = opd_signal(accepted=True, teacher_logprobs=teacher)
    samples, _ = build_samples([turn], "opd")
    assert max(abs(a) for a in samples[0].advantages) < 1e-4


def test_rules_hint_conditions_the_teacher(engine_url):
    engine, server = engine_url
    renderer = ChatRenderer(engine.tokenizer)
    ns = NextState("user", "not like that", "user_reply", {"verdict": -1, "hint": HINT})

    async def go():
        async with SGLangClient(server.url, api_key=server.api_key) as client:
            scorer = NextStateScorer(RulesJudge(), client, renderer, mode="combine")
            turn = await scorer.score(await rollout_turn(client, renderer, ns))
            return turn, await scorer.teacher_logprobs(turn, "")

    turn, plain = asyncio.run(go())
    assert turn.prm.score == -1
    assert turn.opd.accepted and turn.opd.hint == HINT
    assert len(turn.opd.teacher_logprobs) == len(turn.response_ids)
    assert turn.opd.teacher_logprobs != pytest.approx(plain, abs=1e-6)  # the hint changed the context
    enhanced = renderer.prompt_text(messages_with_hint(turn.messages, HINT))
    assert HINT_HEADER + HINT in enhanced
    samples, _ = build_samples([turn], "combine")
    expected = [t - o - 1 for t, o in zip(turn.opd.teacher_logprobs, turn.rollout_logprobs)]
    assert samples[0].advantages == pytest.approx(expected)


def test_teacher_failure_drops_the_hint_not_the_run():
    renderer = ChatRenderer(byte_tokenizer())
    ns = NextState("user", "not like that", "user_reply", {"verdict": -1, "hint": HINT})

    async def go():
        async with SGLangClient("http://127.0.0.1:9", retries=0) as dead:
            scorer = NextStateScorer(RulesJudge(), dead, renderer, mode="combine")
            return await scorer.score(make_turn(next_state=ns))

    turn = asyncio.run(go())
    assert turn.prm.score == -1
    assert turn.opd.accepted is False and "teacher" in turn.opd.error
    record = turn_record(turn)["opd"]  # turns.jsonl: unset fields are left out
    assert list(record) == ["votes", "hints", "texts", "hint", "accepted", "error"] and record["accepted"] is False



def test_a_broken_judge_never_breaks_scoring():
    def rule(turn):
        raise KeyError("verdict")

    tok_renderer = ChatRenderer(byte_tokenizer())

    async def go():
        async with SGLangClient("http://127.0.0.1:9", retries=0) as dead:
            return await NextStateScorer(RulesJudge(rule), dead, tok_renderer, mode="combine").score(make_turn())

    turn = asyncio.run(go())
    assert turn.prm.score == 0 and "KeyError" in turn.prm.error
    assert turn.opd.accepted is False and "KeyError" in turn.opd.error
