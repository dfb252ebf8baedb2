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
from agent.proxy.openai_compat import assistant_message, stream_events, template_messages
from agent.turn import Turn
from envs.tool_calls import function_schema
from tests.learner_turns import prm_score

KEY = "sk-proxy-test"
TOL = 1e-4  # fp32 CPU log-probs of the same ids in a different batch
MAX_TOKENS = 8


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    engine = Engine("tiny", dtype="float32", seed=0, max_batch=16)
    handle = serve(engine)
    records = tmp_path_factory.mktemp("records")
    proxy = Proxy(handle.url, engine.tokenizer, "tiny", KEY, record_dir=records, policy_api_key=handle.api_key).start()
    try:
        yield engine, handle, proxy, records
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


async def collect(proxy: Proxy, n: int, prefix: str, timeout_s: float = 180.0) -> list[Turn]:
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
    engine, policy, _, _ = stack
    with Proxy(policy.url, engine.tokenizer, "tiny", KEY, ttl_s=0.3, policy_api_key=policy.api_key) as proxy:
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


def raw_chat(proxy: Proxy, content: bytes | str, headers: dict[str, str] | None = None) -> httpx.Response:
    """A chat request with a body written by hand (what no well-behaved client would send)."""
    return httpx.post(proxy.url + "/v1/chat/completions", content=content, timeout=60,
                      headers={"Authorization": f"Bearer {KEY}", "content-type": "application/json", **(headers or {})})


def test_a_50mb_body_is_refused_at_once_and_the_proxy_serves_on(stack):
    """The attack: a 50 MB body used to block the event loop for 87 s. Refused from its
    Content-Length, or as its chunks pass the limit, without reading the rest."""
    _, _, proxy, _ = stack
    big = b"x" * (50 << 20)
    t0 = time.monotonic()
    resp = raw_chat(proxy, big)
    sized = time.monotonic() - t0

    def chunks():
        for _ in range(50):
            yield b"x" * (1 << 20)

    t0 = time.monotonic()
    chunked = httpx.post(proxy.url + "/v1/chat/completions", content=chunks(), timeout=60,
                         headers={"Authorization": f"Bearer {KEY}"})
    streamed = time.monotonic() - t0
    for r in (resp, chunked):
        assert r.status_code == 413 and r.json()["error"]["type"] == "invalid_request_error"
        assert "limit" in r.json()["error"]["message"]
    assert sized < 10.0 and streamed < 10.0, (sized, streamed)  # the attack took 87 s; the bound leaves room for a busy machine
    ok = raw_chat(proxy, json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}))
    assert ok.status_code == 200 and ok.json()["object"] == "chat.completion"


def test_unencodable_text_and_bad_sampling_values_get_400(stack):
    _, _, proxy, _ = stack
    hi = [{"role": "user", "content": "hi"}]
    bad = {
        "lone surrogate in a message": '{"messages": [{"role": "user", "content": "a\\ud800b"}]}',
        "lone surrogate in a tool": json.dumps({"messages": hi, "tools": [{"type": "function", "function": {
            "name": "x", "description": "PLACEHOLDER"}}]}).replace("PLACEHOLDER", "\\udfff"),
        "lone surrogate in a key": '{"messages": [{"role": "user", "content": "hi", "\\ud83d": 1}]}',
        "bytes that are not UTF-8": b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}',
        "temperature NaN": '{"messages": [{"role": "user", "content": "hi"}], "temperature": NaN}',
        "temperature inf": '{"messages": [{"role": "user", "content": "hi"}], "temperature": Infinity}',
        "top_p 1e400": '{"messages": [{"role": "user", "content": "hi"}], "top_p": 1e400}',
        "nested too deeply": '{"messages": ' + "[" * 100_000 + "]" * 100_000 + "}",
    }
    for kwargs in ({"temperature": -0.5}, {"temperature": 2.5}, {"top_p": 0}, {"top_p": 1.5}, {"max_tokens": 0},
                   {"max_tokens": 10**9}, {"max_tokens": 2**70}, {"n": 2}, {"seed": 2**64}):
        bad[str(kwargs)] = json.dumps({"messages": hi, **kwargs})
    for what, body in bad.items():
        resp = raw_chat(proxy, body)
        assert resp.status_code == 400, (what, resp.text)
        err = resp.json()["error"]
        assert err["type"] == "invalid_request_error" and err["message"] and "\n" not in err["message"], what
    assert raw_chat(proxy, json.dumps({"messages": hi, "max_tokens": 2}), {"X-Train": "maybe"}).status_code == 400
    end = httpx.post(proxy.url + "/v1/sessions/x/end", content='{"message": {"role": "user", "content": "\\ud800"}}',
                     headers={"Authorization": f"Bearer {KEY}"})
    assert end.status_code == 400
    assert raw_chat(proxy, json.dumps({"messages": hi, "max_tokens": 2})).status_code == 200
    for page in ("/docs", "/redoc", "/openapi.json"):
        assert httpx.get(proxy.url + page).status_code == 404


def test_opted_out_requests_and_sessions_leave_no_record(stack):
    _, _, proxy, records = stack

    async def go():
        c = client(proxy)
        consumer = asyncio.create_task(collect(proxy, 3, "optout-"))

        async def ask(session: str, text: str, **h: str) -> str:
            r = await c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": text}],
                                                max_tokens=MAX_TOKENS, extra_headers={"X-Session-Id": session, **h})
            return r.choices[0].message.content

        assert await ask("optout-req", "recorded one") is not None
        assert await ask("optout-req", "do not keep this", **{"X-Train": "false"}) is not None  # served
        await ask("optout-req", "recorded two", **{"X-Session-Done": "1"})
        await ask("optout-sess", "my diary", **{"X-Session-Train": "false"})
        await ask("optout-sess", "still my diary")  # the session's flag holds without the header
        await ask("optout-sess", "the end", **{"X-Session-Done": "1"})
        await ask("optout-sess", "after the end: the id stays opted out", **{"X-Session-Done": "1"})
        await ask("optout-zmarker", "last", **{"X-Session-Done": "1"})
        turns = await consumer
        await c.close()
        return turns

    turns = asyncio.run(go())
    by_session = {}
    for t in turns:
        by_session.setdefault(t.meta["session_id"], []).append(t)
    assert set(by_session) == {"optout-req", "optout-zmarker"}
    first, second = sorted(by_session["optout-req"], key=lambda t: t.step_index)
    assert first.meta["closed"] == "next_request_not_recorded" and first.next_state.kind == "none"
    assert second.step_index == 1 and second.messages[-1]["content"] == "recorded two"
    text = "".join(f.read_text() for f in records.glob("turns-v*.jsonl"))
    assert "optout-sess" not in text and "diary" not in text and "do not keep this" not in text


class EchoPolicy:
    """A policy that replies with a fixed text: the stand-in for a model that repeats what the
    user gave it (the tiny random model cannot be made to). Real token ids of the real tokenizer."""

    def __init__(self, tokenizer, reply: str) -> None:
        self.ids = tokenizer(reply, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]

    async def generate(self, input_ids, sampling):
        from agent.policy.base import GenerateResult
        return GenerateResult(output_ids=list(self.ids), logprobs=[-0.5] * len(self.ids), finish_reason="stop")

    async def health(self) -> bool:
        return True


def test_secrets_and_personal_data_never_reach_the_records_or_the_loss(tmp_path):
    from agent.policy.models import byte_tokenizer
    from learner.advantages import build_samples

    tok = byte_tokenizer()
    email, key, card, phone = "jane.doe@example.org", "sk-proj-Abc123Def456Ghi789Jkl", "4111 1111 1111 1111", "(415) 555-2671"
    reply = f"Noted: {email}, card {card}; I will keep {key} safe."
    renderer = ChatRenderer(tok)
    with Proxy(EchoPolicy(tok, reply), tok, "tiny", KEY, record_dir=tmp_path) as proxy:
        async def go():
            c = client(proxy)
            consumer = asyncio.create_task(collect(proxy, 2, "pii-"))
            first = [{"role": "user", "content": f"I am {email}, card {card}, my key is {key}"}]
            r = await c.chat.completions.create(model="tiny", messages=first, extra_headers=headers("pii-a"))
            assert r.choices[0].message.content == reply  # the user is served the real reply
            second = first + [{"role": "assistant", "content": reply}, {"role": "user", "content": f"call {phone}"}]
            await c.chat.completions.create(model="tiny", messages=second, extra_headers=headers("pii-a", done=True))
            turns = await consumer
            await c.close()
            return sorted(turns, key=lambda t: t.step_index)

        turn, _ = asyncio.run(go())
    written = "".join(f.read_text() for f in tmp_path.glob("turns-v*.jsonl"))
    for value in (email, key, card, phone, "4111"):
        assert value not in written
    assert "[REDACTED:email]" in turn.messages[0]["content"] and "[REDACTED:secret]" in turn.action
    assert turn.next_state.content == "call [REDACTED:phone]"
    assert turn.response_ids == EchoPolicy(tok, reply).ids  # the sampler's ids, exact
    masked = turn.meta["private_tokens"]
    taken = "".join(renderer.decode([turn.response_ids[i]]) for i in masked)
    assert taken == email + card + key  # exactly the tokens that carry them
    turn.prm = prm_score(score=1)
    sample, = build_samples([turn], "binary")[0]
    assert [i for i, m in enumerate(sample.loss_mask) if not m] == masked
    assert sum(sample.loss_mask) == len(turn.response_ids) - len(masked) > 0


def test_an_unencodable_field_or_a_failing_session_never_loses_turns(tmp_path, caplog):
    """The faults: content JSON/UTF-8 cannot hold used to make TurnSink.put raise, which dropped
    the turn and killed the TTL sweeper, so later sessions never expired."""
    from agent.policy.base import GenerateResult
    from agent.proxy.sessions import Prompt, Reply, SessionBook
    from agent.proxy.sink import TurnSink

    sink = TurnSink(tmp_path)
    book = SessionBook(sink, ttl_s=1.0)
    cyclic: dict = {}
    cyclic["self"] = cyclic

    async def serve_both() -> None:
        for sid, text, odd in (("bad", "a\ud800b", {"odd": {1, 2}, "cyclic": cyclic}), ("good", "fine", {})):
            async def sample(text: str = text) -> Reply:
                return Reply(GenerateResult(output_ids=[2], logprobs=[-0.1], finish_reason="stop"), text, text, [], 0.0)

            prompt = Prompt([1], [{"role": "user", "content": text, **odd}], [], "tiny")
            await book.main_turn(book.get(sid), prompt, record=True, done=False, sample=sample)

    asyncio.run(serve_both())
    assert book.expire(now=time.monotonic() + 10) == 2 and not book.sessions
    sink.close()
    lines = (tmp_path / "turns-v0.jsonl").read_bytes().decode("utf-8").splitlines()  # valid UTF-8 throughout
    got = {r["meta"]["session_id"]: r for r in map(json.loads, lines)}
    assert set(got) == {"bad", "good"} and got["bad"]["action"] == "a\\ud800b" and got["good"]["action"] == "fine"
    assert "unencodable content escaped" in caplog.text

    # A record that cannot be written at all (here: the file is a directory) is logged; the turn
    # still reaches the consumer, the sweeper keeps expiring later sessions, and stop() closes the rest.
    broken = tmp_path / "broken"
    (broken / "turns-v0.jsonl").mkdir(parents=True)
    engine = Engine("tiny", dtype="float32", seed=0)
    try:
        with Proxy(engine, engine.tokenizer, "tiny", KEY, record_dir=broken, ttl_s=0.3) as proxy:
            async def go():
                c = client(proxy)
                consumer = asyncio.create_task(collect(proxy, 4, "fault-", timeout_s=60))
                for sid in ("fault-a", "fault-b"):  # expires, its record fails; then the next one must expire too
                    await c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                                    max_tokens=2, extra_headers=headers(sid))
                    await asyncio.sleep(1.0)
                proxy.book.ttl_s = 600.0  # the last two stay pending until stop()
                for sid in ("fault-c", "fault-d"):
                    await c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                                    max_tokens=2, extra_headers=headers(sid))
                await c.close()
                await asyncio.to_thread(proxy.stop)
                return await consumer

            turns = asyncio.run(go())
    finally:
        engine.close()
    closed = {t.meta["session_id"]: t.meta["closed"] for t in turns}
    assert closed == {"fault-a": "expired", "fault-b": "expired", "fault-c": "proxy_stopped",
                      "fault-d": "proxy_stopped"}
    assert "could not open" in caplog.text


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
    _, policy, _, _ = stack
    proc = subprocess.Popen([sys.executable, "-m", "agent.proxy", "--policy-url", policy.url, "--model", "tiny",
                             "--port", "0", "--api-key", KEY, "--record-dir", str(tmp_path),
                             "--policy-api-key", policy.api_key],
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
        proc.wait(90)
    assert proc.returncode == 0 and "proxy stopped (interrupted)" in proc.stdout.read()
    files = [f for f in os.listdir(tmp_path) if f.startswith("turns-v")]
    rec, = [json.loads(line) for f in files for line in (tmp_path / f).read_text().splitlines()]
    assert rec["meta"]["session_id"] == "cli-a" and rec["meta"]["closed"] == "proxy_stopped"
