"""The live-user proxy with the official `openai` client over real HTTP, in front of a real
tiny-model engine served over SGLang's HTTP API: sessions in parallel, next-state lag, side
turns, session done, streaming, keys, TTL expiry, records per version, a weight swap mid-serve."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import httpx
import openai
import pytest

from agent.chat import ChatRenderer
from agent.policy.base import SamplingParams
from agent.policy.engine import Engine
from agent.policy.engine import Request as EngineRequest
from agent.policy.models import save_model, tiny_model
from agent.policy.server import serve
from agent.proxy import Proxy
from agent.proxy_openai import assistant_message, stream_events, template_messages
from agent.turn import Turn
from envs.tool_calls import function_schema

KEY = "sk-proxy-test"
TOL = 1e-4  # fp32 CPU log-probs of the same ids in a different batch
MAX_TOKENS = 8


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    engine = Engine("tiny", dtype="float32", seed=0, max_batch=16)
    handle = serve(engine)
    records = tmp_path_factory.mktemp("records")
    proxy = Proxy(handle.url, engine.tokenizer, "tiny", KEY, record_dir=records).start()
    try:
        yield engine, handle.url, proxy, records
    finally:
        proxy.stop()
        handle.stop()
        engine.close()


def client(proxy: Proxy, key: str = KEY, timeout: float = 120) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key=key, max_retries=0, timeout=timeout)


def headers(session: str | None, turn_type: str | None = None, done: bool = False) -> dict[str, str]:
    h = {}
    if session is not None:
        h["X-Session-Id"] = session
    if turn_type is not None:
        h["X-Turn-Type"] = turn_type
    if done:
        h["X-Session-Done"] = "true"
    return h


async def collect(proxy: Proxy, n: int, prefix: str, timeout_s: float = 60.0) -> list[Turn]:
    """The next n finished turns of sessions whose id starts with `prefix` (others are skipped)."""
    got: list[Turn] = []

    async def run() -> None:
        async for t in proxy.turns():
            if t.meta["session_id"].startswith(prefix):
                got.append(t)
                if len(got) == n:
                    return

    await asyncio.wait_for(run(), timeout_s)
    return got


async def same_as_sampler(engine: Engine, turn: Turn, seed: int, temperature: float = 1.0) -> None:
    """The turn holds exactly what the sampler returns for its prompt ids (ids and log-probs)."""
    renderer = ChatRenderer(engine.tokenizer)
    again = await engine.generate(turn.prompt_ids, SamplingParams(
        max_new_tokens=MAX_TOKENS, temperature=temperature, stop_token_ids=renderer.stop_token_ids, seed=seed))
    assert turn.response_ids == again.output_ids
    assert len(turn.rollout_logprobs) == len(turn.response_ids)
    assert max(abs(a - b) for a, b in zip(turn.rollout_logprobs, again.logprobs)) < TOL


def test_parallel_sessions_next_state_lag_and_session_done(stack):
    engine, _, proxy, records = stack
    renderer = ChatRenderer(engine.tokenizer)
    n_sessions, n_turns = 3, 3

    async def session(i: int, c: openai.AsyncOpenAI) -> list[tuple[list[dict], str]]:
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"session {i} hello"}]
        sent = []
        for t in range(n_turns):
            resp = await c.chat.completions.create(
                model="tiny", messages=messages, max_tokens=MAX_TOKENS, seed=100 * i + t,
                extra_headers=headers(f"par-{i}", "main", done=t == n_turns - 1))
            reply = resp.choices[0].message.content
            assert resp.choices[0].finish_reason in ("stop", "length")
            sent.append((list(messages), reply))
            messages = messages + [{"role": "assistant", "content": reply},
                                   {"role": "user", "content": f"session {i} reply {t}"}]
        return sent

    async def go():
        c = client(proxy)
        consumer = asyncio.create_task(collect(proxy, n_sessions * n_turns, "par-"))
        sent = await asyncio.gather(*[session(i, c) for i in range(n_sessions)])
        turns = await consumer
        await c.close()
        for i in range(n_sessions):
            mine = sorted((t for t in turns if t.meta["session_id"] == f"par-{i}"), key=lambda t: t.step_index)
            assert [t.step_index for t in mine] == list(range(n_turns))
            assert len({t.episode_id for t in mine}) == 1
            for t, (messages, reply) in zip(mine, sent[i]):
                assert t.prompt_ids == renderer.render_prompt(messages)  # the chat-template render
                assert t.action == reply == renderer.response_text(t.response_ids)
                await same_as_sampler(engine, t, seed=100 * i + t.step_index)
            for t in mine[:-1]:  # turn t's next state: the last message of the next main request
                assert (t.next_state.role, t.next_state.kind) == ("user", "user_reply")
                assert t.next_state.content == f"session {i} reply {t.step_index}"
                assert not t.episode_done and t.meta["closed"] == "next_request"
            last = mine[-1]
            assert last.episode_done and last.meta["closed"] == "session_done"
            assert last.next_state.kind == "none" and not last.next_state.content and not last.next_state.data
        return turns

    turns = asyncio.run(go())
    recorded = [json.loads(line) for line in (records / "turns-v0.jsonl").read_text().splitlines()]
    by_key = {(r["episode_id"], r["step_index"]): r for r in recorded}
    for t in turns:
        assert Turn.from_json(by_key[(t.episode_id, t.step_index)]).response_ids == t.response_ids


def test_side_turns_are_served_not_recorded(stack):
    _, _, proxy, _ = stack

    async def go():
        c = client(proxy)
        consumer = asyncio.create_task(collect(proxy, 2, "side-"))
        first = [{"role": "user", "content": "what is 2+2?"}]
        r1 = await c.chat.completions.create(model="tiny", messages=first, max_tokens=MAX_TOKENS,
                                             extra_headers=headers("side-a"))  # no X-Turn-Type: main
        side = await c.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "give this chat a title"}], max_tokens=MAX_TOKENS,
            extra_headers=headers("side-a", "side"))
        assert side.choices[0].message.role == "assistant"
        second = first + [{"role": "assistant", "content": r1.choices[0].message.content},
                          {"role": "user", "content": "no, it is 4"}]
        await c.chat.completions.create(model="tiny", messages=second, max_tokens=MAX_TOKENS,
                                        extra_headers=headers("side-a", "MAIN", done=True))
        turns = await consumer
        await c.close()
        return turns

    t0, t1 = sorted(asyncio.run(go()), key=lambda t: t.step_index)
    assert (t0.step_index, t1.step_index) == (0, 1)
    assert t0.next_state.content == "no, it is 4"  # not the side request's message
    assert all("title" not in m["content"] for t in (t0, t1) for m in t.messages)


def test_streaming_and_tools_passed_through(stack):
    engine, _, proxy, _ = stack
    renderer = ChatRenderer(engine.tokenizer)
    tools = [function_schema("lookup", "Look a word up", {"word": {"type": "string"}}, ["word"])]
    messages = [{"role": "user", "content": "define proxy"}]

    async def go():
        c = client(proxy)
        consumer = asyncio.create_task(collect(proxy, 1, "stream-"))
        stream = await c.chat.completions.create(
            model="tiny", messages=messages, tools=tools, max_tokens=MAX_TOKENS, seed=7, stream=True,
            stream_options={"include_usage": True}, extra_headers=headers("stream-a", done=True))
        chunks = [ch async for ch in stream]
        turn, = await consumer
        await c.close()
        return chunks, turn

    chunks, turn = asyncio.run(go())
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert text == turn.action and finishes == [turn.finish_reason]
    assert chunks[-1].usage.completion_tokens == len(turn.response_ids)
    assert chunks[-1].usage.prompt_tokens == len(turn.prompt_ids)
    assert turn.tools == tools and turn.prompt_ids == renderer.render_prompt(messages, tools)
    assert "lookup" in engine.tokenizer.decode(turn.prompt_ids)
    asyncio.run(same_as_sampler(engine, turn, seed=7))


def test_tool_call_replies_in_openai_format():
    raw = 'Let me check.\n<tool_call>\n{"name": "lookup", "arguments": {"word": "proxy"}}\n</tool_call>'
    message, finish = assistant_message(raw)
    assert finish == "tool_calls" and message["content"] == "Let me check."
    call, = message["tool_calls"]
    assert call["type"] == "function" and call["function"]["name"] == "lookup"
    assert json.loads(call["function"]["arguments"]) == {"word": "proxy"}
    # The client sends the call back in the history: the template sees the <tool_call> block again.
    back = template_messages([{"role": "developer", "content": "sys"}, message,
                              {"role": "tool", "tool_call_id": call["id"], "content": "a go-between"}])
    assert back[0] == {"role": "system", "content": "sys"}
    assert back[1]["content"].startswith("Let me check.\n<tool_call>") and '"word": "proxy"' in back[1]["content"]
    assert back[2] == {"role": "tool", "content": "a go-between"}
    events = list(stream_events("tiny", raw, "stop", 5, 9))
    assert events[-1] == "data: [DONE]\n\n"
    chunks = [json.loads(e[len("data: "):]) for e in events[:-1]]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert any(ch["choices"][0]["delta"].get("tool_calls") for ch in chunks)
    broken = "<tool_call>{not json</tool_call>"  # unreadable calls go back as text, not guessed at
    assert assistant_message(broken) == ({"role": "assistant", "content": broken}, None)


def test_keys_and_bad_requests(stack):
    engine, _, proxy, _ = stack

    async def go():
        wrong = client(proxy, "sk-wrong")
        with pytest.raises(openai.AuthenticationError):
            await wrong.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(openai.AuthenticationError):
            await wrong.models.list()
        await wrong.close()
        c = client(proxy)
        assert [m.id for m in (await c.models.list()).data] == ["tiny"]
        too_long = [{"role": "user", "content": "x" * (engine.max_positions + 10)}]  # refused by the policy itself
        with pytest.raises(openai.BadRequestError) as e:
            await c.chat.completions.create(model="tiny", messages=too_long, max_tokens=4)
        assert e.value.code == "context_length_exceeded"  # OpenAI's code: a client can end the conversation
        for kwargs in ({"n": 2}, {"stop": ["\n"]}, {"messages": []}):
            with pytest.raises(openai.BadRequestError):
                await c.chat.completions.create(**{"model": "tiny", "max_tokens": 4,
                                                   "messages": [{"role": "user", "content": "hi"}], **kwargs})
        with pytest.raises(openai.BadRequestError):
            await c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                            extra_headers=headers("bad", "sidequest"))
        await c.close()

    asyncio.run(go())
    missing = httpx.post(proxy.url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]})
    assert missing.status_code == 401 and "API key" in missing.json()["error"]["message"]


def test_session_end_gives_the_last_turn_the_users_closing_words(stack):
    _, _, proxy, _ = stack
    end = proxy.url + "/v1/sessions/{}/end"
    auth = {"Authorization": f"Bearer {KEY}"}

    async def go():
        c = client(proxy)
        consumer = asyncio.create_task(collect(proxy, 2, "end-"))
        for sid in ("end-words", "end-silent"):
            await c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                            max_tokens=MAX_TOKENS, extra_headers=headers(sid, "main"))
        async with httpx.AsyncClient() as h:
            assert (await h.post(end.format("end-words"), json={"message": {"role": "user", "content": "thanks!"}})).status_code == 401
            assert (await h.post(end.format("end-words"), headers=auth, json={"message": {"role": "robot"}})).status_code == 400
            assert (await h.post(end.format("end-words"), headers=auth, content=b"{not json")).status_code == 400
            r = await h.post(end.format("end-words"), headers=auth, json={"message": {"role": "user", "content": "thanks!"}})
            assert r.status_code == 200 and r.json()["closed_turn"] is True
            assert (await h.post(end.format("end-silent"), headers=auth)).status_code == 200
            assert (await h.post(end.format("end-words"), headers=auth)).status_code == 404  # already over
        turns = {t.meta["session_id"]: t for t in await consumer}
        await c.close()
        return turns

    turns = asyncio.run(go())
    words, silent = turns["end-words"], turns["end-silent"]
    assert words.episode_done and words.meta["closed"] == "session_end"
    assert (words.next_state.role, words.next_state.kind, words.next_state.content) == ("user", "user_reply", "thanks!")
    assert silent.episode_done and silent.next_state.kind == "none"


def test_request_without_session_is_a_session_of_its_own(stack):
    _, _, proxy, _ = stack

    async def go():
        c = client(proxy)
        consumer = asyncio.create_task(collect(proxy, 1, "anon-"))
        await c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                        max_tokens=MAX_TOKENS)
        turn, = await consumer
        await c.close()
        return turn

    turn = asyncio.run(go())
    assert turn.episode_done and turn.meta["closed"] == "session_done" and turn.next_state.kind == "none"


def test_pending_turn_expires_after_ttl(stack):
    engine, url, _, _ = stack
    with Proxy(url, engine.tokenizer, "tiny", KEY, ttl_s=0.3) as proxy:
        async def go():
            c = client(proxy)
            consumer = asyncio.create_task(collect(proxy, 1, "ttl-", timeout_s=20))
            await c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                            max_tokens=MAX_TOKENS, extra_headers=headers("ttl-a"))
            t0 = time.monotonic()
            expired, = await consumer
            waited = time.monotonic() - t0
            # The same id afterwards is a new episode: its reply does not reach the expired turn.
            consumer = asyncio.create_task(collect(proxy, 1, "ttl-", timeout_s=20))
            await c.chat.completions.create(model="tiny", max_tokens=MAX_TOKENS, extra_headers=headers("ttl-a", done=True),
                                            messages=[{"role": "user", "content": "hi"},
                                                      {"role": "assistant", "content": expired.action},
                                                      {"role": "user", "content": "late reply"}])
            later, = await consumer
            await c.close()
            return expired, waited, later

        expired, waited, later = asyncio.run(go())
    assert expired.meta["closed"] == "expired" and expired.next_state.kind == "none" and expired.episode_done
    assert 0.1 < waited < 10
    assert later.episode_id != expired.episode_id and later.step_index == 0


def test_request_during_weight_swap_is_served_with_new_version(stack, tmp_path):
    """Last in this module: it changes the served weights."""
    engine, _, proxy, records = stack
    model, tok = tiny_model(seed=1)
    save_model(model, tok, tmp_path / "v1")
    old = engine.weight_version
    prompt = engine.tokenizer("hold the batch")["input_ids"]

    async def go():
        c = client(proxy, timeout=600)
        consumer = asyncio.create_task(collect(proxy, 1, "swap-", timeout_s=600))
        # A long request keeps the engine busy: the swap waits for it (running sequences finish on
        # the old weights), and everything that arrives meanwhile queues behind the swap. Its
        # length is sized from the decode speed right now, for about 4 s of decoding.
        t0 = time.monotonic()
        await engine.run(EngineRequest(prompt, SamplingParams(max_new_tokens=32), ignore_eos=True))
        hold_tokens = int(min(3500, max(64, 32 / (time.monotonic() - t0) * 4)))
        hold = asyncio.create_task(engine.run(EngineRequest(prompt, SamplingParams(max_new_tokens=hold_tokens),
                                                            ignore_eos=True)))
        await asyncio.sleep(0.3)
        swap = asyncio.create_task(engine.update_weights(str(tmp_path / "v1")))
        await asyncio.sleep(1.0)
        during = not hold.done() and not swap.done()
        resp = await c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                               max_tokens=MAX_TOKENS, extra_headers=headers("swap-a", done=True))
        new = await swap
        held = await hold
        turn, = await consumer
        await c.close()
        return during, resp, new, held, turn

    during, resp, new, held, turn = asyncio.run(go())
    assert during, "the swap finished before the request was sent; the hold was too short"
    assert resp.choices[0].message.role == "assistant"  # served, not refused
    assert held.weight_version == old and new == old + 1
    assert turn.policy_version == new
    recorded = [json.loads(line) for line in (records / f"turns-v{new}.jsonl").read_text().splitlines()]
    assert [r["response_ids"] for r in recorded if r["episode_id"] == turn.episode_id] == [turn.response_ids]


@pytest.mark.slow
def test_command_line_proxy_records_and_closes_pending_on_stop(stack, tmp_path):
    _, url, _, _ = stack
    proc = subprocess.Popen([sys.executable, "-m", "agent.proxy", "--policy-url", url, "--model", "tiny",
                             "--port", "0", "--api-key", KEY, "--record-dir", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = proc.stdout.readline()
        assert "proxy serving on" in line, line
        proxy_url = line.split()[3]
        resp = httpx.post(proxy_url + "/v1/chat/completions", timeout=60,
                          headers={"Authorization": f"Bearer {KEY}", "X-Session-Id": "cli-a"},
                          json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
        assert resp.status_code == 200 and "proxy;dur=" in resp.headers["server-timing"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    assert proc.returncode == 0
    files = [f for f in os.listdir(tmp_path) if f.startswith("turns-v")]
    rec, = [json.loads(line) for f in files for line in (tmp_path / f).read_text().splitlines()]
    assert rec["meta"]["session_id"] == "cli-a" and rec["meta"]["closed"] == "proxy_stopped"
