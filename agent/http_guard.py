"""What every HTTP server of ours checks before a route runs: the Bearer key and the body size."""
from __future__ import annotations

import hmac
import json
import secrets
from typing import Any, Awaitable, Callable

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def new_key() -> str:
    """A random key for a server whose clients live in the same process (or are launched by it)."""
    return secrets.token_urlsafe(32)


def bearer_ok(header: str | None, key: str) -> bool:
    """`Authorization: Bearer <key>` (compared in constant time)."""
    scheme, _, given = (header or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), key.encode())


async def send_json(send: Send, status: int, body: dict[str, Any], close: bool = False) -> None:
    """A whole JSON answer straight from ASGI middleware."""
    data = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


class BodyLimit:
    """ASGI middleware: a request body over `max_bytes` is answered 413 at once, from its
    Content-Length or, for a chunked body, as soon as the bytes received pass the limit; the
    rest is never read and the app never runs. Bodies within the limit are read here and handed
    to the app whole."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], max_bytes: int) -> None:
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be > 0, got {max_bytes}")
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            return await self._refuse(send)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            size += len(body)
            if size > self.max_bytes:
                return await self._refuse(send)
            chunks.append(body)
            if not message.get("more_body"):
                break
        whole: Message | None = {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        async def replay() -> Message:
            nonlocal whole
            if whole is not None:
                message, whole = whole, None
                return message
            return await receive()  # after the body: the disconnect, when it comes

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        await send_json(send, 413, {"error": {"message": f"request body over the limit of {self.max_bytes} bytes",
                                              "type": "invalid_request_error", "code": 413}}, close=True)


class RequireKey:
    """ASGI middleware: every HTTP request but those in `open` ((method, path) pairs) must carry
    `Authorization: Bearer <key>`; others get 401 before any route runs."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], key: str,
                 open: frozenset[tuple[str, str]] = frozenset()) -> None:
        if not key:
            raise ValueError("RequireKey needs a key")
        self.app, self.key, self.open = app, key, open

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (scope["method"], scope["path"]) not in self.open:
            header = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
            if not bearer_ok(header, self.key):
                return await send_json(send, 401, {"error": {
                    "message": "missing or wrong API key (send Authorization: Bearer <key>)",
                    "type": "invalid_api_key", "code": 401}})
        await self.app(scope, receive, send)
