"""The live-user proxy's HTTP layer (the routes and headers: agent/proxy/__init__.py): `Proxy`
serves the OpenAI-compatible routes in a background thread, renders and redacts each request,
asks the policy, and hands main requests to its session book (agent/proxy/sessions.py)."""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from agent.chat import ChatRenderer
from agent.http_guard import BodyLimit, bearer_ok
from agent.policy.base import PolicyClient, SamplingParams
from agent.policy.jsonhttp import ServerError
from agent.policy.server import ServerHandle, serve_app
from agent.policy.sglang_client import SGLangClient
from agent.privacy import private_tokens, redact, redact_messages
from agent.proxy.openai_compat import completion_body, stream_events, template_messages
from agent.proxy.request import ChatRequest, Routing, parse_chat, parse_end, parse_routing
from agent.proxy.sessions import Prompt, Reply, Session, SessionBook
from agent.proxy.sink import TurnSink
from agent.turn import Turn

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 4 << 20


def _error(status: int, message: str, kind: str = "invalid_request_error", code: str | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "code": code or status}}, status_code=status)


def _unauthorized() -> JSONResponse:
    return _error(401, "missing or wrong API key (send Authorization: Bearer <key>)", "invalid_api_key")


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
                routing = parse_routing(request.headers)
            except ValueError as e:
                return _error(400, str(e))
            try:
                prompt, reply = await self._serve(body, routing)
            except ValueError as e:
                return _error(400, str(e))
            except ServerError as e:  # the policy's own 400 (a prompt too long, say) is the caller's error
                if e.status == 400 and "context" in e.message.lower():  # OpenAI's code, so clients can tell
                    return _error(400, f"policy server: {e.message}", code="context_length_exceeded")
                return _error(400 if e.status == 400 else 502, f"policy server: {e.message}", "upstream_error")
            result = reply.result
            if body.stream:
                usage = bool((body.stream_options or {}).get("include_usage"))
                return StreamingResponse(stream_events(self.model_name, reply.text, result.finish_reason,
                                                       len(prompt.ids), len(result.output_ids), usage),
                                         media_type="text/event-stream")
            resp = JSONResponse(completion_body(self.model_name, reply.text, result.finish_reason, len(prompt.ids),
                                                len(result.output_ids)))
            total_ms, policy_ms = (time.perf_counter() - t0) * 1e3, reply.policy_s * 1e3
            resp.headers["Server-Timing"] = f"policy;dur={policy_ms:.3f}, proxy;dur={total_ms - policy_ms:.3f}"
            return resp

        @app.post("/v1/sessions/{session_id}/end")
        async def end_session(session_id: str, request: Request):
            if not self._authorized(request.headers.get("authorization")):
                return _unauthorized()
            try:
                message = await asyncio.to_thread(parse_end, await request.body())
                if message is not None:
                    message["content"] = (await asyncio.to_thread(redact, message["content"]))[0]
            except ValueError as e:
                return _error(400, str(e))
            session = self.book.sessions.get(session_id)
            if session is None:
                return _error(404, f"no open session {session_id!r}", "not_found")
            return {"session_id": session_id, "closed_turn": await self.book.close(session, message)}

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

    async def _serve(self, body: ChatRequest, routing: Routing) -> tuple[Prompt, Reply]:
        """Sample a reply; a main turn goes through the session book (which closes the pending
        turn and leaves this one pending), a side turn is only served."""
        if body.stop:
            raise ValueError("`stop` strings are not supported: replies end at the model's own stop tokens")
        max_new = body.max_completion_tokens or body.max_tokens or self.max_tokens
        if max_new > self.max_tokens_limit:
            raise ValueError(f"max_tokens: at most {self.max_tokens_limit}, got {max_new}")
        session: Session | None = None
        if routing.main or not routing.session_train:
            session = self.book.get(routing.session_id)
            if not routing.session_train:
                self.book.opt_out(session)
        record = routing.main and routing.train and session.train
        prompt, private = await asyncio.to_thread(self._prepare, body, record)
        sampling = SamplingParams(max_new_tokens=max_new, temperature=body.temperature, top_p=body.top_p,
                                  stop_token_ids=list(self.renderer.stop_token_ids), seed=body.seed)

        async def sample() -> Reply:
            t = time.perf_counter()
            result = await self.policy.generate(prompt.ids, sampling)
            policy_s = time.perf_counter() - t
            text, action, masked = await asyncio.to_thread(self._reply_texts, result.output_ids, private, record)
            return Reply(result, text, action, masked, policy_s)

        if routing.main:
            return prompt, await self.book.main_turn(session, prompt, record, routing.done, sample)
        reply = await sample()
        if routing.done:
            self.book.end_id(routing.session_id, "session_done")
        return prompt, reply

    def _prepare(self, body: ChatRequest, record: bool) -> tuple[Prompt, set[str]]:
        """The prompt as recorded, and the private values in its messages. Off the event loop:
        rendering a long conversation takes a while."""
        messages = template_messages(body.messages)
        tools = body.tools or []
        ids = self.renderer.render_prompt(messages, tools)
        clean, private = redact_messages(messages) if record else (messages, set())
        return Prompt(ids, clean, tools, body.model or self.model_name), private

    def _reply_texts(self, output_ids: list[int], private: set[str], record: bool) -> tuple[str, str, list[int]]:
        """(the reply's text, as recorded, the indices of its tokens that carry a private value)."""
        raw = self.renderer.response_text(output_ids)
        if not record:
            return raw, raw, []
        return raw, redact(raw)[0], private_tokens(list(output_ids), self.renderer.decode, private)
