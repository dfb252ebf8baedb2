"""PolicyClient over SGLang's native HTTP API: a real SGLang server or the embedded engine's.

A server that stops answering (connection refused or a timeout, and /health fails too) is
either brought back by its supervisor (a launched server: restarted, the last loaded weights
loaded again, the request sent once more) or, with none (an attached server), ends the run
with PolicyUnavailable instead of failing every later episode."""
from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable, Protocol

import httpx

from agent.policy.base import GenerateResult, PolicyUnavailable, SamplingParams
from agent.policy.jsonhttp import ServerError, request_json


class Supervisor(Protocol):
    async def recover(self, since: float, reload: Callable[[], Awaitable[None]]) -> None:
        """Make the server answer again if it has not been restarted since `since` (monotonic
        seconds), then await `reload()`; raise PolicyUnavailable when it cannot."""
        ...


class SGLangClient:
    def __init__(self, url: str, timeout: float = 600.0, retries: int = 3, supervisor: Supervisor | None = None,
                 api_key: str | None = None) -> None:
        """`api_key` is sent as `Authorization: Bearer <key>` (SGLang's `--api-key`, our server's key)."""
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.retries = retries
        self.supervisor = supervisor
        self.loaded: tuple[str, int] | None = None  # the last weights the server took: (folder, version)
        self._weights_lock = asyncio.Lock()
        self._http = httpx.AsyncClient(base_url=self.url, timeout=httpx.Timeout(timeout, connect=10.0),
                                       headers={"Authorization": f"Bearer {api_key}"} if api_key else {},
                                       limits=httpx.Limits(max_connections=None, max_keepalive_connections=64))

    async def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """Any SGLang route, raw JSON in and out (e.g. /generate with fields beyond SamplingParams)."""
        while True:
            since = time.monotonic()
            try:
                return await self._send(method, path, body)
            except ServerError as e:
                await self._recover_or_raise(e, since)

    async def _send(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        return await request_json(self._http, method, path, body, retries=self.retries)

    async def _recover_or_raise(self, error: ServerError, since: float) -> None:
        """Return once a server that went away answers again (the caller retries); else raise."""
        if error.status != 0 or await self.health():  # an answer, or a server that is still there
            raise error
        if self.supervisor is None:
            raise PolicyUnavailable(f"the policy server at {self.url} stopped answering ({error.message}); it was "
                                    "attached (policy.url), so restart it, then resume the run (resume=true)") from error
        await self.supervisor.recover(since, self._reload_weights)

    async def generate(self, input_ids: list[int], sampling: SamplingParams) -> GenerateResult:
        out = await self.request("POST", "/generate", generate_body(input_ids, sampling))
        return parse_generate(out)

    async def score(self, input_ids: list[int], start: int) -> list[float]:
        out = await self.request("POST", "/generate", score_body(input_ids, start))
        entries = out["meta_info"]["input_token_logprobs"][1:]
        if len(entries) != len(input_ids) - start:
            raise ServerError(200, f"score: expected {len(input_ids) - start} log-probs, got {len(entries)}")
        return [float(e[0]) for e in entries]

    async def update_weights(self, model_path: str, weight_version: int | None = None) -> int:
        body = update_weights_body(model_path, weight_version)
        while True:
            since = time.monotonic()
            async with self._weights_lock:  # a restart's reload never interleaves with an update
                try:
                    out = await self._send("POST", "/update_weights_from_disk", body)
                    _check_loaded(out)
                    version = weight_version  # SGLang's answer is success/message only; /model_info has the version
                    if version is None:
                        version = _version((await self._send("GET", "/model_info")).get("weight_version"))
                    self.loaded = (model_path, version)
                    return version
                except ServerError as e:
                    failure = e
            await self._recover_or_raise(failure, since)

    async def _reload_weights(self) -> None:
        """A restarted server starts from the base model: give it the weights it had."""
        async with self._weights_lock:
            if self.loaded is not None:
                _check_loaded(await self._send("POST", "/update_weights_from_disk", update_weights_body(*self.loaded)))

    async def health(self, timeout_s: float = 10.0) -> bool:
        try:
            return (await self._http.get("/health", timeout=timeout_s)).status_code == 200
        except httpx.HTTPError:
            return False

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "SGLangClient":
        return self

    async def __aexit__(self, *_: Any) -> None:
        await self.aclose()


# The request bodies, one function each, so a test can check them against SGLang's own schema.
def generate_body(input_ids: list[int], sampling: SamplingParams) -> dict[str, Any]:
    return {"input_ids": list(input_ids), "sampling_params": sampling.to_sglang(), "return_logprob": True}


def score_body(input_ids: list[int], start: int) -> dict[str, Any]:
    """Prefill only. SGLang's input_token_logprobs cover input_ids[logprob_start_len:] with None
    first, so starting one early and dropping that None gives exactly those of input_ids[start:]."""
    if not 1 <= start <= len(input_ids):
        raise ValueError(f"score: start must be in [1, {len(input_ids)}], got {start}")
    return {"input_ids": list(input_ids), "sampling_params": {"max_new_tokens": 0, "temperature": 0.0},
            "return_logprob": True, "logprob_start_len": start - 1}


def update_weights_body(model_path: str, weight_version: int | None) -> dict[str, Any]:
    body: dict[str, Any] = {"model_path": model_path}
    if weight_version is not None:
        body["weight_version"] = str(weight_version)  # SGLang keeps versions as strings
    return body


def _check_loaded(out: Any) -> None:
    if not out.get("success", False):
        raise ServerError(200, out.get("message", "update_weights_from_disk failed"))


def parse_generate(out: dict[str, Any]) -> GenerateResult:
    """SGLang's /generate answer -> GenerateResult (output_token_logprobs are [logprob, id, text]).
    An aborted generation is an error, not a truncated sample to train on."""
    meta = out["meta_info"]
    entries = meta.get("output_token_logprobs") or []
    ids = [int(e[1]) for e in entries] if entries else list(out.get("output_ids", []))
    finish = meta.get("finish_reason") or {}
    reason = finish.get("type", "length") if isinstance(finish, dict) else str(finish)
    if reason == "abort":  # SGLang answers 200 for an abort without a status (e.g. abort_all_requests)
        raise ServerError(200, f"generation aborted by the server: {finish.get('message') if isinstance(finish, dict) else finish}")
    return GenerateResult(output_ids=ids, logprobs=[float(e[0]) for e in entries],
                          finish_reason="stop" if reason == "stop" else "length",
                          weight_version=_version(meta.get("weight_version")), text=out.get("text", ""))


def _version(v: Any) -> int:
    """SGLang's weight_version is a free string ("default" before any update); ours are integers."""
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0
