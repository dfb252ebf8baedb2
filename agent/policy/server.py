"""SGLang-compatible HTTP server over the embedded Engine.

Native routes (bodies as SGLang's GenerateReqInput / UpdateWeightFromDiskReqInput):
POST /generate, POST /update_weights_from_disk, GET /health, GET /get_model_info (+ /model_info).
OpenAI-compatible: POST /v1/chat/completions (non-streaming), GET /v1/models, so the same engine
can serve as an LLM judge or a simulated user. Bad bodies get 400 with {"error": {"message"}}.

Every route but GET /health needs `Authorization: Bearer <api_key>` (401 otherwise), as SGLang's
`--api-key` does, so the same clients talk to both. `serve()` without a key makes a random one
(`handle.api_key`) for the clients of its own process. Weights load only from folders inside
`weights_dirs` (symlinks resolved; the run's own directory for a training run): any other path
is refused with 403, and with none given every update is. /docs, /redoc and /openapi.json are
served only with `docs=True`.

`python -m agent.policy.server --model tiny --port 30000 --api-key KEY --weights-dir DIR` runs it
standalone (the key may come from $OPENCLAW_POLICY_API_KEY).
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Awaitable, Iterable, Literal

import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator

from agent.http_guard import RequireKey, new_key
from agent.policy.base import SamplingParams
from agent.policy.engine import Engine, EngineClosed, Output
from agent.policy.engine import Request as EngineRequest

TOP_K_ALL = -1


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class SGLangSampling(_Strict):
    """The subset of SGLang's sampling_params the engine implements; anything else is a 400."""

    max_new_tokens: int = Field(128, ge=0)
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = TOP_K_ALL
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    sampling_seed: int | None = None
    n: Literal[1] = 1


class GenerateBody(_Strict):
    text: str | None = None
    input_ids: list[int] | None = None
    sampling_params: SGLangSampling = Field(default_factory=SGLangSampling)
    return_logprob: bool = False
    logprob_start_len: int = -1
    stream: Literal[False] = False
    rid: str | None = None


class UpdateWeightsBody(BaseModel):
    model_config = ConfigDict(extra="ignore")  # SGLang's other knobs (flush_cache, ...) mean nothing here
    model_path: str
    weight_version: int | None = None

    @field_validator("weight_version", mode="before")
    @classmethod
    def _int_version(cls, v: Any) -> Any:  # SGLang sends versions as strings
        return int(v) if isinstance(v, str) and v.strip().lstrip("-").isdigit() else v


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[dict[str, Any]] | None = None


class ChatBody(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)  # OpenAI clients send many optional fields
    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    n: int = Field(1, ge=1, le=64)
    seed: int | None = None
    stream: Literal[False] = False


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "code": status}}, status_code=status)


def _inside(path: str, roots: list[Path]) -> bool:
    real = Path(path).resolve()
    return any(real == r or r in real.parents for r in roots)


async def _or_closed(generating: Awaitable[Any]) -> Any:
    """Await a handler's generation; cancelled because the server stops with it in flight (its
    grace ran out), it ends as EngineClosed, a 503, rather than a traceback per request."""
    try:
        return await generating
    except asyncio.CancelledError:
        raise EngineClosed("the server stopped while this request was generating") from None


def create_app(engine: Engine, served_model_name: str | None = None, *, api_key: str,
               weights_dirs: Iterable[str | Path] = (), docs: bool = False) -> FastAPI:
    pages = {} if docs else {"docs_url": None, "redoc_url": None, "openapi_url": None}
    app = FastAPI(title="openclaw embedded engine (SGLang-compatible)", **pages)
    name = served_model_name or engine.model_path
    roots = [Path(d).resolve() for d in weights_dirs]

    app.add_middleware(RequireKey, key=api_key, open=frozenset({("GET", "/health")}))

    @app.exception_handler(RequestValidationError)
    async def _bad_body(_: Request, exc: RequestValidationError) -> JSONResponse:
        parts = [f"{'.'.join(str(p) for p in e['loc'] if p != 'body')}: {e['msg']}" for e in exc.errors()]
        return error(400, "invalid request: " + "; ".join(parts))

    @app.exception_handler(ValueError)
    async def _bad_value(_: Request, exc: ValueError) -> JSONResponse:
        return error(400, str(exc))

    @app.exception_handler(EngineClosed)
    async def _closed(_: Request, exc: EngineClosed) -> JSONResponse:
        return error(503, str(exc))

    @app.post("/generate")
    async def generate(body: GenerateBody) -> dict[str, Any]:
        if (body.text is None) == (body.input_ids is None):
            raise ValueError("give exactly one of `text` or `input_ids`")
        ids = body.input_ids if body.input_ids is not None else engine.tokenizer(body.text)["input_ids"]
        sp = body.sampling_params
        sampling = SamplingParams(max_new_tokens=sp.max_new_tokens, temperature=sp.temperature, top_p=sp.top_p,
                                  top_k=sp.top_k, stop_token_ids=sp.stop_token_ids or [], seed=sp.sampling_seed)
        start = body.logprob_start_len if body.return_logprob else -1
        out = await _or_closed(engine.run(EngineRequest(ids, sampling, ignore_eos=sp.ignore_eos, logprob_start=start)))
        return {"text": engine.decode(out.output_ids, sp.skip_special_tokens), "output_ids": out.output_ids,
                "meta_info": _meta(out, body.rid, body.return_logprob, ids, start)}

    @app.post("/update_weights_from_disk")
    async def update_weights(body: UpdateWeightsBody) -> JSONResponse:
        if not _inside(body.model_path, roots):
            allowed = ", ".join(map(str, roots)) or "none: this server was started without weights dirs"
            return JSONResponse({"success": False, "num_paused_requests": 0,
                                 "message": f"weights load only from the allowed folders ({allowed}), "
                                            f"not {body.model_path}"}, status_code=403)
        try:
            version = await engine.update_weights(body.model_path, body.weight_version)
        except (OSError, ValueError) as e:
            return JSONResponse({"success": False, "message": f"{type(e).__name__}: {e}", "num_paused_requests": 0},
                                status_code=400)
        engine.model_path = body.model_path
        return JSONResponse({"success": True, "message": f"Succeeded to update model weights (version {version}).",
                             "num_paused_requests": 0})  # SGLang's answer: no version (GET /model_info has it)

    @app.get("/health")
    async def health() -> JSONResponse:
        return JSONResponse({}, status_code=200 if await engine.health() else 503)

    @app.get("/get_model_info")
    @app.get("/model_info")
    async def model_info() -> dict[str, Any]:
        return {"model_path": engine.model_path, "served_model_name": name, "tokenizer_path": engine.model_path,
                "is_generation": True, "weight_version": str(engine.weight_version)}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "openclaw"}]}

    @app.post("/v1/chat/completions")
    async def chat(body: ChatBody) -> dict[str, Any]:
        messages = [{"role": m.role, "content": _text(m.content)} for m in body.messages]
        ids = _chat_ids(engine, messages)
        max_new = body.max_completion_tokens or body.max_tokens or engine.max_positions - len(ids)
        outs = await _or_closed(asyncio.gather(*[
            engine.run(EngineRequest(ids, SamplingParams(max_new_tokens=max_new, temperature=body.temperature,
                                                         top_p=body.top_p,
                                                         seed=None if body.seed is None else body.seed + i)))
            for i in range(body.n)]))
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": name,
            "choices": [{"index": i, "message": {"role": "assistant", "content": engine.decode(o.output_ids)},
                         "finish_reason": o.finish_reason, "logprobs": None} for i, o in enumerate(outs)],
            "usage": {"prompt_tokens": len(ids), "completion_tokens": sum(len(o.output_ids) for o in outs),
                      "total_tokens": len(ids) + sum(len(o.output_ids) for o in outs)},
        }

    return app


def _meta(out: Output, rid: str | None, with_logprobs: bool, ids: list[int], start: int) -> dict[str, Any]:
    finish: dict[str, Any] = ({"type": "stop", "matched": out.matched} if out.finish_reason == "stop"
                              else {"type": "length", "length": len(out.output_ids)})
    meta: dict[str, Any] = {"id": rid or uuid.uuid4().hex, "finish_reason": finish, "prompt_tokens": out.prompt_tokens,
                            "completion_tokens": len(out.output_ids), "cached_tokens": 0,
                            "weight_version": str(out.weight_version)}
    if with_logprobs:
        meta["output_token_logprobs"] = [[lp, t, None] for lp, t in zip(out.output_logprobs, out.output_ids)]
        meta["input_token_logprobs"] = ([[lp, t, None] for lp, t in zip(out.input_logprobs, ids[start:])]
                                        if start >= 0 else [])
    return meta


def _text(content: str | list[dict[str, Any]] | None) -> str:
    """OpenAI content may be a list of parts; only text parts mean anything to a text model."""
    if content is None or isinstance(content, str):
        return content or ""
    return "".join(p.get("text", "") for p in content if p.get("type") == "text")


def _chat_ids(engine: Engine, messages: list[dict[str, str]]) -> list[int]:
    enc = engine.tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)
    return list(enc["input_ids"])


class ServerHandle:
    """A uvicorn server in a background thread; `stop()` shuts it down (idempotent)."""

    def __init__(self, server: uvicorn.Server, thread: threading.Thread, url: str) -> None:
        self._server, self._thread, self.url = server, thread, url
        self.api_key: str | None = None  # the Bearer key its clients send (serve() sets it)

    def stop(self, timeout_s: float = 10.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout_s)

    def alive(self) -> bool:
        return self._thread.is_alive()

    def __enter__(self) -> "ServerHandle":
        return self

    def __exit__(self, *_: Any) -> None:
        self.stop()


def serve(engine: Engine, host: str = "127.0.0.1", port: int = 0, startup_timeout_s: float = 30.0,
          served_model_name: str | None = None, api_key: str | None = None,
          weights_dirs: Iterable[str | Path] = (), docs: bool = False) -> ServerHandle:
    """Serve `engine` in a background thread; returns once the server accepts connections.
    Without `api_key` a random one is made; either way it is `handle.api_key`."""
    key = api_key or new_key()
    handle = serve_app(create_app(engine, served_model_name, api_key=key, weights_dirs=weights_dirs, docs=docs),
                       host, port, startup_timeout_s, "engine-http")
    handle.api_key = key
    return handle


def serve_app(app: Any, host: str = "127.0.0.1", port: int = 0, startup_timeout_s: float = 30.0,
              name: str = "http") -> ServerHandle:
    """Serve an ASGI app in a background thread; returns once the server accepts connections."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))  # bind here so port=0 yields the real port before uvicorn starts
    # keep-alive well past a client's idle gaps, so pooled connections are rarely closed under it
    config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=5,
                            timeout_keep_alive=120)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=name, daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            sock.close()
            raise RuntimeError(f"{name} server did not start on {host}:{sock.getsockname()[1]}")
        time.sleep(0.02)
    return ServerHandle(server, thread, f"http://{host}:{sock.getsockname()[1]}")


def arg_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2", help="tiny, smollm2 or a local HF folder")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--max-batch", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=30000)
    ap.add_argument("--api-key", default=os.environ.get("OPENCLAW_POLICY_API_KEY"),
                    help="Bearer key every client must send (default: $OPENCLAW_POLICY_API_KEY; required)")
    ap.add_argument("--weights-dir", action="append", default=[],
                    help="a folder /update_weights_from_disk may load from (repeat for more; none: no updates)")
    ap.add_argument("--docs", action="store_true", help="serve /docs and /openapi.json")
    return ap


def main(argv: list[str] | None = None) -> None:
    ap = arg_parser()
    args = ap.parse_args(argv)
    if not args.api_key:
        ap.error("--api-key (or $OPENCLAW_POLICY_API_KEY) is required")
    logging.basicConfig(level=logging.INFO)
    engine = Engine(args.model, dtype=args.dtype, device=args.device, max_batch=args.max_batch, seed=args.seed)
    app = create_app(engine, api_key=args.api_key, weights_dirs=args.weights_dir, docs=args.docs)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level="info")
    try:
        uvicorn.Server(config).run()  # returns on Ctrl-C / SIGTERM
    finally:
        engine.close()


if __name__ == "__main__":
    main()
