"""The OpenAI chat-completions wire format for the live-user proxy (agent/proxy/).

Two directions: request messages -> the plain {role, content} messages a chat template renders,
and a sampled reply's raw text -> an OpenAI assistant message (with `tool_calls` when the text
holds <tool_call> blocks), a completion body, or the SSE chunks of a streamed one.
"""
from __future__ import annotations

import json
import time
import uuid
from typing import Any, Iterator

from envs.tool_calls import parse_action, render_tool_call


def content_text(content: Any) -> str:
    """OpenAI content may be None, a string or a list of parts; only text parts reach a text model."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    raise ValueError(f"message content must be a string, a list of parts or null, not {type(content).__name__}")


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Request messages as the chat template sees them: `developer` is `system`, parts are text,
    an assistant's `tool_calls` are written back as the <tool_call> blocks the model emits."""
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ValueError(f"messages[{i}] must be an object with a string `role`")
        role = "system" if m["role"] == "developer" else m["role"]
        text = content_text(m.get("content"))
        if role == "assistant" and m.get("tool_calls"):
            try:
                blocks = [render_tool_call(c["function"]["name"], _arguments(c["function"].get("arguments")))
                          for c in m["tool_calls"]]
            except (KeyError, TypeError) as e:
                raise ValueError(f"messages[{i}].tool_calls: each needs function.name ({e!r})") from e
            text = "\n".join(([text] if text else []) + blocks)
        out.append({"role": role, "content": text})
    return out


def _arguments(args: Any) -> Any:
    """Tool-call arguments arrive as a JSON string; anything unreadable is kept as given."""
    if isinstance(args, str):
        try:
            return json.loads(args)
        except json.JSONDecodeError:
            return args
    return args if args is not None else {}


def assistant_message(raw: str) -> tuple[dict[str, Any], str | None]:
    """The OpenAI message for a reply's raw text, and "tool_calls" when it holds any (else None).

    Unreadable tool-call blocks are not guessed at: the reply then goes back as plain text."""
    parsed = parse_action(raw)
    if not parsed.calls or parsed.errors:
        return {"role": "assistant", "content": raw}, None
    calls = [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
              "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}}
             for c in parsed.calls]
    return {"role": "assistant", "content": parsed.text or None, "tool_calls": calls}, "tool_calls"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def completion_body(model: str, raw: str, finish_reason: str, prompt_tokens: int,
                    completion_tokens: int) -> dict[str, Any]:
    """A non-streamed chat.completion. `finish_reason` is the sampler's ("stop" or "length")."""
    message, calls = assistant_message(raw)
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": [{"index": 0, "message": message, "logprobs": None,
                                         "finish_reason": calls or finish_reason}],
            "usage": usage(prompt_tokens, completion_tokens)}


def stream_events(model: str, raw: str, finish_reason: str, prompt_tokens: int, completion_tokens: int,
                  include_usage: bool = False) -> Iterator[str]:
    """The SSE events of a streamed chat.completion.chunk sequence, ending with `data: [DONE]`."""
    message, calls = assistant_message(raw)
    base = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk", "created": int(time.time()),
            "model": model}

    def event(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        chunk = {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}], **extra}
        return f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"

    yield event({"role": "assistant", "content": ""})
    if message.get("content"):
        yield event({"content": message["content"]})
    for i, call in enumerate(message.get("tool_calls", [])):
        yield event({"tool_calls": [{"index": i, **call}]})
    yield event({}, calls or finish_reason)
    if include_usage:
        chunk = {**base, "choices": [], "usage": usage(prompt_tokens, completion_tokens)}
        yield f"data: {json.dumps(chunk)}\n\n"
    yield "data: [DONE]\n\n"
