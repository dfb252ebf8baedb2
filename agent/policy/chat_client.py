"""The chat client of LLM judges and LLM-backed users: the official `openai` client against any
OpenAI-compatible endpoint, behind the one call they make (`complete`)."""
from __future__ import annotations

from typing import Any

import openai

from agent.policy.jsonhttp import ServerError


class ChatClient:
    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout: float = 300.0,
                 retries: int = 3) -> None:
        """`base_url` is the server root or its /v1 prefix (e.g. http://127.0.0.1:30000/v1)."""
        root = base_url.rstrip("/")
        self.model = model
        # A local server has no key: the client insists on one, the server ignores an unknown one.
        self._client = openai.AsyncOpenAI(base_url=root if root.endswith("/v1") else root + "/v1",
                                          api_key=api_key or "none", timeout=timeout, max_retries=retries)

    async def complete(self, messages: list[dict[str, Any]], temperature: float = 0.6, max_tokens: int = 1024,
                       n: int = 1) -> list[str]:
        """`n` completions of the conversation; a missing content counts as ""."""
        try:
            out = await self._client.chat.completions.create(
                model=self.model, messages=messages, temperature=temperature, max_tokens=max_tokens, n=n)
        except openai.APIStatusError as e:
            raise ServerError(e.status_code, str(e.message)[:500]) from e
        except openai.OpenAIError as e:  # no connection, a timeout, a body that is not a completion
            raise ServerError(0, f"{type(e).__name__}: {e}"[:500]) from e
        return [c.message.content or "" for c in sorted(out.choices, key=lambda c: c.index)]

    async def aclose(self) -> None:
        await self._client.close()

    async def __aenter__(self) -> "ChatClient":
        return self

    async def __aexit__(self, *_: Any) -> None:
        await self.aclose()
