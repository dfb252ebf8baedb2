"""JSON over HTTP for the policy and chat clients: one timeout per call, bounded retries on
connection errors, and errors that carry the server's own message.

A connection the server closed while the client reused it (keep-alive race, worst under load)
surfaces as ReadError/WriteError: those are retried too. Every route the clients call is safe
to repeat (generation and scoring have no side effects; a weight update names its version)."""
from __future__ import annotations

import asyncio
from typing import Any

import httpx

RETRYABLE = (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


class ServerError(RuntimeError):
    """The server answered with an error status (or could not be reached); `status` is 0 then."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status
        self.message = message


async def request_json(client: httpx.AsyncClient, method: str, path: str, body: dict[str, Any] | None = None,
                       retries: int = 3, backoff_s: float = 0.5) -> Any:
    """Send one JSON request; return the decoded JSON body of a 2xx answer, else raise ServerError."""
    for attempt in range(retries + 1):
        try:
            resp = await client.request(method, path, json=body)
            break
        except RETRYABLE as e:
            if attempt == retries:
                raise ServerError(0, f"cannot reach {client.base_url}{path} after {retries + 1} tries: {e!r}") from e
            await asyncio.sleep(backoff_s * 2**attempt)
        except httpx.TimeoutException as e:
            raise ServerError(0, f"{method} {client.base_url}{path} timed out: {e!r}") from e
    if resp.is_success:
        return resp.json() if resp.content else {}
    raise ServerError(resp.status_code, _message(resp))


def _message(resp: httpx.Response) -> str:
    """The server's own words: SGLang/OpenAI {"error": {"message"}}, FastAPI {"detail"}, or {"message"}."""
    try:
        data = resp.json()
    except ValueError:
        return resp.text[:2000] or resp.reason_phrase
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict) and "message" in err:
            return str(err["message"])
        for key in ("message", "detail", "error"):
            if key in data:
                return str(data[key])
    return str(data)[:2000]
