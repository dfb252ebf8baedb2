"""The live-user proxy: an OpenAI-compatible chat server in front of any PolicyClient that turns
real conversations into training turns.

Routes: POST /v1/chat/completions (streamed over SSE or not; `tools` passed to the chat
template; a reply holding <tool_call> blocks comes back as OpenAI `tool_calls`), GET /v1/models,
GET /health. Every /v1 route needs `Authorization: Bearer <key>` (401 otherwise). The server
binds to 127.0.0.1 unless told otherwise.

Headers:
  X-Session-Id    the conversation. Missing: the request is a session of its own, done at once
                  (one anonymous bucket would splice strangers' replies onto each other's turns).
  X-Turn-Type     `main` (a turn of the conversation: recorded) or `side` (an auxiliary call such
                  as a title or a memory summary: served, never recorded). Missing means `main`:
                  the original OpenClaw-RL server defaulted to `side`, so every client that sent no
                  header (most of them) was served but produced no training data at all.
  X-Session-Done  truthy (1/true/yes/on): after this request the session is over; its last turn
                  is closed with no next state.
  X-Train         falsy (0/false/no/off): this request is served, never recorded; the session's
                  pending turn is closed without it as next state (its words are the user's too).
  X-Session-Train falsy: the same for the whole session, from this request on (sticky: the id
                  stays opted out after the session ends, so send it on the session's first request).

Input: a body over `max_body_bytes` (default 4 MB) is answered 413 before it is read; text that
UTF-8 cannot encode (a lone surrogate) anywhere in a request, and non-finite or out-of-range
sampling values, get 400 in OpenAI's error shape. Parsing, rendering and decoding run in worker
threads, never on the event loop.

Privacy (agent/privacy.py): emails, phone and card numbers and secrets (API keys, tokens,
passwords) are replaced by [REDACTED:<kind>] in every text of a record (messages, reply, next
state); the token ids stay the sampler's, and the response tokens that carry such a value are
listed in `meta["private_tokens"]`, which the learner's loss mask drops.

POST /v1/sessions/{id}/end ends a session without a request to answer; its optional body
{"message": {"role": "user", "content": ...}} is the last turn's next state (a user's closing
words, such as a simulated user's "thanks, that's it", that need no reply).

A main turn: the request's messages are rendered with the model's chat template into prompt
ids, the policy samples, and the turn keeps the sampler's own response ids and log-probs (the
reply is never re-tokenised). Its next state is the last message of the session's next main
request (role user -> kind "user_reply", tool -> "tool_result"); see agent/proxy_sessions.py
for pending turns, the TTL and where finished turns go. The at-least-one-turn-per-session rule
is the learner's; the proxy only records.

Weight updates: the proxy has no pause gate. The policy (the embedded engine or SGLang) queues
requests while it swaps weights, so users are never refused; each turn carries the policy
version that sampled it.

Streaming is emulated: a PolicyClient returns whole results, so the reply is sent as SSE chunks
once sampled. Non-streamed answers carry `Server-Timing: policy;dur=..,proxy;dur=..` (ms).

`python -m agent.proxy --policy-url URL --model NAME --port N --api-key KEY [--record-dir DIR] [--policy-api-key K]`, or
`--engine-port M` instead of --policy-url to run the embedded engine in the proxy's process (its SGLang routes
take the proxy's key; `--weights-dir DIR` lets them load weights from DIR).
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent.chat import ChatRenderer
from agent.http_guard import BodyLimit, bearer_ok
from agent.policy.base import GenerateResult, PolicyClient, SamplingParams
from agent.policy.jsonhttp import ServerError
from agent.policy.engine import Engine
from agent.policy.models import load_tokenizer
from agent.policy.server import ServerHandle, serve, serve_app
from agent.policy.sglang_client import SGLangClient
from agent.proxy_openai import completion_body, content_text, stream_events, template_messages
from agent.privacy import private_tokens, redact, redact_messages
from agent.proxy_sessions import NEXT_STATE_KINDS, Session, SessionBook, TurnSink, next_state_of
from agent.turn import Turn

log = logging.getLogger(__name__)

TRUTHY = {"1", "true", "yes", "on"}
FALSY = {"0", "false", "no", "off"}
MAX_BODY_BYTES = 4 << 20


class ChatRequest(BaseModel):
    # OpenAI clients send many optional fields; NaN and infinities are never a sampling value
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)
    model: str | None = None
    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    temperature: float = Field(1.0, ge=0, le=2)  # OpenAI's range
    top_p: float = Field(1.0, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    n: int = Field(1, ge=1, le=1)  # one sample per turn: a turn is one reply
    seed: int | None = Field(None, ge=-(2**63), lt=2**63)
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None


def _error(status: int, message: str, kind: str = "invalid_request_error", code: str | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "code": code or status}}, status_code=status)


def _unauthorized() -> JSONResponse:
    return _error(401, "missing or wrong API key (send Authorization: Bearer <key>)", "invalid_api_key")


def _unencodable(x: Any, path: str) -> str | None:
    """The path of the first string (key or value) in parsed JSON that UTF-8 cannot encode."""
    if isinstance(x, str):
        try:
            x.encode("utf-8")
        except UnicodeEncodeError:
            return path
    elif isinstance(x, dict):
        for k, v in x.items():
            bad = _unencodable(k, f"{path} (a key)") or _unencodable(v, f"{path}.{k}")
            if bad:
                return bad
    elif isinstance(x, list):
        for i, v in enumerate(x):
            bad = _unencodable(v, f"{path}[{i}]")
            if bad:
                return bad
    return None


def parse_json(raw: bytes) -> Any:
    """A request body as JSON; ValueError (with one line for the client) when it is not JSON or
    holds text UTF-8 cannot encode (a lone surrogate, from a `\\ud800` escape)."""
    try:
        data = json.loads(raw) if raw.strip() else {}
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError (bytes that are not UTF-8) is a ValueError
        raise ValueError(f"invalid JSON body: {str(e)[:200]}") from None
    try:
        bad = _unencodable(data, "body")
    except RecursionError:
        raise ValueError("invalid JSON body: nested too deeply") from None
    if bad:
        raise ValueError(f"{bad}: text with a lone surrogate or other characters UTF-8 cannot encode")
    return data


def parse_chat(raw: bytes) -> ChatRequest:
    data = parse_json(raw)
    try:
        return ChatRequest.model_validate(data)
    except ValidationError as e:
        parts = [f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors()]
        raise ValueError("invalid request: " + "; ".join(parts)) from None


def _flag(request: Request, header: str) -> bool:
    """A true/false header (missing: true)."""
    value = (request.headers.get(header) or "true").strip().lower()
    if value not in TRUTHY | FALSY:
        raise ValueError(f"{header} must be true or false, got {value!r}")
    return value in TRUTHY


class Proxy:
    """The proxy server. `start()` serves in a background thread; `stop()` closes every pending
    turn (without next state), the records and the `turns()` stream.

    `policy` is a PolicyClient, or the URL of an SGLang-compatible server (the proxy then owns
    its client, sending `policy_api_key` as its Bearer key). Finished turns go to `on_turn(turn)`
    (called on the proxy's thread; keep it quick) when given, else to `turns()`; with
    `record_dir`, also to turns-v<version>.jsonl. `docs=True` serves FastAPI's /docs.
    """

    def __init__(self, policy: PolicyClient | str, tokenizer: Any, model_name: str, api_key: str | None,
                 host: str = "127.0.0.1", port: int = 0, record_dir: str | Path | None = None,
                 ttl_s: float = 600.0, on_turn: Callable[[Turn], None] | None = None,
                 max_tokens: int = 1024, max_tokens_limit: int = 32768, max_body_bytes: int = MAX_BODY_BYTES,
                 policy_api_key: str | None = None, docs: bool = False) -> None:
        self._policy_arg = policy
        self.policy: PolicyClient | None = None if isinstance(policy, str) else policy
        self.renderer = ChatRenderer(tokenizer)
        self.model_name = model_name
        self.api_key = api_key
        self.host, self.port = host, port
        self.max_tokens, self.max_tokens_limit = max_tokens, max_tokens_limit
        self.max_body_bytes = max_body_bytes
        self.policy_api_key = policy_api_key
        self.docs = docs
        self.sink = TurnSink(record_dir, on_turn)
        self.book = SessionBook(self.sink, ttl_s)
        self.url = ""
        self._handle: ServerHandle | None = None

    # ---- lifecycle ----

    def start(self, timeout_s: float = 30.0) -> "Proxy":
        self._handle = serve_app(BodyLimit(self.app(), self.max_body_bytes), self.host, self.port, timeout_s, "proxy-http")
        self.url = self._handle.url
        return self

    def stop(self, timeout_s: float = 15.0) -> None:
        """Idempotent. Pending turns are closed by the server's shutdown hook (on its own loop)."""
        if self._handle is not None:
            self._handle.stop(timeout_s)
            if not self._handle.alive() and self.book.sessions:  # the loop is gone before its shutdown hook ran
                log.warning("closing %d sessions the server's shutdown left open", len(self.book.sessions))
                self.book.end_all("proxy_stopped")
        self.sink.close()

    def serving(self) -> bool:
        return self._handle is not None and self._handle.alive()

    def __enter__(self) -> "Proxy":
        return self.start()

    def __exit__(self, *_: Any) -> None:
        self.stop()

    def turns(self) -> AsyncIterator[Turn]:
        """`async for turn in proxy.turns()`: finished turns until the proxy stops."""
        return self.sink.turns()

    # ---- the app ----

    def app(self) -> FastAPI:
        docs = {} if self.docs else {"docs_url": None, "redoc_url": None, "openapi_url": None}
        app = FastAPI(title="openclaw live-user proxy", lifespan=self._lifespan, **docs)

        @app.get("/health")
        async def health() -> JSONResponse:
            ok = self.policy is not None and await self.policy.health()
            return JSONResponse({}, status_code=200 if ok else 503)

        @app.get("/v1/models")
        async def models(request: Request):
            if not self._authorized(request.headers.get("authorization")):
                return _unauthorized()
            return {"object": "list",
                    "data": [{"id": self.model_name, "object": "model", "created": 0, "owned_by": "openclaw"}]}

        @app.post("/v1/chat/completions")
        async def chat(request: Request):
            t0 = time.perf_counter()
            if not self._authorized(request.headers.get("authorization")):
                return _unauthorized()
            try:
                body = await asyncio.to_thread(parse_chat, await request.body())
                train, session_train = _flag(request, "x-train"), _flag(request, "x-session-train")
            except ValueError as e:
                return _error(400, str(e))
            turn_type = (request.headers.get("x-turn-type") or "main").strip().lower()
            if turn_type not in ("main", "side"):
                return _error(400, f"X-Turn-Type must be main or side, got {turn_type!r}")
            session_id = request.headers.get("x-session-id") or ""
            done = (request.headers.get("x-session-done") or "").strip().lower() in TRUTHY or not session_id
            try:
                result, raw, prompt_len, policy_s = await self._serve(
                    body, session_id or f"anon-{uuid.uuid4().hex}", turn_type == "main", done, train, session_train)
            except ValueError as e:
                return _error(400, str(e))
            except ServerError as e:  # the policy's own 400 (a prompt too long, say) is the caller's error
                if e.status == 400 and "context" in e.message.lower():  # OpenAI's code, so clients can tell
                    return _error(400, f"policy server: {e.message}", code="context_length_exceeded")
                return _error(400 if e.status == 400 else 502, f"policy server: {e.message}", "upstream_error")
            if body.stream:
                usage = bool((body.stream_options or {}).get("include_usage"))
                return StreamingResponse(stream_events(self.model_name, raw, result.finish_reason, prompt_len,
                                                       len(result.output_ids), usage),
                                         media_type="text/event-stream")
            resp = JSONResponse(completion_body(self.model_name, raw, result.finish_reason, prompt_len,
                                                len(result.output_ids)))
            total_ms = (time.perf_counter() - t0) * 1e3
            resp.headers["Server-Timing"] = f"policy;dur={policy_s * 1e3:.3f}, proxy;dur={total_ms - policy_s * 1e3:.3f}"
            return resp

        @app.post("/v1/sessions/{session_id}/end")
        async def end_session(session_id: str, request: Request):
            if not self._authorized(request.headers.get("authorization")):
                return _unauthorized()
            try:
                data = await asyncio.to_thread(parse_json, await request.body())
                if not isinstance(data, dict):
                    raise ValueError('the body must be JSON: {"message": {"role": ..., "content": ...}} or empty')
                message = data.get("message")
                if message is not None:
                    if not (isinstance(message, dict) and message.get("role") in NEXT_STATE_KINDS):
                        raise ValueError("message must be an object with role user or tool")
                    message = {**message, "content": content_text(message.get("content"))}
                    message["content"] = (await asyncio.to_thread(redact, message["content"]))[0]
            except ValueError as e:
                return _error(400, str(e))
            session = self.book.sessions.get(session_id)
            if session is None:
                return _error(404, f"no open session {session_id!r}", "not_found")
            async with session.lock:
                ns = next_state_of(message) if message is not None else None
                had_turn = session.pending is not None
                self.book.close_pending(session, ns, "session_end", done=True)
                self.book.end(session, "session_done")
            return {"session_id": session_id, "closed_turn": had_turn}

        return app

    @contextlib.asynccontextmanager
    async def _lifespan(self, _: FastAPI):
        if self.policy is None:  # made on this loop: an HTTP client's connections belong to one loop
            self.policy = SGLangClient(str(self._policy_arg), api_key=self.policy_api_key)
        sweeper = asyncio.create_task(self._sweep())
        try:
            yield
        finally:
            sweeper.cancel()
            self.book.end_all("proxy_stopped")
            if isinstance(self._policy_arg, str):
                await self.policy.aclose()

    async def _sweep(self) -> None:
        period = min(max(self.book.ttl_s / 4, 0.05), 5.0)
        while True:
            await asyncio.sleep(period)
            try:
                self.book.expire()
            except Exception:  # the sweeper outlives any one failure: later sessions must still expire
                log.exception("expiring sessions failed")

    def _authorized(self, header: str | None) -> bool:
        return self.api_key is None or bearer_ok(header, self.api_key)

    # ---- one request ----

    async def _serve(self, body: ChatRequest, session_id: str, main: bool, done: bool, train: bool = True,
                     session_train: bool = True) -> tuple[GenerateResult, str, int, float]:
        """Sample a reply; for a main turn close the pending one and leave this one pending.
        Returns the result, its text, the prompt's length and the seconds the policy took."""
        if body.stop:
            raise ValueError("`stop` strings are not supported: replies end at the model's own stop tokens")
        max_new = body.max_completion_tokens or body.max_tokens or self.max_tokens
        if max_new > self.max_tokens_limit:
            raise ValueError(f"max_tokens: at most {self.max_tokens_limit}, got {max_new}")
        session: Session | None = None
        if main or not session_train:
            session = self.book.get(session_id)
            if not session_train:
                self.book.opt_out(session)
        record = main and train and session.train
        tools, prompt_ids, clean, private = await asyncio.to_thread(self._prepare, body, record)
        sampling = SamplingParams(max_new_tokens=max_new, temperature=body.temperature, top_p=body.top_p,
                                  stop_token_ids=list(self.renderer.stop_token_ids), seed=body.seed)
        if not main:
            t = time.perf_counter()
            result = await self.policy.generate(prompt_ids, sampling)
            policy_s = time.perf_counter() - t
            if done and session_id in self.book.sessions:
                self.book.end(self.book.sessions[session_id], "session_done")
            return result, await asyncio.to_thread(self.renderer.response_text, result.output_ids), len(prompt_ids), policy_s
        async with session.lock:
            if session.pending is not None:  # an unrecorded request's words are no one's next state
                ns = next_state_of(clean[-1]) if record else None
                self.book.close_pending(session, ns, "next_request" if ns else
                                        "next_request_without_reply" if record else "next_request_not_recorded")
            t = time.perf_counter()
            try:
                result = await self.policy.generate(prompt_ids, sampling)
            finally:
                policy_s = time.perf_counter() - t
                session.touched = time.monotonic()
            raw, action, masked = await asyncio.to_thread(self._reply_texts, result.output_ids, private, record)
            if record and session.train:  # (the session may have opted out while this one was sampled)
                turn = Turn(episode_id=session.episode_id, task_id="live", group_id=f"{session.episode_id}/{session.steps}",
                            step_index=session.steps, policy_version=result.weight_version, prompt_ids=prompt_ids,
                            response_ids=list(result.output_ids), rollout_logprobs=list(result.logprobs),
                            action=action, next_state=None, status="ok", finish_reason=result.finish_reason,
                            messages=clean, tools=tools,
                            meta={"session_id": session_id, "model": body.model or self.model_name,
                                  "private_tokens": masked})
                self.book.add(session, turn)
            if done:
                self.book.end(session, "session_done")
        return result, raw, len(prompt_ids), policy_s

    def _prepare(self, body: ChatRequest, record: bool) -> tuple[list, list[int], list, set[str]]:
        """(tools, prompt ids, the messages as recorded, the private values in them). Off the event loop: rendering a long conversation takes a while."""
        messages = template_messages(body.messages)
        tools = body.tools or []
        prompt_ids = self.renderer.render_prompt(messages, tools)
        clean, private = redact_messages(messages) if record else (messages, set())
        return tools, prompt_ids, clean, private

    def _reply_texts(self, output_ids: list[int], private: set[str], record: bool) -> tuple[str, str, list[int]]:
        """(the reply's text, as recorded, the indices of its tokens that carry a private value)."""
        raw = self.renderer.response_text(output_ids)
        if not record:
            return raw, raw, []
        return raw, redact(raw)[0], private_tokens(list(output_ids), self.renderer.decode, private)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--policy-url", help="SGLang-compatible policy server (SGLang or agent.policy.server)")
    where.add_argument("--engine-port", type=int, help="run the embedded engine in this process instead (no second "
                       "HTTP hop) and also serve its SGLang routes on this port (0: any free port)")
    ap.add_argument("--model", required=True, help="the served model: tiny, smollm2 or a local HF folder (its tokenizer renders prompts)")
    ap.add_argument("--served-name", default=None, help="name shown by /v1/models (default: --model)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--api-key", default=os.environ.get("OPENCLAW_PROXY_API_KEY"),
                    help="Bearer key clients must send (default: $OPENCLAW_PROXY_API_KEY)")
    ap.add_argument("--record-dir", default="runs/proxy", help="where turns-v<version>.jsonl are appended")
    ap.add_argument("--ttl", type=float, default=600.0, help="seconds a session's last turn waits for a next state")
    ap.add_argument("--max-tokens", type=int, default=1024, help="reply length when a request gives none")
    ap.add_argument("--max-tokens-limit", type=int, default=32768, help="the largest max_tokens a request may ask for")
    ap.add_argument("--max-body-mb", type=float, default=MAX_BODY_BYTES / 2**20,
                    help="request bodies over this many MiB are refused (413)")
    ap.add_argument("--docs", action="store_true", help="serve FastAPI's /docs and /openapi.json")
    ap.add_argument("--policy-api-key", default=os.environ.get("OPENCLAW_POLICY_API_KEY"),
                    help="--policy-url only: the Bearer key of the policy server (default: $OPENCLAW_POLICY_API_KEY)")
    ap.add_argument("--max-batch", type=int, default=64, help="embedded engine only: sequences decoded together")
    ap.add_argument("--weights-dir", action="append", default=[],
                    help="embedded engine only: a folder its /update_weights_from_disk may load from (repeat for "
                         "more; none: no updates). The engine's routes take the proxy's --api-key")
    args = ap.parse_args(argv)
    if not args.api_key:
        ap.error("--api-key (or $OPENCLAW_PROXY_API_KEY) is required")
    logging.basicConfig(level=logging.INFO)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with contextlib.ExitStack() as cleanup:
        if args.engine_port is not None:
            engine = Engine(args.model, max_batch=args.max_batch)
            cleanup.callback(engine.close)
            handle = serve(engine, args.host, args.engine_port, api_key=args.api_key, weights_dirs=args.weights_dir,
                           docs=args.docs)
            cleanup.callback(handle.stop)
            policy, tokenizer, target = engine, engine.tokenizer, f"embedded engine (SGLang routes on {handle.url})"
        else:
            policy, tokenizer, target = args.policy_url, load_tokenizer(args.model), args.policy_url
        proxy = Proxy(policy, tokenizer, args.served_name or args.model, args.api_key, host=args.host, port=args.port,
                      record_dir=args.record_dir, ttl_s=args.ttl, max_tokens=args.max_tokens,
                      max_tokens_limit=args.max_tokens_limit, max_body_bytes=int(args.max_body_mb * 2**20),
                      policy_api_key=args.policy_api_key, docs=args.docs,
                      on_turn=lambda _turn: None)  # the records are the output here
        proxy.start()
        cleanup.callback(proxy.stop)
        print(f"proxy serving on {proxy.url} -> {target}", flush=True)
        while not stop.wait(1.0) and proxy.serving():
            pass
    print("proxy stopped" + (" (interrupted)" if stop.is_set() else ""), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
