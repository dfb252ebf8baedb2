"""A small client for any OpenAI-compatible chat endpoint (LLM judges, LLM-backed users)."""
from __future__ import annotations

from typing import Any

import httpx

from agent.policy.jsonhttp import ServerError, request_json


class ChatClient:
    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout: float = 300.0,
                 retries: int = 3) -> None:
        """`base_url` is the server root or its /v1 prefix (e.g. http://127.0.0.1:30000/v1)."""
        root = base_url.rstrip("/")
        self.model = model
        self.retries = retries
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(base_url=root if root.endswith("/v1") else root + "/v1", headers=headers,
                                       timeout=httpx.Timeout(timeout, connect=10.0))

    async def complete(self, messages: list[dict[str, Any]], temperature: float = 0.6, max_tokens: int = 1024,
                       n: int = 1) -> list[str]:
        """`n` completions of the conversation; a missing content counts as ""."""
        out = await request_json(self._http, "POST", "/chat/completions", {
            "model": self.model, "messages": messages, "temperature": temperature, "max_tokens": max_tokens, "n": n,
        }, retries=self.retries)
        try:
            choices = sorted(out["choices"], key=lambda c: c.get("index", 0))
            return [c["message"].get("content") or "" for c in choices]
        except (KeyError, TypeError, AttributeError) as e:
            raise ServerError(200, f"malformed chat completion: {str(out)[:500]}") from e

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "ChatClient":
        return self

    async def __aexit__(self, *_: Any) -> None:
        await self.aclose()
