"""What a client sends the live-user proxy, parsed and validated: the chat-completions body, the
headers that place a request in its session (agent/proxy/__init__.py lists them), and the body of
POST /v1/sessions/{id}/end. Anything wrong is a ValueError with one line for the client (400)."""
from __future__ import annotations

import dataclasses
import json
import uuid
from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent.proxy.openai_compat import content_text
from agent.proxy.sessions import NEXT_STATE_KINDS

TRUTHY = {"1", "true", "yes", "on"}
FALSY = {"0", "false", "no", "off"}


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


@dataclasses.dataclass(frozen=True)
class Routing:
    """Where a chat request belongs: its session, whether it is a main turn, and what is recorded."""

    session_id: str  # the client's, or a fresh `anon-...` id: a request without one is a session of its own
    main: bool  # X-Turn-Type main (recorded) or side (served only)
    done: bool  # the session is over after this request
    train: bool  # X-Train: this request may be recorded
    session_train: bool  # X-Session-Train: this session may be recorded (sticky once false)


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


def _flag(headers: Mapping[str, str], header: str) -> bool:
    """A true/false header (missing: true)."""
    value = (headers.get(header) or "true").strip().lower()
    if value not in TRUTHY | FALSY:
        raise ValueError(f"{header} must be true or false, got {value!r}")
    return value in TRUTHY


def parse_routing(headers: Mapping[str, str]) -> Routing:
    """A chat request's session headers (lower-case names, as Starlette's headers look them up)."""
    train, session_train = _flag(headers, "x-train"), _flag(headers, "x-session-train")
    turn_type = (headers.get("x-turn-type") or "main").strip().lower()
    if turn_type not in ("main", "side"):
        raise ValueError(f"X-Turn-Type must be main or side, got {turn_type!r}")
    session_id = headers.get("x-session-id") or ""
    done = (headers.get("x-session-done") or "").strip().lower() in TRUTHY or not session_id
    return Routing(session_id or f"anon-{uuid.uuid4().hex}", turn_type == "main", done, train, session_train)


def parse_end(raw: bytes) -> dict[str, Any] | None:
    """The closing message of POST /v1/sessions/{id}/end (None: an empty body or none given),
    its content as text."""
    data = parse_json(raw)
    if not isinstance(data, dict):
        raise ValueError('the body must be JSON: {"message": {"role": ..., "content": ...}} or empty')
    message = data.get("message")
    if message is None:
        return None
    if not (isinstance(message, dict) and message.get("role") in NEXT_STATE_KINDS):
        raise ValueError("message must be an object with role user or tool")
    return {**message, "content": content_text(message.get("content"))}
