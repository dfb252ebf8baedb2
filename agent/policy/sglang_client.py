"""PolicyClient over SGLang's native HTTP API: a real SGLang server or the embedded engine's."""
from __future__ import annotations

from typing import Any

import httpx

from agent.policy.base import GenerateResult, SamplingParams
from agent.policy.jsonhttp import ServerError, request_json


class SGLangClient:
    def __init__(self, url: str, timeout: float = 600.0, retries: int = 3) -> None:
        self.url = url.rstrip("/")
        self.retries = retries
        self._http = httpx.AsyncClient(base_url=self.url, timeout=httpx.Timeout(timeout, connect=10.0),
                                       limits=httpx.Limits(max_connections=None, max_keepalive_connections=64))

    async def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """Any SGLang route, raw JSON in and out (e.g. /generate with fields beyond SamplingParams)."""
        return await request_json(self._http, method, path, body, retries=self.retries)

    async def generate(self, input_ids: list[int], sampling: SamplingParams) -> GenerateResult:
        out = await self.request("POST", "/generate", {
            "input_ids": list(input_ids), "sampling_params": sampling.to_sglang(), "return_logprob": True})
        return parse_generate(out)

    async def score(self, input_ids: list[int], start: int) -> list[float]:
        if not 1 <= start <= len(input_ids):
            raise ValueError(f"score: start must be in [1, {len(input_ids)}], got {start}")
        # SGLang's input_token_logprobs cover input_ids[logprob_start_len:] with None first, so
        # starting one early and dropping that None gives exactly the log-probs of input_ids[start:].
        out = await self.request("POST", "/generate", {
            "input_ids": list(input_ids), "sampling_params": {"max_new_tokens": 0, "temperature": 0.0},
            "return_logprob": True, "logprob_start_len": start - 1})
        entries = out["meta_info"]["input_token_logprobs"][1:]
        if len(entries) != len(input_ids) - start:
            raise ServerError(200, f"score: expected {len(input_ids) - start} log-probs, got {len(entries)}")
        return [float(e[0]) for e in entries]

    async def update_weights(self, model_path: str, weight_version: int | None = None) -> int:
        body: dict[str, Any] = {"model_path": model_path}
        if weight_version is not None:
            body["weight_version"] = str(weight_version)  # SGLang keeps versions as strings
        out = await self.request("POST", "/update_weights_from_disk", body)
        if not out.get("success", False):
            raise ServerError(200, out.get("message", "update_weights_from_disk failed"))
        if "weight_version" in out:
            return _version(out["weight_version"])
        if weight_version is not None:
            return weight_version
        return _version((await self.request("GET", "/get_model_info")).get("weight_version"))

    async def health(self) -> bool:
        try:
            await request_json(self._http, "GET", "/health", retries=0)
            return True
        except ServerError:
            return False

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "SGLangClient":
        return self

    async def __aexit__(self, *_: Any) -> None:
        await self.aclose()


def parse_generate(out: dict[str, Any]) -> GenerateResult:
    """SGLang's /generate answer -> GenerateResult (output_token_logprobs are [logprob, id, text])."""
    meta = out["meta_info"]
    entries = meta.get("output_token_logprobs") or []
    ids = [int(e[1]) for e in entries] if entries else list(out.get("output_ids", []))
    finish = meta.get("finish_reason") or {}
    reason = finish.get("type", "length") if isinstance(finish, dict) else str(finish)
    return GenerateResult(output_ids=ids, logprobs=[float(e[0]) for e in entries],
                          finish_reason="stop" if reason == "stop" else "length",
                          weight_version=_version(meta.get("weight_version")), text=out.get("text", ""))


def _version(v: Any) -> int:
    """SGLang's weight_version is a free string ("default" before any update); ours are integers."""
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0
